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
	"serve":    "docs/flags.md",
	"snapshot": "docs/flags.md",
	"explain":  "docs/flags.md",
	"node":     "docs/node-agent.md",
	"gates":    "docs/gates.md",
	"bundle":   "docs/gates.md",
}

// TestDocsDocumentEveryFlag fails when a command gains a flag that its
// reference page does not mention.
func TestDocsDocumentEveryFlag(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`)
	for cmd, page := range flagPages {
		doc, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		run([]string{cmd, "-h"}, &out, &errOut)
		flags := flagLine.FindAllStringSubmatch(errOut.String(), -1)
		if len(flags) == 0 {
			t.Fatalf("%s -h printed no flags:\n%s", cmd, errOut.String())
		}
		for _, f := range flags {
			if !strings.Contains(string(doc), "--"+f[1]) && !strings.Contains(string(doc), "`-"+f[1]+"`") {
				t.Errorf("%s does not document %s --%s", page, cmd, f[1])
			}
		}
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
