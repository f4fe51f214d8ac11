package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	nodecollector "github.com/dra-exporter/dra-exporter/internal/node/collector"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/node/procmap"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// gpuCheck runs the node agent's GPU side on this host (no API server: an
// empty store), prints, for every GPU and MIG instance, each field as the
// library answered it beside the agent's series and nvidia-smi's figure,
// then the checks of docs/node-agent.md (processes, minor numbers and PCI
// bus ids, reserved memory, the join of a pod's process, the chart's
// restrictions); it exits 0 only when every check passes (a check not
// proven passes only when --allow-not-proven names it), 1 otherwise, 2
// when it cannot run.
func gpuCheck(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Reads this host's GPUs as the node agent does and prints each field's raw reading (DCGM where it serves, "+
		"NVML otherwise) beside the agent's series and nvidia-smi's figures, then compares processes, minor numbers, PCI bus ids, "+
		"reserved memory and the join with nvidia-smi and the driver. Exits 0 only when every check passes.", stdout, stderr)
	var gf gpuFlags
	gf.register(app)
	smi := app.Flag("nvidia-smi", "The nvidia-smi to compare with; \"fake\" renders the --gpu.fake-file machine's, \"\" skips it.").Default("nvidia-smi").String()
	socket := app.Flag("kubelet.pod-resources-socket", "The kubelet's pod-resources socket, read when present.").Default(podresources.DefaultSocket).String()
	procRoot := app.Flag("proc-root", "The host's /proc.").Default("/proc").String()
	reads := app.Flag("reads", "Reads of the GPU source; the last is compared (the first may wait for DCGM's first samples).").Default("3").Int()
	interval := app.Flag("interval", "Time between the reads.").Default("2s").Duration()
	jsonOut := app.Flag("json", "Also write the checks as JSON (name, status pass/fail/not-proven, evidence) to FILE; - writes them to stdout and the rest to stderr.").PlaceHolder("FILE").String()
	driverProc := app.Flag("driver-proc", "The kernel driver's /proc/driver/nvidia (gpus/<bus>/information: UUID and minor by PCI address).").Default("/proc/driver/nvidia").String()
	load := app.Flag("load", "The GPU load that ran during the reads (gpu-check.sh sets it).").String()
	loadMissing := app.Flag("load.missing", "Why no GPU load ran (gpu-check.sh sets it).").Default("no load named (--load)").String()
	expect := app.Flag("expect-pod", "PID=POD_UID: a process placed in a pod-like cgroup, which the agent must attribute to that pod (repeatable).").Strings()
	ownNS := app.Flag("own-pid-namespace-report", "The --json of the same check run without the host PID namespace.").PlaceHolder("FILE").String()
	ownNSErr := app.Flag("own-pid-namespace.missing", "Why there is no run without the host PID namespace.").Default("not run (--own-pid-namespace-report)").String()
	allow := app.Flag("allow-not-proven", "A check that may end not proven without failing the run (repeatable; names: "+strings.Join(checkNames, ", ")+").").Enums(checkNames...)
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	expectPods, err := parseExpectPods(*expect)
	if err != nil {
		fmt.Fprintln(stderr, "gpu-check:", err)
		return 2
	}
	human := stdout
	if *jsonOut == "-" {
		human = stderr
	}
	src, err := gf.open(slog.New(slog.NewTextHandler(stderr, nil)), true)
	if err != nil {
		fmt.Fprintln(stderr, "gpu-check:", err)
		return 2
	}
	defer src.Close()
	cfg := nodeagent.Config{Node: "gpu-check", Store: emptyStore{}, GPU: src, DevicePluginResources: dra.Resources{"nvidia.com/gpu"}}
	if _, err := os.Stat(*socket); err == nil {
		c, err := podresources.NewClient(*socket, 5*time.Second)
		if err == nil {
			defer c.Close()
			cfg.Kubelet = c
		}
	}
	if *procRoot != "" {
		cfg.Proc = &procmap.Mapper{Root: *procRoot}
	}
	agent := nodeagent.New(cfg)
	var v *nodeagent.View
	var steps []nodeagent.Step
	for i := 0; i < max(*reads, 1); i++ {
		if i > 0 {
			time.Sleep(*interval)
		}
		v, steps = agent.Gather(context.Background())
	}
	reading := agent.LastReading()
	var smiOut smiReport
	if *smi != "" {
		smiOut, err = runSMI(*smi, gf)
		if err != nil {
			fmt.Fprintln(stderr, "gpu-check:", err)
			return 2
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(nodecollector.New(fixedView{v, steps}, false))
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Fprintln(stderr, "gpu-check:", err)
		return 2
	}
	in := checkInput{view: v, reading: reading, withSMI: *smi != "", smi: smiOut, driverProc: *driverProc,
		load: *load, loadMissing: *loadMissing, expectPods: expectPods, ownNSErr: *ownNSErr, self: selfObserved("/proc/self/status")}
	in.fieldProblems = report(human, v, reading, seriesByUUID(mfs), smiOut, in.withSMI)
	printJoin(human, v)
	if *ownNS != "" {
		if in.ownNS, err = readReport(*ownNS); err != nil {
			in.ownNSErr = "no report of the run without the host PID namespace: " + err.Error()
		}
	}
	in.self.ProcVisible = v.ProcVisible
	in.self.Processes = gpuProcesses(reading)
	in.self.Pods = podAttributions(v)
	if reading != nil {
		for _, e := range reading.Entities {
			in.self.GPUs = append(in.self.GPUs, e.UUID)
		}
		sort.Strings(in.self.GPUs)
	}
	checks := buildChecks(in)
	ok := decide(checks, *allow)
	printChecks(human, checks, *allow)
	if *jsonOut != "" {
		raw, err := json.MarshalIndent(checkReport{Source: v.Source, Checks: checks, OK: ok, Allow: *allow, Observed: in.self}, "", "  ")
		if err == nil && *jsonOut == "-" {
			_, err = fmt.Fprintln(stdout, string(raw))
		} else if err == nil {
			err = os.WriteFile(*jsonOut, append(raw, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "gpu-check: --json:", err)
			return 2
		}
	}
	if !ok {
		fmt.Fprintln(human, "\nNOT OK: a check failed or is not proven (see above; --allow-not-proven names the checks that may be skipped)")
		return 1
	}
	fmt.Fprintln(human, "\nOK: every check passed")
	return 0
}

// emptyStore is a node without API objects.
type emptyStore struct{}

func (emptyStore) Pods() []*corev1.Pod                           { return nil }
func (emptyStore) Slices() []*objects.Slice                      { return nil }
func (emptyStore) Claims() map[string]*resourceapi.ResourceClaim { return nil }
func (emptyStore) Want([]string)                                 {}

// fixedView serves one gathered view to the collector, so that the series
// come from the same read as the raw values.
type fixedView struct {
	v     *nodeagent.View
	steps []nodeagent.Step
}

func (f fixedView) Gather(context.Context) (*nodeagent.View, []nodeagent.Step) { return f.v, f.steps }

// seriesByUUID indexes the per-GPU series: uuid -> family -> value.
func seriesByUUID(mfs []*dto.MetricFamily) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var uuid string
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu_uuid" {
					uuid = l.GetValue()
				}
			}
			if uuid == "" || mf.GetName() == "dra_gpu_info" || mf.GetName() == "dra_gpu_holder_info" || mf.GetName() == "dra_gpu_pod_memory_used_bytes" {
				continue
			}
			if out[uuid] == nil {
				out[uuid] = map[string]float64{}
			}
			val := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				val = m.GetCounter().GetValue()
			}
			out[uuid][mf.GetName()] = val
		}
	}
	return out
}

