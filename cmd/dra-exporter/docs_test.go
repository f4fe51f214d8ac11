package main

import (
	"bytes"
	"os"
	"testing"
)

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
