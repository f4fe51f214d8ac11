package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderKrew fills the repository's krew template with a distinct
// sum per archive: each platform gets its own archive's, and an archive
// the release did not build is an error, not an empty sha256.
func TestRenderKrew(t *testing.T) {
	tmpl, err := os.ReadFile(filepath.Join(root, "deploy", "krew", "dra-exporter.yaml"))
	must(t, err)
	sums := map[string]string{}
	for i, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		sums["dra-exporter_v1.2.3_"+p+".tar.gz"] = strings.Repeat(string(rune('a'+i)), 64)
	}
	out, err := renderKrew(string(tmpl), "v1.2.3", sums)
	must(t, err)
	lines := strings.Split(out, "\n")
	seen := 0
	for i, line := range lines {
		uri, ok := strings.CutPrefix(strings.TrimSpace(line), "uri: ")
		if !ok {
			continue
		}
		seen++
		file := uri[strings.LastIndex(uri, "/")+1:]
		want := "sha256: " + sums[file]
		if sums[file] == "" || i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != want {
			t.Errorf("%s: next line %q, want %q", uri, lines[i+1], want)
		}
		if !strings.HasPrefix(uri, "https://github.com/dra-exporter/dra-exporter/releases/download/v1.2.3/") {
			t.Errorf("uri %s", uri)
		}
	}
	if seen != 4 || !strings.Contains(out, "version: v1.2.3\n") || strings.Contains(out, "{{") {
		t.Errorf("%d platforms filled:\n%s", seen, out)
	}
	delete(sums, "dra-exporter_v1.2.3_darwin_arm64.tar.gz")
	if _, err := renderKrew(string(tmpl), "v1.2.3", sums); err == nil || !strings.Contains(err.Error(), "darwin_arm64") {
		t.Errorf("a missing archive: %v, want an error naming it", err)
	}
}

// TestChartFileAllowed: what helm may package, and what came in through
// the symlinks before .helmignore kept it out.
func TestChartFileAllowed(t *testing.T) {
	for name, ok := range map[string]bool{
		"dra-exporter/Chart.yaml":                     true,
		"dra-exporter/templates/node-agent.yaml":      true,
		"dra-exporter/templates/_helpers.tpl":         true,
		"dra-exporter/files/rules/gates.yaml":         true,
		"dra-exporter/files/dashboards/overview.json": true,
		"dra-exporter/LICENSE":                        true,
		"dra-exporter/files/rules/rules_test.go":      false,
		"dra-exporter/files/rules/tests/gates.yaml":   false,
		"dra-exporter/files/rules/.pint.hcl":          false,
		"dra-exporter/files/dashboards/gen/main.go":   false,
		"dra-exporter/files/dashboards/README.md":     false,
		"other/Chart.yaml":                            false,
	} {
		if err := chartFileAllowed(name); (err == nil) != ok {
			t.Errorf("chartFileAllowed(%s) = %v, want allowed %v", name, err, ok)
		}
	}
}
