package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestPluginName(t *testing.T) {
	for argv0, want := range map[string]bool{
		"kubectl-dra_exporter": true, "/usr/local/bin/kubectl-dra_exporter": true, `C:\krew\bin\kubectl-dra_exporter.exe`: false, "kubectl-dra_exporter.exe": true,
		"dra-exporter": false, "/bin/dra-exporter": false, "kubectl-dra_exporter-old": false,
	} {
		if got := isPlugin(argv0); got != want {
			t.Errorf("isPlugin(%q) = %v, want %v", argv0, got, want)
		}
	}
}

// TestPluginCommands: as kubectl-dra_exporter the binary answers explain, gates,
// bundle and version, named as the user typed them, and refuses the
// exporter's own commands.
func TestPluginCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{nil, 2, "usage: kubectl dra-exporter <command> [<args> ...]"},
		{[]string{"--help"}, 0, "Show help."},
		{[]string{"help"}, 0, "\ngates\n"},
		{[]string{"serve"}, 2, `kubectl dra-exporter: error: unknown command "serve"`},
		{[]string{"node"}, 2, `unknown command "node"`},
		{[]string{"help", "node"}, 2, `unknown command "node"`},
		{[]string{"gates", "-h"}, 0, "usage: kubectl dra-exporter gates [<flags>] [NAMESPACE]"},
		{[]string{"help", "gates"}, 0, "usage: kubectl dra-exporter gates [<flags>] [NAMESPACE]"},
		{[]string{"gates"}, 2, "kubectl dra-exporter gates: error: the canary's namespace is required: NAMESPACE or -n NAMESPACE"},
		{[]string{"gates", "a", "-n", "b"}, 2, `kubectl dra-exporter gates: error: namespace "a" and -n "b" differ`},
		{[]string{"bundle", "-h"}, 0, "usage: kubectl dra-exporter bundle --output=FILE"},
		{[]string{"explain", "--help"}, 0, "usage: kubectl dra-exporter explain [<flags>] NAMESPACE/POD"},
		{[]string{"explain", "ns/pod", "--from", "/nonexistent/objects.yaml"}, 3, "kubectl dra-exporter explain: "},
		{[]string{"explain", "-n", "ns", "pod", "--from", "/nonexistent/objects.yaml"}, 3, "kubectl dra-exporter explain: "},
		{[]string{"explain", "-n", "other", "ns/pod"}, 2, "want NAMESPACE/POD (or POD with -n NAMESPACE)"},
		{[]string{"version"}, 0, "dra-exporter, version"},
	} {
		var out, errOut bytes.Buffer
		rc := runPlugin(tc.args, &out, &errOut)
		if rc != tc.rc || !strings.Contains(out.String()+errOut.String(), tc.want) {
			t.Errorf("kubectl dra-exporter %v: exit %d, want %d with %q:\n%s%s", tc.args, rc, tc.rc, tc.want, out.String(), errOut.String())
		}
	}
}

// TestKrewManifest renders the krew-release-bot template as the bot does
// and checks the plugin it describes: named dra-exporter, every platform
// installing the dra-exporter binary as kubectl-dra_exporter (kubectl runs
// kubectl-dra_exporter for "kubectl dra-exporter") with its LICENSE.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/krew/dra-exporter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\{\{ ?addURIAndSha "([^"]+)" \.TagName ?\}\}`).ReplaceAllString(string(raw),
		"uri: $1\n    sha256: "+strings.Repeat("ab", 32))
	text = strings.ReplaceAll(text, "{{ .TagName }}", "v0.1.0")
	if strings.Contains(text, "{{") {
		t.Fatalf("template actions the bot does not know are left:\n%s", text)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Homepage         string `json:"homepage"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
				Bin string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(text), &m); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "dra-exporter" || m.Spec.Version != "v0.1.0" {
		t.Errorf("header: %+v", m)
	}
	if m.Spec.ShortDescription == "" || len(m.Spec.ShortDescription) > 60 || !strings.Contains(m.Spec.Description, "kubectl dra-exporter gates") {
		t.Errorf("descriptions: %q / %q", m.Spec.ShortDescription, m.Spec.Description)
	}
	platforms := map[string]bool{}
	for _, p := range m.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		platforms[key] = true
		if p.Bin != "kubectl-dra_exporter" || len(p.Files) != 2 || p.Files[0].From != "dra-exporter" || p.Files[0].To != "kubectl-dra_exporter" ||
			p.Files[1].From != "LICENSE" {
			t.Errorf("%s: bin %q, files %+v: want dra-exporter installed as kubectl-dra_exporter, and the LICENSE", key, p.Bin, p.Files)
		}
		if !strings.HasPrefix(p.URI, "https://") || !strings.Contains(p.URI, strings.Replace(key, "/", "_", 1)) || len(p.SHA256) != 64 {
			t.Errorf("%s: uri %q sha256 %q", key, p.URI, p.SHA256)
		}
	}
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !platforms[want] {
			t.Errorf("no platform %s", want)
		}
	}
}
