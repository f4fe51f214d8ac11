package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// flagPages are the reference pages that document each command's flags.
var flagPages = map[string]string{
	"serve":     "docs/flags.md",
	"snapshot":  "docs/flags.md",
	"explain":   "docs/flags.md",
	"node":      "docs/node-agent.md",
	"gpu-check": "docs/node-agent.md",
	"gates":     "docs/gates.md",
	"bundle":    "docs/gates.md",
}

// helpFlag matches a flag's line in kingpin's help: "  -l, --selector=..."
// or "      --web.listen-address=...", booleans as "--[no-]name"; the
// flag's help text is indented further.
var helpFlag = regexp.MustCompile(`(?m)^  (?:-([a-zA-Z]), |    )--(?:\[no-\])?([^\s=]+)`)

// TestDocsDocumentEveryFlag fails when a command gains a flag that its
// reference page does not name as --name (and `-x` for a short form).
func TestDocsDocumentEveryFlag(t *testing.T) {
	for cmd, page := range flagPages {
		doc, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if rc := run([]string{cmd, "--help"}, &out, &errOut); rc != 0 {
			t.Errorf("%s --help exited %d, want 0: %s", cmd, rc, errOut.String())
		}
		flags := helpFlag.FindAllStringSubmatch(out.String(), -1)
		if len(flags) < 2 {
			t.Fatalf("%s --help listed %d flags:\n%s", cmd, len(flags), out.String())
		}
		for _, f := range undocumented(string(doc), flags) {
			t.Errorf("%s does not document %s %s", page, cmd, f)
		}
	}
}

// undocumented returns the flags of help lines (helpFlag's matches) that
// doc does not name.
func undocumented(doc string, flags [][]string) []string {
	var missing []string
	for _, f := range flags {
		short, long := f[1], f[2]
		if long == "help" || long == "version" {
			continue // every command's, documented once in docs/flags.md
		}
		if !regexp.MustCompile(`(^|[^\w.-])--` + regexp.QuoteMeta(long) + `([^\w.-]|$)`).MatchString(doc) {
			missing = append(missing, "--"+long)
		}
		if short != "" && !strings.Contains(doc, "`-"+short+"`") {
			missing = append(missing, "-"+short)
		}
	}
	return missing
}

// The check reads kingpin's help lines, and a page that lacks one flag
// fails it.
func TestUndocumentedFlag(t *testing.T) {
	help := "Flags:\n" +
		"  -h, --[no-]help          Show context-sensitive help.\n" +
		"  -l, --selector=SELECTOR  Label selector, see\n" +
		"                           --not-a-flag.\n" +
		"      --web.listen-address=:9877 ...  \n" +
		"                           Addresses.\n" +
		"      --[no-]auto-sharding Read the shard.\n"
	flags := helpFlag.FindAllStringSubmatch(help, -1)
	doc := "| `-l`, `--selector` | |\n| `--web.listen-address` | |\n| `--auto-sharding` | |\n"
	if got := undocumented(doc, flags); len(got) != 0 || len(flags) != 4 {
		t.Errorf("%d flags read, undocumented %v; want 4, none", len(flags), got)
	}
	for _, row := range []string{"| `--auto-sharding` | |\n", "| `-l`, `--selector` | |\n"} {
		if got := undocumented(strings.Replace(doc, row, "", 1), flags); len(got) == 0 {
			t.Errorf("without %q: nothing undocumented", row)
		}
	}
	if got := undocumented("`--web.listen-address-other`", flags[2:3]); len(got) != 1 {
		t.Errorf("a longer flag's name documented --web.listen-address: %v", got)
	}
}

// TestREADMEGoVersionMatchesGoMod keeps the README's required Go version
// the one go.mod's go line declares.
func TestREADMEGoVersionMatchesGoMod(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	required := regexp.MustCompile(`Requirements: Go (\S+)\+`).FindSubmatch(readme)
	if goLine == nil || required == nil {
		t.Fatalf("go.mod go line %q, README requirement %q: one is missing", goLine, required)
	}
	if string(goLine[1]) != string(required[1]) {
		t.Errorf("README requires Go %s, go.mod says go %s", required[1], goLine[1])
	}
}

// readmeSample is a README block "$ COMMAND" followed by its output.
type readmeSample struct {
	args   []string // after the program and the command
	output string
}

