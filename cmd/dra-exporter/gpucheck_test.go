package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

func runGPUCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := gpuCheck("dra-exporter gpu-check", append([]string{"--reads=1", "--kubelet.pod-resources-socket="}, args...), &out, &errOut)
	return rc, out.String() + errOut.String()
}

// allowIdle lets the checks that need the script (a load, a pod's cgroup,
// the restricted runs, the driver's /proc; a MIG GPU's memory, read per
// instance) end not proven; a failing check still fails.
var allowIdle = []string{"--allow-not-proven=memory-reserved", "--allow-not-proven=load", "--allow-not-proven=join", "--allow-not-proven=minor-pci",
	"--allow-not-proven=restricted-host-pid", "--allow-not-proven=restricted-own-pid-namespace", "--allow-not-proven=processes"}

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
			rc, out := runGPUCheck(t, append(allowIdle, "--gpu.fake-file="+filepath.Join(dir, "fake.json"), "--nvidia-smi=fake", "--proc-root="+filepath.Join(dir, "proc"))...)
			if rc != 0 || !strings.Contains(out, want) || !strings.Contains(out, "OK: every check passed") {
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
case "$1" in
-L)
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-c0d00000-0000-4000-8000-000000000000)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-c0d00001-0000-4000-8000-000000000001)" ;;
--query-compute-apps=*) echo "4101, GPU-c0d00000-0000-4000-8000-000000000000, 61440" ;;
--query-gpu=uuid,memory.reserved,memory.used)
  echo "GPU-c0d00000-0000-4000-8000-000000000000, 0, 61440"
  echo "GPU-c0d00001-0000-4000-8000-000000000001, 0, 0" ;;
-q) printf 'GPU 00000000:18:00.0\n    GPU UUID : GPU-c0d00000-0000-4000-8000-000000000000\n    Minor Number : 0\n        Bus Id : 00000000:18:00.0\n' ;;
*)
  echo "GPU-c0d00000-0000-4000-8000-000000000000, NVIDIA H100 80GB HBM3, 40000, 61440, 512.25, 62, 1980, 87, 0, 0"
  echo "GPU-c0d00001-0000-4000-8000-000000000001, NVIDIA H100 80GB HBM3, 81559, 0, 69.5, 31, 345, 0, 0, 0" ;;
