package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// EnvKrewBin is the directory holding krew and validate-krew-manifest
// (make krew builds them from sigs.k8s.io/krew).
const EnvKrewBin = "DRA_KREW_BIN"

// TestKrewInstall builds the release's four archives and its krew manifest,
// validates the manifest with krew's own validator, installs every
// platform's archive with krew (KREW_OS and KREW_ARCH pick the platform)
// into a scratch KREW_ROOT as `kubectl krew install --manifest=...
// --archive=...` does, checks that each installation has the LICENSE
// (what krew-index's validation asks) and the kubectl-dra_exporter link,
// and runs this host's plugin through that link, as kubectl runs it.
func TestKrewInstall(t *testing.T) {
	if os.Getenv("DRA_E2E_SKIP") == "1" {
		t.Skip("DRA_E2E_SKIP=1: builds the four archives and needs krew (make release-test runs it)")
	}
	bin := os.Getenv(EnvKrewBin)
	if bin == "" {
		t.Fatalf("%s is not set: make krew builds krew and validate-krew-manifest (make release-test sets it)", EnvKrewBin)
	}
	const version = "v0.1.0-krew"
	out := filepath.Join(t.TempDir(), "release")
	args := []string{"run", ".", "-version", version, "-root", root, "-out", out, "-image-platforms", "", "-chart=false"}
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	manifest := filepath.Join(out, "dra-exporter.yaml")
	if b, err := exec.Command(filepath.Join(bin, "validate-krew-manifest"), "-manifest", manifest, "-skip-install").CombinedOutput(); err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, b)
	}
	for _, p := range []platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		t.Run(p.os+"_"+p.arch, func(t *testing.T) {
			krewRoot := t.TempDir()
			archive := filepath.Join(out, "dra-exporter_"+version+"_"+p.os+"_"+p.arch+".tar.gz")
			cmd := exec.Command(filepath.Join(bin, "krew"), "install", "--manifest="+manifest, "--archive="+archive)
			cmd.Env = append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_OS="+p.os, "KREW_ARCH="+p.arch)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("krew install (%s): %v\n%s", p, err, b)
			}
			store := filepath.Join(krewRoot, "store", "dra-exporter", version)
			if _, err := os.Stat(filepath.Join(store, "LICENSE")); err != nil {
				t.Errorf("krew installed no LICENSE: %v", err)
			}
			link := filepath.Join(krewRoot, "bin", "kubectl-dra_exporter")
			target, err := filepath.EvalSymlinks(link)
			if err != nil {
				t.Fatalf("krew made no %s: %v", link, err)
			}
			if want, _ := filepath.EvalSymlinks(filepath.Join(store, "kubectl-dra_exporter")); target != want {
				t.Errorf("%s points at %s, want %s", link, target, want)
			}
			if p.os != runtime.GOOS || p.arch != runtime.GOARCH {
				return
			}
			// kubectl runs the link for "kubectl dra-exporter".
			var stdout bytes.Buffer
			run := exec.Command(link, "version")
			run.Stdout, run.Stderr = &stdout, &stdout
			if err := run.Run(); err != nil || !strings.Contains(stdout.String(), "version "+version) {
				t.Errorf("kubectl dra-exporter version: %v\n%s", err, stdout.String())
			}
			stdout.Reset()
			run = exec.Command(link, "explain", "llm-canary/llm-canary-7d9f8b6c5-x2k4q", "--from", filepath.Join(root, "testdata", "canary", "objects.yaml"))
			run.Stdout, run.Stderr = &stdout, &stdout
			if err := run.Run(); err != nil && !strings.Contains(stdout.String(), "Verdict:") {
				t.Errorf("kubectl dra-exporter explain --from: %v\n%s", err, stdout.String())
			}
			if !strings.Contains(stdout.String(), "Pod llm-canary/llm-canary-7d9f8b6c5-x2k4q") {
				t.Errorf("kubectl dra-exporter explain printed no decision tree:\n%s", stdout.String())
			}
			t.Logf("kubectl dra-exporter explain --from testdata/canary/objects.yaml:\n%s", stdout.String())
		})
	}
}
