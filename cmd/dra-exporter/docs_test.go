package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/collector"
)

func referenceDefs(t *testing.T) []*collector.Def {
	t.Helper()
	defs, err := allDefs()
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

// TestMetricsReferenceIsFresh fails when docs/metrics.md does not match what
// the code registers; `make docs` rewrites it.
func TestMetricsReferenceIsFresh(t *testing.T) {
	var out, errOut bytes.Buffer
	if rc := run([]string{"docs"}, &out, &errOut); rc != 0 {
		t.Fatalf("docs exited %d: %s", rc, errOut.String())
	}
	committed, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), committed) {
		t.Error("docs/metrics.md is stale: run `make docs` and commit the result")
	}
}

// TestHelpIsOneShortSentence keeps HELP lines what tooltips can show: one
// sentence, no longer than 120 characters. Guidance goes to Def.Doc, which
// the metrics reference prints.
func TestHelpIsOneShortSentence(t *testing.T) {
	defs := referenceDefs(t)
	if len(defs) < 10 {
		t.Fatalf("only %d families", len(defs))
	}
	for _, d := range defs {
		h := d.Help
		switch {
		case len(h) > 120:
			t.Errorf("%s: HELP is %d characters (at most 120): %q", d.Name, len(h), h)
		case !strings.HasSuffix(h, "."):
			t.Errorf("%s: HELP does not end with a full stop: %q", d.Name, h)
		case strings.Contains(strings.TrimSuffix(h, "."), ". "):
			t.Errorf("%s: HELP has more than one sentence: %q", d.Name, h)
		}
	}
}
