package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// gpu-check only reads the GPU: every nvidia-smi and DCGM tool call in the
// script and the Go side uses an allowed, read-only form, and no option
// that sets MIG, persistence, clocks, power, ECC, compute mode or resets
// appears anywhere.
func TestGPUCheckReadsOnly(t *testing.T) {
	forbidden := regexp.MustCompile(`nvidia-smi[^\n;|&]*?\s(mig|-mig|--multi-instance-gpu|-pm|--persistence-mode|-ac|--applications-clocks|-rac|-lgc|-rgc|-lmc|-rmc|-pl|--power-limit|-e\b|--ecc-config|-c\b|--compute-mode|-r\b|--gpu-reset|-am|-caa|-dm|--cuda-clocks)(\s|=|$)|dcgmi\s+(config|mig|policy)|nvidia-persistenced|/sys/bus/pci/.*(remove|reset)`)
	allowedSMI := regexp.MustCompile(`^nvidia-smi( -L| -q| --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits)?( 2>/dev/null)?\s*($|\)|;|\||&&|>)`)
	files, _ := filepath.Glob("gpucheck*.go")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	for _, file := range append(files, "gpu-check.sh") {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if m := forbidden.FindString(text); m != "" {
			t.Errorf("%s: %q changes a GPU setting", file, m)
		}
		if file != "gpu-check.sh" {
			continue
		}
		for i, line := range strings.Split(text, "\n") {
			code, _, _ := strings.Cut(line, "#")
			for _, at := range regexp.MustCompile(`nvidia-smi\b`).FindAllStringIndex(code, -1) {
				rest := code[at[0]:]
				if strings.HasPrefix(rest, "nvidia-smi not found") {
					continue
				}
				if !allowedSMI.MatchString(rest) {
					t.Errorf("gpu-check.sh:%d: nvidia-smi call not in the read-only list: %q", i+1, strings.TrimSpace(rest))
				}
			}
		}
	}
	// The Go side's calls are the ones runSMI makes.
	raw, err := os.ReadFile("gpucheck_smi.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`run\("[^)]*\)`).FindAllString(string(raw), -1)
	if len(calls) < 5 {
		t.Errorf("gpucheck_smi.go: found %d nvidia-smi calls, want runSMI's 5", len(calls))
	}
	for _, call := range calls {
		if !regexp.MustCompile(`^run\("(-L|-q|--query-gpu=[a-z.,_"+ ()A-Za-z]*|--query-compute-apps=pid,gpu_uuid,used_memory)"(, "--format=csv,noheader,nounits")?\)$`).MatchString(call) {
			t.Errorf("gpucheck_smi.go: nvidia-smi call %s not in the read-only list", call)
		}
	}
}

// Each comparison fails on the evidence that contradicts it.
func TestGPUCheckChecksFail(t *testing.T) {
	gpu0 := gpu.Entity{UUID: "GPU-0", Minor: 0, Values: map[gpu.FieldID]float64{gpu.FieldGPUUtil: 50, gpu.FieldFBTotal: 81559, gpu.FieldFBFree: 80000, gpu.FieldFBUsed: 1559},
		Processes: []gpu.Process{{PID: 42, UsedMemoryBytes: 1 << 30}}}
	reading := &gpu.Reading{Entities: []gpu.Entity{gpu0}}
	view := &nodeagent.View{SourceUp: true, ProcVisible: true,
		PodMemory: []nodeagent.PodMemory{{GPUUUID: "GPU-0", PodUID: "0000000b-0000-4000-8000-000000000000", Bytes: 1 << 30}}}
	in := checkInput{view: view, reading: reading, withSMI: true,
		smi:        smiReport{mem: map[string]smiMem{"GPU-0": {reserved: 527, used: 1032}}},
		expectPods: map[int]string{42: "0000000a-0000-4000-8000-000000000000"}}
	for _, tc := range []struct {
		c    check
		want string
	}{
		// v1 memory: used counts the reserved 527 MiB.
		{memoryCheck(in), "counts the reserved memory (nvidia-smi used 1032 + reserved 527): NVML v1"},
		// the process is attributed to another pod.
		{joinCheck(in), "pod 0000000a-0000-4000-8000-000000000000 has 0 MiB there"},
		// the run without host PID attributes a pod.
		{ownNSCheck(checkInput{view: view, ownNS: &checkReport{Observed: observed{CapEff: "0", Pods: []string{"memory GPU-0->x"}}}}), "it attributes processes to pods"},
		// the load ran, but none of its processes was on a GPU (the GPU
		// busy with something else proves nothing).
		{loadCheck(checkInput{view: view, reading: reading, load: "burn", expectPods: map[int]string{43: "x"}}), "0 process(es) of the load listed"},
		// nvidia-smi lists a process the agent does not.
		{processesCheck(checkInput{view: view, reading: reading, withSMI: true, smi: smiReport{apps: []smiApp{{PID: 42, GPU: "GPU-0", MiB: 1024}, {PID: 7, GPU: "GPU-0", MiB: 5}}}}), "pid 7 on GPU-0: nvidia-smi lists it, the agent does not"},
	} {
		if tc.c.Status != statusFail || !strings.Contains(strings.Join(tc.c.Evidence, "\n"), tc.want) {
			t.Errorf("%s: %s %v, want fail with %q", tc.c.Name, tc.c.Status, tc.c.Evidence, tc.want)
		}
	}
	// Not proven passes only where allowed; a failure never.
	checks := []check{{Name: checkLoad, Status: statusNotProven}, {Name: checkSource, Status: statusPass}}
	if decide(checks, nil) || !decide(checks, []string{checkLoad}) || decide(append(checks, check{Name: checkJoin, Status: statusFail}), checkNames) {
		t.Error("decide: not proven must fail unless allowed, a failure always")
	}
}

// nvidia-smi's printouts, as the driver writes them.
func TestGPUCheckParseSMI(t *testing.T) {
	q, err := parseSMIQuery("Attached GPUs : 1\nGPU 00000000:9A:00.0\n    Product Name : H100\n    GPU UUID                  : GPU-1\n    Minor Number              : 3\n    PCI\n        Bus                   : 0x9A\n        Bus Id                : 00000000:9A:00.0\n")
	if err != nil || q["GPU-1"] != (smiQ{minor: 3, bus: "00000000:9A:00.0"}) {
		t.Errorf("parseSMIQuery: %v %v", q, err)
	}
	if _, err := parseSMIQuery("GPU 00000000:9A:00.0\n    GPU UUID : GPU-1\n"); err == nil {
		t.Error("a GPU without Minor Number must be an error")
	}
	apps, err := parseComputeApps("No running processes found\n")
	if err != nil || len(apps) != 0 {
		t.Errorf("no process: %v %v", apps, err)
	}
	apps, err = parseComputeApps("42, GPU-1, [N/A]\n")
	if err != nil || len(apps) != 1 || apps[0].MiB != -1 {
		t.Errorf("[N/A]: %v %v", apps, err)
	}
	if _, err := parseComputeApps("42 GPU-1\n"); err == nil {
		t.Error("a malformed line must be an error")
	}
	if normalizeBus("00000000:9A:00.0") != "0000:9a:00.0" || normalizeBus("0000:9a:00.0") != "0000:9a:00.0" {
		t.Error("normalizeBus")
	}
	if _, err := parseExpectPods([]string{"42=not-a-uid"}); err == nil {
		t.Error("--expect-pod with a bad UID must be an error")
	}
}
