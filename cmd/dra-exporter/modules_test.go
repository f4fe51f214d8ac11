package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// goModFile is the part of `go mod edit -json`'s output read here.
type goModFile struct {
	Require []struct {
		Path, Version string
	}
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
}

// requiredVersions reads a go.mod through the go command's own parser and
// returns each required module's version, after the go.mod's replacements by
// another module version (a replacement by a directory keeps no version).
func requiredVersions(t *testing.T, gomod string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", gomod).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v", gomod, err)
	}
	var f goModFile
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("%s: %v", gomod, err)
	}
	versions := map[string]string{}
	for _, r := range f.Require {
		versions[r.Path] = r.Version
	}
	for _, r := range f.Replace {
		if _, ok := versions[r.Old.Path]; ok && r.New.Version != "" && r.New.Path == r.Old.Path {
			versions[r.Old.Path] = r.New.Version
		}
	}
	return versions
}

// TestSharedModuleVersions keeps the modules that the exporter shares with the
// control plane's build and Prometheus' build at one version in all three.
// They are built with the same flags in make test, so each package of
// client-go, apiserver, grpc, otel, x/net, ... is compiled once for the three
// when its version and its dependencies' versions agree, and once per module
// when one of them drifts (about 5 CPU-minutes each in a cold run: the cold
// run is CPU-bound, docs/testing.md). The tools built with -N -l, and the
// older minors' control planes, share nothing by design and are not checked.
func TestSharedModuleVersions(t *testing.T) {
	root := filepath.Join("..", "..")
	main := requiredVersions(t, filepath.Join(root, "go.mod"))
	for _, dir := range []string{"test/controlplane", "tools"} {
		other := requiredVersions(t, filepath.Join(root, dir, "go.mod"))
		shared := 0
		for path, v := range other {
			mv, ok := main[path]
			if !ok {
				continue
			}
			shared++
			if mv != v {
				t.Errorf("%s: %s %s, the exporter's go.mod %s: align them (cd %s && go get %s@%s && go mod tidy, or bump the exporter's), or every package above it compiles twice in a cold make test",
					dir, path, v, mv, dir, path, mv)
			}
		}
		if shared < 50 {
			t.Errorf("%s shares %d modules with the exporter's go.mod; expected client-go's graph (over 50): is the path right?", dir, shared)
		}
	}
}
