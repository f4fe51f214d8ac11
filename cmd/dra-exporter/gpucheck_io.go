package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
)

// What the checks read besides the agent (the driver's /proc, this
// process's capabilities, the other run's report, the script's flags),
// and how they are printed.

type driverGPU struct {
	uuid  string
	minor int
}

// readDriverProc reads <dir>/gpus/<bus>/information, by bus.
func readDriverProc(dir string) (map[string]driverGPU, error) {
	if dir == "" {
		return nil, fmt.Errorf("--driver-proc is empty")
	}
	dirs, err := filepath.Glob(filepath.Join(dir, "gpus", "*", "information"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("no %s/gpus/*/information", dir)
	}
	out := map[string]driverGPU{}
	for _, path := range dirs {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		g := driverGPU{minor: -1}
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case "GPU UUID":
				g.uuid = v
			case "Device Minor":
				if g.minor, err = strconv.Atoi(v); err != nil {
					return nil, fmt.Errorf("%s: Device Minor %q", path, v)
				}
			}
		}
		out[normalizeBus(filepath.Base(filepath.Dir(path)))] = g
	}
	return out, nil
}

// normalizeBus writes a PCI address as domain:bus:device.function with a
// four-digit domain in lower case (nvidia-smi prints eight digits, the
// driver's /proc four).
func normalizeBus(b string) string {
	b = strings.ToLower(strings.TrimSpace(b))
	if dom, rest, ok := strings.Cut(b, ":"); ok && len(dom) > 4 {
		b = dom[len(dom)-4:] + ":" + rest
	}
	return b
}

// selfObserved reads this process's capabilities.
func selfObserved(statusPath string) observed {
	o := observed{CapEff: "?", CapBnd: "?", NoNewPrivs: "?"}
	f, err := os.Open(statusPath)
	if err != nil {
		return o
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "CapEff":
			o.CapEff = v
		case "CapBnd":
			o.CapBnd = v
		case "NoNewPrivs":
			o.NoNewPrivs = v
		}
	}
	return o
}

func printChecks(w io.Writer, checks []check, allow []string) {
	fmt.Fprintln(w, "\nCHECKS")
	for _, c := range checks {
		mark := strings.ToUpper(c.Status)
		if c.Status == statusNotProven && slices.Contains(allow, c.Name) {
			mark += " (allowed)"
		}
		fmt.Fprintf(w, "  %-30s %s\n", c.Name, mark)
		for _, e := range c.Evidence {
			fmt.Fprintf(w, "      %s\n", e)
		}
	}
}

// printJoin prints the join of this read: holders, per-pod memory,
// violations.
func printJoin(w io.Writer, v *nodeagent.View) {
	fmt.Fprintf(w, "\nJOIN (host processes visible: %v)\n  holders:\n", v.ProcVisible)
	for _, h := range v.Holders {
		fmt.Fprintf(w, "    %s %s %s/%s pod_uid=%s claim=%s\n", h.GPUUUID, h.Lane, h.Namespace, h.Pod, h.PodUID, h.Claim)
	}
	if len(v.Holders) == 0 {
		fmt.Fprintln(w, "    none (gpu-check reads no API server; the kubelet's socket when present)")
	}
	fmt.Fprintln(w, "  per-pod memory (dra_gpu_pod_memory_used_bytes):")
	for _, m := range v.PodMemory {
		uid := m.PodUID
		if uid == "" {
			uid = "(no pod)"
		}
		fmt.Fprintf(w, "    %s pod_uid=%s %.0f MiB\n", m.GPUUUID, uid, m.Bytes/(1<<20))
	}
	fmt.Fprintln(w, "  isolation violations (dra_gpu_isolation_violation):")
	for _, x := range v.Violations {
		fmt.Fprintf(w, "    %s pod_uid=%s\n", x.GPUUUID, x.PodUID)
	}
}

// readReport reads another run's --json.
func readReport(path string) (*checkReport, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r checkReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// parseExpectPods reads --expect-pod PID=UID values.
func parseExpectPods(vals []string) (map[int]string, error) {
	out := map[int]string{}
	for _, v := range vals {
		p, uid, ok := strings.Cut(v, "=")
		pid, err := strconv.Atoi(p)
		if !ok || err != nil || pid <= 0 || !podUIDPattern.MatchString(uid) {
			return nil, fmt.Errorf("--expect-pod %q: want PID=POD_UID (a pod UID: 8-4-4-4-12 hex digits, or 32)", v)
		}
		out[pid] = uid
	}
	return out, nil
}

var podUIDPattern = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
