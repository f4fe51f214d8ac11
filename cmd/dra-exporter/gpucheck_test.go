package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
)

func runGPUCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := gpuCheck("dra-exporter gpu-check", append([]string{"--reads=1", "--kubelet.pod-resources-socket="}, args...), &out, &errOut)
	return rc, out.String() + errOut.String()
}

// gpu-check on the fake's nodes: the raw readings, the agent's series and
// the fake's nvidia-smi agree; the field groups are said.
func TestGPUCheckFake(t *testing.T) {
	for scenario, want := range map[string]string{
		"a100-no-profiling":         "field group profiling: not watched: no_permission",
		"mig-board-and-instances":   "MIG 1g.10gb+me (GPU instance 7)",
		"time-sliced-device-plugin": "source: nvml, up: true",
		"hostengine-restart":        "source: dcgm, up: true",
	} {
		t.Run(scenario, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "node", scenario)
			rc, out := runGPUCheck(t, "--gpu.fake-file="+filepath.Join(dir, "fake.json"), "--nvidia-smi=fake", "--proc-root="+filepath.Join(dir, "proc"))
			if rc != 0 || !strings.Contains(out, want) || !strings.Contains(out, "OK: the agent's series agree") {
				t.Errorf("exit %d, want 0 and %q:\n%s", rc, want, out)
			}
		})
	}
}

// A disagreement with nvidia-smi (here a stub printing another memory
// size) exits 1 and names the field.
func TestGPUCheckDisagreement(t *testing.T) {
	dir := t.TempDir()
	stub := filepath.Join(dir, "nvidia-smi")
	script := `#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-c0d00000-0000-4000-8000-000000000000)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-c0d00001-0000-4000-8000-000000000001)"
  exit 0
fi
echo "GPU-c0d00000-0000-4000-8000-000000000000, NVIDIA H100 80GB HBM3, 40000, 61440, 512.25, 62, 1980, 87, 0, 0"
echo "GPU-c0d00001-0000-4000-8000-000000000001, NVIDIA H100 80GB HBM3, 81559, 0, 69.5, 31, 345, 0, 0, 0"
`
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rc, out := runGPUCheck(t, "--gpu.fake-file=../../testdata/node/hostengine-restart/fake.json", "--nvidia-smi="+stub, "--proc-root=")
	if rc != 1 || !strings.Contains(out, "DCGM_FI_DEV_FB_TOTAL: the library reads 81559, nvidia-smi memory.total 40000") {
		t.Errorf("exit %d, want 1 naming memory.total:\n%s", rc, out)
	}
}

// No source serves: exit 1.
func TestGPUCheckNoSource(t *testing.T) {
	rc, out := runGPUCheck(t, "--gpu.fake-file=../../testdata/node/dcgm-absent/fake.json", "--nvidia-smi=", "--proc-root=")
	if rc != 1 || !strings.Contains(out, "no GPU source serves (auto)") {
		t.Errorf("exit %d, want 1:\n%s", rc, out)
	}
}

// The comparison flags what the old agent served: the board's power on a
// MIG instance, a value without a series, a series off by a scale.
func TestGPUCheckComparison(t *testing.T) {
	mig := gpu.Entity{UUID: "MIG-x", ParentUUID: "GPU-x", MIG: &gpu.MIGInstance{Profile: "1g.10gb"},
		Values: map[gpu.FieldID]float64{gpu.FieldPowerUsage: 300, gpu.FieldFBUsed: 10, gpu.FieldFBTotal: 100},
		Raw:    []gpu.RawValue{{Field: "DCGM_FI_DEV_POWER_USAGE", Type: "double", Status: "OK", Value: "300"}}}
	series := map[string]float64{"dra_gpu_power_watts": 300, "dra_gpu_memory_used_bytes": 10}
	var out bytes.Buffer
	problems := strings.Join(entityTable(&out, mig, series, nil), "\n")
	for _, want := range []string{
		"MIG-x dra_gpu_power_watts: a MIG instance carries the board's value",
		"MIG-x dra_gpu_memory_used_bytes: the agent serves 10, the library read 10 × 1.048576e+06",
		"MIG-x DCGM_FI_DEV_FB_TOTAL: the library has a value, the agent no series",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems:\n%s\nwant %q", problems, want)
		}
	}
}

// The one-file script: it carries the binary, runs the fake where there is
// no GPU, and refuses to run without nvidia-smi otherwise.
func TestGPUCheckScript(t *testing.T) {
	bin := buildBinary(t)
	dir := filepath.Dir(bin)
	bundle := filepath.Join(dir, "gpu-check.sh")
	if out, err := exec.Command("bash", "gpu-check.sh", "--bundle", bin, bundle).CombinedOutput(); err != nil {
		t.Fatalf("bundle: %v\n%s", err, out)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	fake, _ := filepath.Abs("../../testdata/node/a100-no-profiling/fake.json")
	cmd := exec.Command(bundle, "--fake", fake, "--reads=1", "--proc-root=")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK: the agent's series agree") || !strings.Contains(string(out), "dra-exporter, version") {
		t.Errorf("bundle --fake: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		return
	}
	cmd = exec.Command(bundle)
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "nvidia-smi not found") {
		t.Errorf("bundle without a GPU: %v, want exit 2:\n%s", err, out)
	}
}

// buildBinary builds the binary into a directory of its own, for tests
// that run it from bash; skipped under -short or without bash.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := filepath.Join(t.TempDir(), "dra-exporter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