// familyOf maps a field to the agent's family.
var familyOf = map[string]string{
	"DCGM_FI_DEV_GPU_UTIL": "dra_gpu_utilization_ratio", "DCGM_FI_DEV_FB_USED": "dra_gpu_memory_used_bytes",
	"DCGM_FI_DEV_FB_FREE": "dra_gpu_memory_free_bytes", "DCGM_FI_DEV_FB_TOTAL": "dra_gpu_memory_total_bytes",
	"DCGM_FI_DEV_POWER_USAGE": "dra_gpu_power_watts", "DCGM_FI_DEV_GPU_TEMP": "dra_gpu_temperature_celsius",
	"DCGM_FI_DEV_SM_CLOCK": "dra_gpu_sm_clock_hertz", "DCGM_FI_DEV_XID_ERRORS": "dra_gpu_last_xid_error",
	"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "dra_gpu_ecc_single_bit_errors_total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "dra_gpu_ecc_double_bit_errors_total",
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "dra_gpu_graphics_engine_active_ratio", "DCGM_FI_PROF_SM_ACTIVE": "dra_gpu_sm_active_ratio",
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "dra_gpu_tensor_pipe_active_ratio", "DCGM_FI_PROF_DRAM_ACTIVE": "dra_gpu_dram_active_ratio",
}

// smiField is nvidia-smi's query field for a DCGM field, and how far the
// two may be apart (they are read moments apart; 0: exactly).
var smiField = map[string]struct {
	query     string
	tolerance func(a, b float64) bool
}{
	"DCGM_FI_DEV_FB_TOTAL":          {"memory.total", within(0.01, 1)},
	"DCGM_FI_DEV_FB_USED":           {"memory.used", within(0.05, 512)},
	"DCGM_FI_DEV_POWER_USAGE":       {"power.draw", within(0.25, 25)},
	"DCGM_FI_DEV_GPU_TEMP":          {"temperature.gpu", within(0, 5)},
	"DCGM_FI_DEV_SM_CLOCK":          {"clocks.sm", within(0.25, 100)},
	"DCGM_FI_DEV_GPU_UTIL":          {"utilization.gpu", within(0, 100)},
	"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": {"ecc.errors.corrected.volatile.total", within(0, 0)},
	"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": {"ecc.errors.uncorrected.volatile.total", within(0, 0)},
}

