package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotFailsWhenNothingIsRead: a file of which no object could be
// read (entirely malformed, an empty List, only kinds the exporter does not
// use) makes snapshot and explain fail with a clear error and print no
// exposition, which would read as a healthy cluster; what was skipped is
// still listed. A partly malformed file still reports and skips the bad
// objects and exports the rest.
func TestSnapshotFailsWhenNothingIsRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, content, skipped string
	}{
		{"malformed.yaml", "items: [unclosed\n", "skipped: "},
		{"malformed.json", `{"apiVersion": "v1", "kind": "List", "items": [`, "skipped: "},
		{"empty-list.yaml", "apiVersion: v1\nkind: List\nitems: []\n", ""},
		{"empty.yaml", "", ""},
		{"unused-kinds.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: prod\n", "skipped 1 objects of kinds dra-exporter does not use:\n  " + dir + "/unused-kinds.yaml: document 1 (Deployment prod/web)\n"},
	} {
		path := write(tc.name, tc.content)
		for _, args := range [][]string{
			{"snapshot", "--from", path, "--now", goldenNow},
			{"explain", "--from", path, "--now", goldenNow, "prod/web-0"},
		} {
			var out, errOut bytes.Buffer
			rc := run(args, &out, &errOut)
			want := 1
			if args[0] == "explain" {
				want = explainUnreadable
			}
			if rc != want || out.Len() > 0 {
				t.Errorf("%s %s: exit %d with %d bytes on stdout, want exit %d and nothing", args[0], tc.name, rc, out.Len(), want)
			}
			if !strings.Contains(errOut.String(), "no object dra-exporter reads") || !strings.Contains(errOut.String(), path) {
				t.Errorf("%s %s: stderr does not say that nothing could be read from the file:\n%s", args[0], tc.name, errOut.String())
			}
			if tc.skipped != "" && !strings.Contains(errOut.String(), tc.skipped) {
				t.Errorf("%s %s: stderr does not list what was skipped (%q):\n%s", args[0], tc.name, tc.skipped, errOut.String())
			}
		}
	}

	// One readable file among unreadable ones is enough.
	var out, errOut bytes.Buffer
	if rc := run([]string{"snapshot", "--from", write("bad.yaml", "items: [unclosed\n"), "--from", "../../testdata/malformed-input/objects.yaml", "--now", goldenNow}, &out, &errOut); rc != 0 {
		t.Fatalf("a partly malformed input: exit %d: %s", rc, errOut.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("dra_device_info{")) || !strings.Contains(errOut.String(), "bad.yaml: document 1: malformed YAML") ||
		!strings.Contains(errOut.String(), "objects.yaml: document 1, item") {
		t.Errorf("a partly malformed input must export the healthy objects and list the bad ones:\n%s", errOut.String())
	}
}
