package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
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
