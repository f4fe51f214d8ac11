package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEDocumentsEveryFlag fails when a command gains a flag that the
// README does not mention.
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)`)
	for _, cmd := range []string{"serve", "node", "snapshot", "explain", "gates", "bundle"} {
		var out, errOut bytes.Buffer
		run([]string{cmd, "-h"}, &out, &errOut)
		flags := flagLine.FindAllStringSubmatch(errOut.String(), -1)
		if len(flags) == 0 {
			t.Fatalf("%s -h printed no flags:\n%s", cmd, errOut.String())
		}
		for _, f := range flags {
			// A one-letter flag is written as kubectl writes it (-o, -l).
			if !strings.Contains(string(readme), "--"+f[1]) && (len(f[1]) > 1 || !strings.Contains(string(readme), "`-"+f[1]+"`")) {
				t.Errorf("README.md does not document %s --%s", cmd, f[1])
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