// readmeSamples returns the README's ```text blocks that start with "$ "
// and run cmd (as dra-exporter or kubectl dra-exporter).
func readmeSamples(t *testing.T, readme, cmd string) []readmeSample {
	t.Helper()
	var out []readmeSample
	for _, m := range regexp.MustCompile("(?s)```text\n\\$ ([^\n]*)\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		f := strings.Fields(m[1])
		for len(f) > 0 && (f[0] == "kubectl" || f[0] == "dra-exporter" || strings.HasSuffix(f[0], "/dra-exporter")) {
			f = f[1:]
		}
		if len(f) > 0 && f[0] == cmd {
			out = append(out, readmeSample{args: f[1:], output: m[2]})
		}
	}
	return out
}

// sampleFlags splits a sample's arguments into its flags (by long name,
// -l and -n as their long names) and its positional arguments, and fails
// on a flag the command's --help does not list.
func sampleFlags(t *testing.T, cmd string, args []string) (map[string]string, []string) {
	t.Helper()
	_, help, _ := runArgs(cmd, "--help")
	known := map[string]bool{}
	for _, f := range helpFlag.FindAllStringSubmatch(help, -1) {
		known[f[2]] = true
	}
	flags, positional := map[string]string{}, []string(nil)
	short := map[string]string{"-l": "selector", "-n": "namespace", "-o": "output"}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			if name, ok = short[args[i]]; !ok {
				positional = append(positional, args[i])
				continue
			}
		}
		if !known[name] {
			t.Errorf("the README's %s sample passes --%s, which %s --help does not list", cmd, name, cmd)
		}
		if i+1 < len(args) {
			flags[name] = args[i+1]
			i++
		}
	}
	return flags, positional
}

// TestREADMESamplesMatchTheirCommands: the README's explain and gates
// samples print what the command above each asks for: explain the pod it
// names; gates the namespace, selector, Prometheus, window and number of
// evaluations its flags give, pods of that namespace only, and a verdict
// over that window. Every flag it passes is one the command has.
func TestREADMESamplesMatchTheirCommands(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	explains, gatesSamples := readmeSamples(t, readme, "explain"), readmeSamples(t, readme, "gates")
	if len(explains) == 0 || len(gatesSamples) == 0 {
		t.Fatalf("the README has %d explain and %d gates samples, want both", len(explains), len(gatesSamples))
	}
	for _, s := range explains {
		_, pos := sampleFlags(t, "explain", s.args)
		if len(pos) != 1 || !strings.HasPrefix(s.output, "Pod "+pos[0]+" (uid ") {
			t.Errorf("the README's explain %v prints:\n%s", s.args, firstLine(s.output))
		}
	}
	for _, s := range gatesSamples {
		flags, pos := sampleFlags(t, "gates", s.args)
		ns := flags["namespace"]
		if len(pos) == 1 {
			ns = pos[0]
		}
		window, err := time.ParseDuration(flags["window"])
		if err != nil {
			t.Fatalf("the README's gates sample: --window %q: %v", flags["window"], err)
		}
		step := max(window/30, time.Second).Truncate(time.Second)
		if flags["step"] != "" {
			if step, err = time.ParseDuration(flags["step"]); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{
			"Rollout gates of namespace " + ns + selectorNote(flags["selector"]) + " at ",
			fmt.Sprintf("from %s, window %s (%d evaluations)\n", flags["prometheus.url"], window, int(window/step)+1),
		}
		for _, w := range want {
			if !strings.Contains(s.output, w) {
				t.Errorf("the README's gates %v: its output lacks %q:\n%s", s.args, w, s.output)
			}
		}
		for _, m := range regexp.MustCompile(`(?m)^(?:Pod |  )(\S+)/\S+ \(uid `).FindAllStringSubmatch(s.output, -1) {
			if m[1] != ns {
				t.Errorf("the README's gates %v lists a pod of namespace %s", s.args, m[1])
			}
		}
		if v := regexp.MustCompile(`(?m)^Verdict: PASS: .* for the whole window \((\S+)\)`).FindStringSubmatch(s.output); v != nil && v[1] != window.String() {
			t.Errorf("the README's gates sample asks for --window %s, its verdict speaks of %s", window, v[1])
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