func within(rel, abs float64) func(a, b float64) bool {
	return func(a, b float64) bool { return math.Abs(a-b) <= math.Max(abs, rel*math.Max(math.Abs(a), math.Abs(b))) }
}

// report prints the comparison and returns the disagreements.
func report(w io.Writer, v *nodeagent.View, reading *gpu.Reading, series map[string]map[string]float64, smi smiReport, withSMI bool) []string {
	var problems []string
	fmt.Fprintf(w, "source: %s, up: %v\n", v.Source, v.SourceUp)
	if reading == nil || !v.SourceUp {
		return append(problems, fmt.Sprintf("no GPU source serves (%s): see the log lines above", v.Source))
	}
	for _, g := range reading.Groups {
		state := "watched"
		if !g.Watched {
			state = "not watched: " + g.Reason
		}
		fmt.Fprintf(w, "field group %s: %s\n", g.Name, state)
	}
	seen := map[string]bool{}
	for _, e := range reading.Entities {
		seen[e.UUID] = true
		fmt.Fprintln(w)
		if e.MIG != nil {
			fmt.Fprintf(w, "%s  MIG %s (GPU instance %d) on %s\n", e.UUID, e.MIG.Profile, e.MIG.GPUInstanceID, e.ParentUUID)
			if withSMI {
				if m, ok := smi.migs[e.UUID]; !ok {
					problems = append(problems, fmt.Sprintf("%s: nvidia-smi -L does not list this MIG device", e.UUID))
				} else if m.profile != e.MIG.Profile || m.parent != e.ParentUUID {
					problems = append(problems, fmt.Sprintf("%s: nvidia-smi says profile %s on %s, the agent %s on %s", e.UUID, m.profile, m.parent, e.MIG.Profile, e.ParentUUID))
				}
			}
		} else {
			fmt.Fprintf(w, "%s  %s (index %d, minor %d, lost %v)\n", e.UUID, e.Product, e.Index, e.Minor, e.Lost)
			if withSMI && smi.gpus[e.UUID] == nil {
				problems = append(problems, fmt.Sprintf("%s: nvidia-smi does not list this GPU", e.UUID))
			}
		}
		problems = append(problems, entityTable(w, e, series[e.UUID], smi.gpus[e.UUID])...)
	}
	if withSMI {
		for _, uuids := range []map[string]bool{keys(smi.gpus), keys(smi.migs)} {
			for uuid := range uuids {
				if !seen[uuid] {
					problems = append(problems, fmt.Sprintf("%s: nvidia-smi lists it, the agent does not read it", uuid))
				}
			}
		}
	}
	sort.Strings(problems)
	return problems
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// entityTable prints one entity's fields and checks them.
func entityTable(w io.Writer, e gpu.Entity, series map[string]float64, smi map[string]string) []string {
	var problems []string
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  FIELD\tTYPE\tSTATUS\tRAW\tAGENT SERIES\tNVIDIA-SMI\t")
	rawByField := map[string]gpu.RawValue{}
	for _, r := range e.Raw {
		rawByField[r.Field] = r
	}
	for _, f := range gpu.Fields {
		family := familyOf[f.Name]
		r, asked := rawByField[f.Name]
		got, hasSeries := series[family]
		want, hasValue := e.Values[f.ID]
		agent := "-"
		if hasSeries {
			agent = fmt.Sprintf("%s %g", family, got)
		}
		smiText := "-"
		if s, ok := smiField[f.Name]; ok && smi != nil && e.MIG == nil {
			smiText = smi[s.query]
			if x, err := strconv.ParseFloat(smiText, 64); err == nil && hasValue && !s.tolerance(x, want) {
				problems = append(problems, fmt.Sprintf("%s %s: the library reads %g, nvidia-smi %s %g", e.UUID, f.Name, want, s.query, x))
			}
			if smiText != "[N/A]" && smiText != "" && !hasValue && !e.Lost {
				problems = append(problems, fmt.Sprintf("%s %s: nvidia-smi %s reads %s, the agent has no value", e.UUID, f.Name, s.query, smiText))
			}
		}
		if !asked && !hasSeries && !hasValue {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", f.Name, r.Type, r.Status, r.Value, agent, smiText)
		switch {
		case e.MIG != nil && !f.Instance && hasSeries:
			problems = append(problems, fmt.Sprintf("%s %s: a MIG instance carries the board's value", e.UUID, family))
		case hasValue && !hasSeries:
			problems = append(problems, fmt.Sprintf("%s %s: the library has a value, the agent no series", e.UUID, f.Name))
		case hasSeries && !hasValue:
			problems = append(problems, fmt.Sprintf("%s %s: the agent has a series the library gave no value for", e.UUID, family))
		case hasSeries && math.Abs(got-want*f.Scale) > 1e-9*math.Max(1, math.Abs(got)):
			problems = append(problems, fmt.Sprintf("%s %s: the agent serves %g, the library read %g × %g", e.UUID, family, got, want, f.Scale))
		}
	}
	tw.Flush()
	return problems
}
