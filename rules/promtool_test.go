package rules

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool from DRA_PROMTOOL (`make test` sets
// it). It skips only when DRA_PROMTOOL is unset and DRA_E2E_SKIP=1.
func promtool(t *testing.T) string {
	t.Helper()
	path := os.Getenv("DRA_PROMTOOL")
	if path == "" {
		if os.Getenv("DRA_E2E_SKIP") == "1" {
			t.Skip("DRA_PROMTOOL is unset and DRA_E2E_SKIP=1")
		}
		t.Fatal("DRA_PROMTOOL is unset: run `make tools` and set DRA_PROMTOOL to .cache/tools/<version>/bin/promtool (make test does), or set DRA_E2E_SKIP=1 to skip")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("DRA_PROMTOOL=%s: %v (run `make tools`)", path, err)
	}
	return path
}

func runPromtool(t *testing.T, bin, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestPromtoolCheckRules(t *testing.T) {
	bin := promtool(t)
	files, _ := filepath.Glob("*.yaml")
	if out, err := runPromtool(t, bin, ".", append([]string{"check", "rules"}, files...)...); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	bin := promtool(t)
	tests, _ := filepath.Glob("tests/*.yaml")
	if out, err := runPromtool(t, bin, ".", append([]string{"test", "rules"}, tests...)...); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// promtool prints one block per failed alert test:
//
//	alertname: NAME, time: 10m,
//	    exp:[]            (a case that expected silence)
//	    exp:[ 0: ...      (a case that expected the alert)
var failedAlertRE = regexp.MustCompile(`alertname: (\w+), time: [^,]*,\s*\n\s*exp:\[(\]?)`)

// TestPromtoolCasesCanFail breaks every alert of the bundle and checks that
// promtool notices: with each expression replaced by one that never fires,
// a firing case of every alert must fail; with one that always fires, a
// silent case of every alert must fail. A case that passes either way
// tests nothing.
func TestPromtoolCasesCanFail(t *testing.T) {
	bin := promtool(t)
	alerts := alertsOf(loadBundle(t))
	for _, mutation := range []struct {
		name, expr string
		caught     string // the exp:[ group that must appear: "" firing, "]" silent
	}{
		{name: "never fires", expr: "vector(0) > 1", caught: ""},
		{name: "always fires", expr: "vector(1)", caught: "]"},
	} {
		t.Run(mutation.name, func(t *testing.T) {
			dir := mutatedBundle(t, mutation.expr)
			tests, _ := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
			for i := range tests {
				tests[i], _ = filepath.Rel(dir, tests[i])
			}
			out, err := runPromtool(t, bin, dir, append([]string{"test", "rules"}, tests...)...)
			if err == nil {
				t.Fatalf("promtool test rules passed with every alert set to %q", mutation.expr)
			}
			caught := map[string]bool{}
			for _, m := range failedAlertRE.FindAllStringSubmatch(out, -1) {
				if m[2] == mutation.caught {
					caught[m[1]] = true
				}
			}
			for name := range alerts {
				if !caught[name] {
					t.Errorf("%s: no promtool case failed when its expression %s", name, mutation.name)
				}
			}
			if t.Failed() {
				t.Logf("promtool output:\n%s", out)
			}
		})
	}
}

// mutatedBundle copies the rule files and their tests to a temporary
// directory, with the expression of every alert replaced by expr.
func mutatedBundle(t *testing.T, expr string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests, _ := filepath.Glob("tests/*.yaml")
	for _, path := range tests {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob("*.yaml")
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		replaceAlertExprs(&doc, expr)
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(&doc); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// replaceAlertExprs sets the expr of every mapping that has an alert key.
func replaceAlertExprs(n *yaml.Node, expr string) {
	if n.Kind == yaml.MappingNode {
		var isAlert bool
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "alert" {
				isAlert = true
			}
		}
		for i := 0; isAlert && i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "expr" {
				n.Content[i+1].Value = expr
				n.Content[i+1].Style = 0
			}
		}
	}
	for _, c := range n.Content {
		replaceAlertExprs(c, expr)
	}
}
