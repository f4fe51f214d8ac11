package main

// The CLI as users type it: --version after any command, shell completion,
// kubectl's -n and --context handed to the plugin, and one wording of
// --kubeconfig.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionOnEveryCommand: --version answers after every command, of the
// binary and of the plugin, and before any.
func TestVersionOnEveryCommand(t *testing.T) {
	var argvs [][]string
	argvs = append(argvs, []string{"--version"})
	for _, c := range commands() {
		argvs = append(argvs, []string{c.name, "--version"})
	}
	for _, args := range argvs {
		rc, out, errOut := runArgs(args...)
		if rc != 0 || !strings.HasPrefix(out, "dra-exporter, version") {
			t.Errorf("dra-exporter %v: exit %d, stdout %q, stderr %q; want 0 and the version", args, rc, out, errOut)
		}
	}
	for _, args := range [][]string{{"--version"}, {"gates", "--version"}, {"explain", "--version"}, {"bundle", "--version"}} {
		var out, errOut bytes.Buffer
		if rc := runPlugin(args, &out, &errOut); rc != 0 || !strings.HasPrefix(out.String(), "dra-exporter, version") {
			t.Errorf("kubectl dra-exporter %v: exit %d, %q %q", args, rc, out.String(), errOut.String())
		}
	}
}

// TestKubeconfigHelpSaysTheSame: every command that reads the cluster words
// --kubeconfig the same way, in the order kube.RESTConfig tries (its test
// checks that order).
func TestKubeconfigHelpSaysTheSame(t *testing.T) {
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	n := 0
	for _, c := range commands() {
		_, out, _ := runArgs(c.name, "--help")
		if !strings.Contains(out, "--kubeconfig") {
			continue
		}
		n++
		if !strings.Contains(norm(out), "--kubeconfig=PATH "+norm(kubeconfigHelp)) {
			t.Errorf("%s --help words --kubeconfig otherwise than %q:\n%s", c.name, kubeconfigHelp, out)
		}
	}
	if n < 5 {
		t.Errorf("only %d commands have --kubeconfig, want serve, node, explain, gates, bundle", n)
	}
	// --context, where a command has it, is worded once too.
	for _, c := range []string{"explain", "gates", "bundle"} {
		if _, out, _ := runArgs(c, "--help"); !strings.Contains(norm(out), "--context=CONTEXT "+norm(contextHelp)) {
			t.Errorf("%s --help words --context otherwise than %q:\n%s", c, contextHelp, out)
		}
	}
}

// TestPluginNamespaceAndContext: kubectl hands "-n NS" and "--context C" to
// the plugin as typed; gates and explain take the namespace from -n, and
// --context picks the kubeconfig's context (its server is the one dialled).
func TestPluginNamespaceAndContext(t *testing.T) {
	path := writeBundle(t, onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok", "control-holds"), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	var out, errOut bytes.Buffer
	if rc := runPlugin([]string{"gates", "-n", "llm-canary", "--from", path}, &out, &errOut); rc != gatesPartial || !strings.Contains(out.String(), "Rollout gates of namespace llm-canary") {
		t.Errorf("kubectl dra-exporter gates -n llm-canary: exit %d\n%s%s", rc, out.String(), errOut.String())
	}
	out.Reset()
	if rc := runPlugin([]string{"explain", "-n", "llm-canary", "llm-canary-ok", "--from", gatesObjects}, &out, &errOut); rc != explainReady || !strings.Contains(out.String(), "Pod llm-canary/llm-canary-ok") {
		t.Errorf("kubectl dra-exporter explain -n llm-canary llm-canary-ok: exit %d\n%s%s", rc, out.String(), errOut.String())
	}

	kubeconfig := filepath.Join(t.TempDir(), "config")
	cfg := `apiVersion: v1
kind: Config
current-context: first
clusters:
- name: first
  cluster: {server: "https://127.0.0.1:1"}
- name: second
  cluster: {server: "https://127.0.0.1:2"}
users:
- name: u
  user: {token: t}
contexts:
- name: first
  context: {cluster: first, user: u}
- name: second
  context: {cluster: second, user: u}
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"explain", "-n", "llm", "pod-0", "--timeout", "2s"},
		{"gates", "-n", "llm", "-l", "app=x", "--timeout", "2s"},
		{"bundle", "-o", filepath.Join(t.TempDir(), "b.tar.gz"), "--timeout", "2s"},
	} {
		for ctx, server := range map[string]string{"": "127.0.0.1:1", "second": "127.0.0.1:2"} {
			a := append(append([]string{}, args...), "--kubeconfig", kubeconfig)
			if ctx != "" {
				a = append(a, "--context", ctx)
			}
			var out, errOut bytes.Buffer
			rc := runPlugin(a, &out, &errOut)
			if rc == 0 || !strings.Contains(errOut.String(), server) {
				t.Errorf("kubectl dra-exporter %v: exit %d, want a failure dialling %s (context %q):\n%s", a, rc, server, ctx, errOut.String())
			}
		}
	}
}

// TestShellCompletion: the bash completion script parses (bash -n), and
// bash, given COMP_WORDS as it sets them, completes the commands, their
// flags and the values of an enum flag, by running the binary.
func TestShellCompletion(t *testing.T) {
	bin := buildBinary(t)
	dir := filepath.Dir(bin)
	script, err := exec.Command(bin, "--completion-script-bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "completion.bash")
	if err := os.WriteFile(scriptPath, script, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", scriptPath).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s\n%s", err, out, script)
	}
	for _, tc := range []struct {
		words []string // after the program; the last is completed
		want  string
	}{
		{[]string{"ga"}, "gates"},
		{[]string{""}, "bundle docs explain gates gpu-check help node serve snapshot version"},
		{[]string{"gates", "--sel"}, "--selector"},
		{[]string{"gates", "--output", ""}, "json text"},
		{[]string{"explain", "--kubec"}, "--kubeconfig"},
		{[]string{"explain", "--cont"}, "--context"},
		{[]string{"--web.listen"}, "--web.listen-address"},
	} {
		words := append([]string{"dra-exporter"}, tc.words...)
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = fmt.Sprintf("%q", w)
		}
		prog := fmt.Sprintf(`source %q; COMP_WORDS=(%s); COMP_CWORD=%d; _dra_exporter_bash_autocomplete; printf '%%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '`,
			scriptPath, strings.Join(quoted, " "), len(words)-1)
		cmd := exec.Command("bash", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("completing %q: %q (%v), want %q", tc.words, got, err, tc.want)
		}
	}
}