esac
`
	if err := os.WriteFile(stub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rc, out := runGPUCheck(t, "--gpu.fake-file=../../testdata/node/hostengine-restart/fake.json", "--nvidia-smi="+stub, "--proc-root=")
	for _, want := range []string{
		"DCGM_FI_DEV_FB_TOTAL: the library reads 81559, nvidia-smi memory.total 40000",
		"GPU-c0d00001-0000-4000-8000-000000000001: not in nvidia-smi -q",
	} {
		if rc != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, want 1 naming %q:\n%s", rc, want, out)
		}
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

// The one-file script on the fake node: the fake gpu-burn in a pod-shaped
// cgroup, the two restricted runs, every comparison passing; then the same
// run with an nvidia-smi that disagrees (another minor number, a process
// left out), which must fail; and without nvidia-smi it refuses to run.
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
	fakenvidia := filepath.Join(dir, "fakenvidia")
	if out, err := exec.Command("go", "build", "-o", fakenvidia, "./testdata/fakenvidia").CombinedOutput(); err != nil {
		t.Fatalf("go build fakenvidia: %v\n%s", err, out)
	}
	tools := fakeTools(t, fakenvidia, "")
	fake, _ := filepath.Abs("testdata/gpucheck/fake.json")
	// Where this machine cannot give the evidence (not root: no cgroup,
	// no setpriv, no unshare), those checks may end not proven; say so.
	var allow []string
	if os.Geteuid() != 0 {
		allow = []string{"join", "restricted-host-pid", "restricted-own-pid-namespace"}
	} else if !cgroupV2Writable() {
		allow = []string{"join"}
	}
	if len(allow) > 0 {
		t.Logf("this machine cannot prove %v: allowed not proven", allow)
	}
	run := func(tools string) (int, string, checkReport, time.Duration) {
		t.Helper()
		report := filepath.Join(t.TempDir(), "report.json")
		args := []string{"--fake", fake, "--fake-tools", tools, "--json", report, "--reads=1"}
		for _, a := range allow {
			args = append(args, "--allow-not-proven="+a)
		}
		cmd := exec.Command(bundle, args...)
		cmd.Dir = dir
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		rc := 0
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var r checkReport
		raw, err := os.ReadFile(report)
		if err != nil || json.Unmarshal(raw, &r) != nil {
			t.Fatalf("no JSON report (%v):\n%s", err, out)
		}
		for _, pattern := range []string{"/sys/fs/cgroup/dra-gpu-check.*", "/sys/fs/cgroup/*/dra-gpu-check.*"} {
			if left, _ := filepath.Glob(pattern); len(left) > 0 {
				t.Errorf("scratch cgroups left: %v", left)
			}
		}
		return rc, string(out), r, took
	}
	status := func(r checkReport) map[string]check {
		out := map[string]check{}
		for _, c := range r.Checks {
			out[c.Name] = c
		}
		return out
	}

	rc, out, r, took := run(tools)
	t.Logf("FAKE mode: the script ran in %v", took.Round(10*time.Millisecond))
	checks := status(r)
	if rc != 0 || !r.OK || len(checks) != len(checkNames) || !strings.Contains(out, "dra-exporter, version") {
		t.Errorf("exit %d ok %v, want 0 and every check:\n%s", rc, r.OK, out)
	}
	for _, name := range checkNames {
		if c := checks[name]; c.Status != statusPass && !slices.Contains(allow, name) {
			t.Errorf("check %s: %s %v, want pass", name, c.Status, c.Evidence)
		}
	}
	if !slices.Contains(allow, "join") && !strings.Contains(strings.Join(checks["join"].Evidence, "\n"), "1024 MiB, isolation violation") {
		t.Errorf("join evidence %v: want the burn's 1024 MiB under its pod, a violation", checks["join"].Evidence)
	}

	// An nvidia-smi that says another minor for GPU 1 and leaves its
	// process out: both comparisons fail, the run exits 1.
	rc, out, r, _ = run(fakeTools(t, fakenvidia, `case "$1" in
-q) sed 's/Minor Number *: 3$/Minor Number : 5/' <<<"$out" ;;
--query-compute-apps=*) grep -v '^999998,' <<<"$out" || true ;;
*) printf '%s\n' "$out" ;;
esac`))
	checks = status(r)
	if rc != 1 || r.OK || checks[checkMinorPCI].Status != statusFail || checks[checkProcesses].Status != statusFail {
		t.Errorf("exit %d ok %v, want 1 with minor-pci and processes failed:\n%s", rc, r.OK, out)
	}
	for _, want := range []string{"the agent reads minor 3, nvidia-smi -q 5", "pid 999998 on GPU-9c4e0001-0000-4000-8000-000000000001: the agent lists it, nvidia-smi does not"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q:\n%s", want, out)
		}
	}

	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		return
	}
	cmd := exec.Command(bundle)
	outb, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(outb), "nvidia-smi not found") {
		t.Errorf("bundle without a GPU: %v, want exit 2:\n%s", err, outb)
	}
}

// fakeTools links testdata/fakenvidia (built at real) as nvidia-smi,
// gpu-burn and nvidia-driver-proc in a directory of their own; with
// filter, nvidia-smi is a bash wrapper that runs the fake's and passes its
// output ($out, its arguments as "$@") through filter.
func fakeTools(t *testing.T, real, filter string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(real, filepath.Join(dir, "fakenvidia")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpu-burn", "nvidia-driver-proc"} {
		if err := os.Symlink("fakenvidia", filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	smi := filepath.Join(dir, "nvidia-smi")
	if filter == "" {
		if err := os.Symlink("fakenvidia", smi); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	wrapper := "#!/usr/bin/env bash\nout=$(exec -a nvidia-smi " + real + " \"$@\") || exit $?\n" + filter + "\n"
	if err := os.WriteFile(smi, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cgroupV2Writable: a cgroup v2 hierarchy this process may create a
// cgroup in (what the script's join check needs).
func cgroupV2Writable() bool {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
			continue
		}
		probe, err := os.MkdirTemp(root, "dra-gpu-check-probe.")
		if err != nil {
			return false
		}
		return os.Remove(probe) == nil
	}
	return false
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
