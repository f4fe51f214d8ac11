package main

import (
	"fmt"
	"math"
	"sort"
	"strings"

	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// A check's status. Not proven means the evidence is missing (no load
// generator, no writable cgroup, no process to compare): it is never a
// pass, and fails the run unless --allow-not-proven names it.
const (
	statusPass      = "pass"
	statusFail      = "fail"
	statusNotProven = "not-proven"
)

// The checks, in the order they are printed.
const (
	checkSource          = "source"
	checkFields          = "fields"
	checkLoad            = "load"
	checkProcesses       = "processes"
	checkMinorPCI        = "minor-pci"
	checkMemoryReserved  = "memory-reserved"
	checkJoin            = "join"
	checkRestrictedHost  = "restricted-host-pid"
	checkRestrictedOwnNS = "restricted-own-pid-namespace"
)

var checkNames = []string{checkSource, checkFields, checkLoad, checkProcesses, checkMinorPCI, checkMemoryReserved, checkJoin, checkRestrictedHost, checkRestrictedOwnNS}

type check struct {
	Name     string   `json:"name"`
	Status   string   `json:"status"`
	Evidence []string `json:"evidence"`
}

// checkReport is what --json writes.
type checkReport struct {
	Source string   `json:"source"`
	Checks []check  `json:"checks"`
	OK     bool     `json:"ok"`
	Allow  []string `json:"allowed_not_proven,omitempty"`
	// Observed is what this run saw, for the run beside it: the script
	// reads the run without the host PID namespace through it.
	Observed observed `json:"observed"`
}

type observed struct {
	GPUs        []string          `json:"gpus"`
	ProcVisible bool              `json:"host_processes_visible"`
	Processes   []observedProcess `json:"processes"`
	// Pods are the agent's attributions: memory and violations by pod.
	Pods       []string `json:"pod_attributions"`
	CapEff     string   `json:"cap_eff"`
	CapBnd     string   `json:"cap_bnd"`
	NoNewPrivs string   `json:"no_new_privs"`
}

type observedProcess struct {
	PID   int     `json:"pid"`
	GPU   string  `json:"gpu_uuid"`
	Bytes float64 `json:"used_memory_bytes"`
}

// checkInput is what the checks compare.
type checkInput struct {
	view    *nodeagent.View
	reading *gpu.Reading
	// fieldProblems are the disagreements of report (fields beside the
	// library and nvidia-smi).
	fieldProblems []string
	withSMI       bool
	smi           smiReport
	// driverProc is /proc/driver/nvidia, or a fake's.
	driverProc string
	// load is the load generator that ran during the reads; loadMissing
	// says why none did.
	load, loadMissing string
	// expectPods maps the PIDs of the process placed in a pod-like cgroup
	// to that pod's UID.
	expectPods map[int]string
	// ownNS is the run without the host PID namespace (its --json), or
	// nil with ownNSErr saying why.
	ownNS    *checkReport
	ownNSErr string
	self     observed
}

// gpuProcesses lists the processes of the reading as nvidia-smi
// --query-compute-apps does: NVML's compute list (not the MPS clients),
// MIG instances' under their GPU.
func gpuProcesses(r *gpu.Reading) []observedProcess {
	var out []observedProcess
	if r == nil {
		return nil
	}
	for _, e := range r.Entities {
		uuid := e.UUID
		if e.ParentUUID != "" {
			uuid = e.ParentUUID
		}
		for _, p := range e.Processes {
			if p.MPSClient {
				continue
			}
			out = append(out, observedProcess{PID: p.PID, GPU: uuid, Bytes: p.UsedMemoryBytes})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// podAttributions lists the pods the agent put GPU memory or a violation
// under.
func podAttributions(v *nodeagent.View) []string {
	var out []string
	for _, m := range v.PodMemory {
		if m.PodUID != "" {
			out = append(out, fmt.Sprintf("memory %s->%s", m.GPUUUID, m.PodUID))
		}
	}
	for _, x := range v.Violations {
		out = append(out, fmt.Sprintf("violation %s->%s", x.GPUUUID, x.PodUID))
	}
	return out
}

func buildChecks(in checkInput) []check {
	c := []check{sourceCheck(in), fieldsCheck(in), loadCheck(in), processesCheck(in), minorPCICheck(in), memoryCheck(in), joinCheck(in), restrictedHostCheck(in), ownNSCheck(in)}
	return c
}

func sourceCheck(in checkInput) check {
	c := check{Name: checkSource}
	ev := fmt.Sprintf("source %s, up %v", in.view.Source, in.view.SourceUp)
	for _, cand := range in.view.Candidates {
		ev += strings.TrimSpace(fmt.Sprintf("; %s %s %s", cand.Source, cand.State, cand.Reason))
	}
	c.Evidence = []string{ev}
	c.Status = statusPass
	if in.reading == nil || !in.view.SourceUp {
		c.Status = statusFail
		c.Evidence = append(c.Evidence, fmt.Sprintf("no GPU source serves (%s): see the log lines above", in.view.Source))
	}
	return c
}

func fieldsCheck(in checkInput) check {
	c := check{Name: checkFields, Status: statusPass, Evidence: in.fieldProblems}
	switch {
	case in.reading == nil:
		c.Status, c.Evidence = statusNotProven, []string{"no reading"}
	case len(in.fieldProblems) > 0:
		c.Status = statusFail
	case !in.withSMI:
		c.Status, c.Evidence = statusNotProven, []string{"the agent's series agree with the library; nvidia-smi not compared (--nvidia-smi=\"\")"}
	default:
		c.Evidence = []string{"the agent's series agree with the library and nvidia-smi --query-gpu"}
	}
	return c
}

// loadCheck: the load ran and the GPUs showed it during the reads.
func loadCheck(in checkInput) check {
	c := check{Name: checkLoad}
	if in.load == "" {
		c.Status = statusNotProven
		c.Evidence = []string{"no load generator: reads taken idle (" + in.loadMissing + ")"}
		return c
	}
	c.Evidence = []string{"load: " + in.load}
	busy := false
	if in.reading != nil {
		for _, e := range in.reading.Entities {
			if u, ok := e.Values[gpu.FieldGPUUtil]; ok && e.MIG == nil {
				c.Evidence = append(c.Evidence, fmt.Sprintf("%s utilization %g%%", e.UUID, u))
				busy = busy || u > 0
			}
		}
	}
	listed := 0
	for _, p := range gpuProcesses(in.reading) {
		if _, ok := in.expectPods[p.PID]; ok {
			listed++
		}
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d process(es) of the load listed on a GPU", listed))
	// The load's own processes are the evidence where the script could
	// name them (its cgroup); otherwise a busy GPU.
	c.Status = statusFail
	if listed > 0 || (len(in.expectPods) == 0 && busy) {
		c.Status = statusPass
	}
	return c
}

// processesCheck compares the agent's processes with nvidia-smi
// --query-compute-apps: the same PIDs on the same GPUs, the same memory
// (nvidia-smi prints whole MiB).
func processesCheck(in checkInput) check {
	c := check{Name: checkProcesses}
	if !in.withSMI || in.reading == nil {
		c.Status, c.Evidence = statusNotProven, []string{"no nvidia-smi or no reading to compare"}
		return c
	}
	if in.smi.appsErr != "" {
		c.Status, c.Evidence = statusNotProven, []string{in.smi.appsErr}
		return c
	}
	agent := map[string]observedProcess{}
	for _, p := range gpuProcesses(in.reading) {
		agent[fmt.Sprintf("%d@%s", p.PID, p.GPU)] = p
	}
	var problems []string
	seen := map[string]bool{}
	for _, a := range in.smi.apps {
		k := fmt.Sprintf("%d@%s", a.PID, a.GPU)
		seen[k] = true
		p, ok := agent[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("pid %d on %s: nvidia-smi lists it, the agent does not", a.PID, a.GPU))
		case a.MiB < 0:
			c.Evidence = append(c.Evidence, fmt.Sprintf("pid %d on %s: listed by both, memory [N/A] in nvidia-smi", a.PID, a.GPU))
		case math.Abs(p.Bytes/(1<<20)-float64(a.MiB)) > 1:
			problems = append(problems, fmt.Sprintf("pid %d on %s: the agent reads %.0f MiB, nvidia-smi %d MiB", a.PID, a.GPU, p.Bytes/(1<<20), a.MiB))
		default:
			c.Evidence = append(c.Evidence, fmt.Sprintf("pid %d on %s: %d MiB in both", a.PID, a.GPU, a.MiB))
		}
	}
	for k, p := range agent {
		if !seen[k] {
			problems = append(problems, fmt.Sprintf("pid %d on %s: the agent lists it, nvidia-smi does not", p.PID, p.GPU))
		}
	}
	sort.Strings(problems)
	switch {
	case len(problems) > 0:
		c.Status, c.Evidence = statusFail, append(problems, c.Evidence...)
	case len(in.smi.apps) == 0:
		c.Status, c.Evidence = statusNotProven, []string{"no compute process on any GPU: nothing compared"}
	default:
		c.Status = statusPass
	}
	return c
}

// minorPCICheck: the agent's minor numbers against nvidia-smi -q, and
// nvidia-smi's PCI bus ids against the kernel driver's own record
// (/proc/driver/nvidia/gpus/<bus>/information: UUID and minor).
func minorPCICheck(in checkInput) check {
	c := check{Name: checkMinorPCI}
	if !in.withSMI || in.reading == nil {
		c.Status, c.Evidence = statusNotProven, []string{"no nvidia-smi or no reading to compare"}
		return c
	}
	if in.smi.qErr != "" {
		c.Status, c.Evidence = statusNotProven, []string{in.smi.qErr}
		return c
	}
	driver, driverErr := readDriverProc(in.driverProc)
	var problems []string
	compared := 0
	for _, e := range in.reading.Entities {
		if e.MIG != nil {
			continue
		}
		q, ok := in.smi.q[e.UUID]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: not in nvidia-smi -q", e.UUID))
			continue
		}
		compared++
		if q.minor != e.Minor {
			problems = append(problems, fmt.Sprintf("%s: the agent reads minor %d, nvidia-smi -q %d", e.UUID, e.Minor, q.minor))
		} else {
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: minor %d in both, bus %s", e.UUID, q.minor, q.bus))
		}
		if driverErr != nil {
			continue
		}
		d, ok := driver[normalizeBus(q.bus)]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: no %s/gpus entry for nvidia-smi's bus %s", e.UUID, in.driverProc, q.bus))
		case d.uuid != e.UUID || d.minor != e.Minor:
			problems = append(problems, fmt.Sprintf("%s: the driver's bus %s holds %s minor %d", e.UUID, q.bus, d.uuid, d.minor))
		default:
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: the driver's bus %s holds it, minor %d", e.UUID, q.bus, d.minor))
		}
	}
	sort.Strings(problems)
	switch {
	case len(problems) > 0:
		c.Status, c.Evidence = statusFail, append(problems, c.Evidence...)
	case compared == 0:
		c.Status, c.Evidence = statusNotProven, []string{"no GPU to compare"}
	case driverErr != nil:
		c.Status, c.Evidence = statusNotProven, append(c.Evidence, "PCI bus ids not checked against the driver: "+driverErr.Error())
	default:
		c.Status = statusPass
	}
	return c
}

// memoryCheck: DCGM and NVML v2 leave the driver's reserved memory out of
// used, and so does nvidia-smi (510 and later), which prints it apart;
// total - free - used must be the reserved memory, and used the same.
func memoryCheck(in checkInput) check {
	c := check{Name: checkMemoryReserved}
	if !in.withSMI || in.reading == nil {
		c.Status, c.Evidence = statusNotProven, []string{"no nvidia-smi or no reading to compare"}
		return c
	}
	if in.smi.memErr != "" {
		c.Status, c.Evidence = statusNotProven, []string{in.smi.memErr}
		return c
	}
	var problems []string
	compared := 0
	for _, e := range in.reading.Entities {
		if e.MIG != nil {
			continue
		}
		total, ok1 := e.Values[gpu.FieldFBTotal]
		free, ok2 := e.Values[gpu.FieldFBFree]
		used, ok3 := e.Values[gpu.FieldFBUsed]
		s, ok4 := in.smi.mem[e.UUID]
		if !ok1 || !ok2 || !ok3 || !ok4 {
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: no memory figures to compare (a MIG-enabled GPU answers unprivileged callers per instance)", e.UUID))
			continue
		}
		compared++
		reserved := total - free - used
		switch {
		case math.Abs(reserved-s.reserved) <= 8 && within(0.01, 64)(used, s.used):
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: used %g MiB (nvidia-smi %g), reserved %g MiB (nvidia-smi %g) apart", e.UUID, used, s.used, reserved, s.reserved))
		case s.reserved > 64 && within(0.01, 64)(used, s.used+s.reserved):
			problems = append(problems, fmt.Sprintf("%s: the agent's used %g MiB counts the reserved memory (nvidia-smi used %g + reserved %g): NVML v1", e.UUID, used, s.used, s.reserved))
		case math.Abs(reserved-s.reserved) > 8:
			problems = append(problems, fmt.Sprintf("%s: total-free-used %g MiB, nvidia-smi memory.reserved %g MiB", e.UUID, reserved, s.reserved))
		default:
			problems = append(problems, fmt.Sprintf("%s: the agent's used %g MiB, nvidia-smi memory.used %g MiB", e.UUID, used, s.used))
		}
	}
	switch {
	case len(problems) > 0:
		c.Status, c.Evidence = statusFail, append(problems, c.Evidence...)
	case compared == 0:
		c.Status = statusNotProven
	default:
		c.Status = statusPass
	}
	return c
}

// joinCheck: the process placed in a pod-like cgroup is the pod's, on the
// GPU nvidia-smi lists it on: its memory under that pod's UID, and a
// violation (the pod holds no claim and no device-plugin GPU here).
func joinCheck(in checkInput) check {
	c := check{Name: checkJoin}
	if len(in.expectPods) == 0 {
		c.Status, c.Evidence = statusNotProven, []string{"no process was placed in a pod-like cgroup (no writable cgroup v2, or no load)"}
		return c
	}
	if !in.view.ProcVisible {
		c.Status, c.Evidence = statusFail, []string{"the agent does not see the host's processes (host PID namespace)"}
		return c
	}
	var problems []string
	listed := 0
	for _, p := range gpuProcesses(in.reading) {
		uid, ok := in.expectPods[p.PID]
		if !ok {
			continue
		}
		listed++
		mem, violation := 0.0, false
		for _, m := range in.view.PodMemory {
			if m.PodUID == uid && (m.GPUUUID == p.GPU || entityParent(in.reading, m.GPUUUID) == p.GPU) {
				mem += m.Bytes
			}
		}
		for _, v := range in.view.Violations {
			if v.PodUID == uid && (v.GPUUUID == p.GPU || entityParent(in.reading, v.GPUUUID) == p.GPU) {
				violation = true
			}
		}
		switch {
		case mem < p.Bytes:
			problems = append(problems, fmt.Sprintf("pid %d on %s (%.0f MiB): pod %s has %.0f MiB there; the agent's pods: %v", p.PID, p.GPU, p.Bytes/(1<<20), uid, mem/(1<<20), podAttributions(in.view)))
		case !violation:
			problems = append(problems, fmt.Sprintf("pid %d on %s: pod %s holds no GPU, yet no isolation violation", p.PID, p.GPU, uid))
		default:
			c.Evidence = append(c.Evidence, fmt.Sprintf("pid %d on %s: pod %s, %.0f MiB, isolation violation (it holds no claim)", p.PID, p.GPU, uid, mem/(1<<20)))
		}
	}
	switch {
	case len(problems) > 0:
		c.Status, c.Evidence = statusFail, problems
	case listed == 0:
		c.Status, c.Evidence = statusNotProven, []string{fmt.Sprintf("none of the pod cgroup's PIDs %v is a GPU process", sortedPIDs(in.expectPods))}
	default:
		c.Status = statusPass
	}
	return c
}

func entityParent(r *gpu.Reading, uuid string) string {
	if r != nil {
		for _, e := range r.Entities {
			if e.UUID == uuid {
				return e.ParentUUID
			}
		}
	}
	return ""
}

func sortedPIDs(m map[int]string) []int {
	out := make([]int, 0, len(m))
	for pid := range m {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}
