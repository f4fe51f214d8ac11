// Package collector is the node agent's Prometheus collector: the
// joined view of one GPU node (internal/node/agent) as metric families. It
// lives apart from package collector so that the cluster exporter's
// packages do not depend on the agent's GPU libraries (cgo), its gRPC
// client or its sources.
package collector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/family"
	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// gpuLabels are the labels of the node agent's per-GPU gauges. namespace,
// pod, pod_uid and claim are set only when exactly one pod holds the GPU:
// with several holders (a shared claim, time-slicing) a copy per pod would
// make sums double-count; dra_gpu_holder_info lists the holders instead.
var gpuLabels = []string{"node", "gpu_uuid", "driver", "pool", "device", "lane", "namespace", "pod", "pod_uid", "claim"}

// gpuFamily is a per-GPU family read from one DCGM field.
type gpuFamily struct {
	field gpu.FieldID
	def   *family.Def
}

// docSep splits a family text into its HELP line and its guidance.
const docSep = "\x00"

func newGPUFamily(id gpu.FieldID, name, typ, help string) gpuFamily {
	f, ok := gpu.FieldByID(id)
	if !ok {
		panic(fmt.Sprintf("unknown DCGM field %d", id)) // a programming error, caught by every test
	}
	help = fmt.Sprintf("%s Reads %s (%s)", help, f.Name, f.Unit)
	if f.Scale != 1 {
		help += fmt.Sprintf(" times %g", f.Scale)
	}
	if !f.Instance {
		help += "; a GPU's own, never a MIG instance's"
	}
	return gpuFamily{field: id, def: family.NewSplit(name, typ, help+".", gpuLabels...)}
}

var gpuFamilies = []gpuFamily{
	newGPUFamily(gpu.FieldGPUUtil, "dra_gpu_utilization_ratio", family.TypeGauge,
		"Fraction of the last sample period a kernel ran on the GPU."),
	newGPUFamily(gpu.FieldFBUsed, "dra_gpu_memory_used_bytes", family.TypeGauge,
		"Framebuffer memory used on the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldFBFree, "dra_gpu_memory_free_bytes", family.TypeGauge,
		"Framebuffer memory free on the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldFBTotal, "dra_gpu_memory_total_bytes", family.TypeGauge,
		"Framebuffer memory of the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldPowerUsage, "dra_gpu_power_watts", family.TypeGauge,
		"Board power draw, in watts."),
	newGPUFamily(gpu.FieldGPUTemp, "dra_gpu_temperature_celsius", family.TypeGauge,
		"GPU core temperature, in degrees Celsius."),
	newGPUFamily(gpu.FieldSMClock, "dra_gpu_sm_clock_hertz", family.TypeGauge,
		"Streaming multiprocessor clock, in hertz."),
	newGPUFamily(gpu.FieldXIDErrors, "dra_gpu_last_xid_error", family.TypeGauge,
		"Code of the last XID error the driver reported for the GPU or MIG instance (0: none yet). None since DCGM started watching the GPU, or with NVML since the agent started; a MIG instance's XIDs are its own (with NVML, to a privileged agent only), the GPU's those of the whole device."),
	newGPUFamily(gpu.FieldECCSBEVolTotal, "dra_gpu_ecc_single_bit_errors_total", family.TypeCounter,
		"Single-bit (corrected) ECC errors since the driver loaded."),
	newGPUFamily(gpu.FieldECCDBEVolTotal, "dra_gpu_ecc_double_bit_errors_total", family.TypeCounter,
		"Double-bit (uncorrectable) ECC errors since the driver loaded."),
	newGPUFamily(gpu.FieldProfGrEngine, "dra_gpu_graphics_engine_active_ratio", family.TypeGauge,
		"Fraction of time the graphics or compute engine was active (DCGM profiling; MIG instances included)."),
	newGPUFamily(gpu.FieldProfSMActive, "dra_gpu_sm_active_ratio", family.TypeGauge,
		"Fraction of time at least one warp was active on an SM, averaged over the SMs (DCGM profiling)."),
	newGPUFamily(gpu.FieldProfTensor, "dra_gpu_tensor_pipe_active_ratio", family.TypeGauge,
		"Fraction of cycles the tensor pipes were active (DCGM profiling)."),
	newGPUFamily(gpu.FieldProfDRAMActive, "dra_gpu_dram_active_ratio", family.TypeGauge,
		"Fraction of cycles device memory was sending or receiving data (DCGM profiling)."),
}

var (
	gpuInfo = family.NewSplit("dra_gpu_info", family.TypeGauge,
		"A GPU or MIG instance of the node, with the ResourceSlice device that publishes it."+docSep+"From the GPU source or the node's ResourceSlices. Always 1.",
		"node", "gpu_uuid", "parent_gpu_uuid", "product", "driver", "pool", "device")
	gpuLost = family.NewSplit("dra_gpu_lost", family.TypeGauge,
		"Whether the GPU source reports the GPU (or a MIG instance's GPU) lost, fallen off the bus (1), or not (0)."+docSep+"A lost GPU (XID 79) answers no field: its telemetry families are absent while this reads 1 and the source is up. Needs a node reboot or a GPU reset. Also 1 for a GPU that NVML counts but can no longer open (GPU_IS_LOST or NO_PERMISSION on its handle), under the UUID the agent read before; the node's other GPUs are served. One the agent never named is only logged.",
		gpuLabels...)
	gpuHolderInfo = family.NewSplit("dra_gpu_holder_info", family.TypeGauge,
		"A pod holding a GPU or MIG instance, in the dra, dra-extended or device-plugin lane."+docSep+"In the dra lane through a claim (what the kubelet prepared, or the claim allocations when the kubelet does not report DRA), in the device-plugin lane through the kubelet's device assignment (--device-plugin.resources, with nvidia.com/gpu also nvidia.com/gpu.shared and nvidia.com/mig-*; IDs GPU-/MIG-<uuid>, replicas <id>::<n>, GKE's nvidia<minor>, nvidia<minor>/vgpu<n> and nvidia<minor>/gi<id>, the index strategy's <index> and <index>:<n> name their GPU or MIG instance). Always 1.",
		"node", "gpu_uuid", "lane", "namespace", "pod", "pod_uid", "claim")
	gpuPodMemory = family.NewSplit("dra_gpu_pod_memory_used_bytes", family.TypeGauge,
		"GPU memory the processes of one pod use on a GPU or MIG instance, in bytes."+docSep+"From the NVML process list (under MPS the server, in the DRA driver's control-daemon pod, plus the MPS client list), each PID mapped to its pod by its cgroup. Processes of no pod have empty pod labels; the series of a GPU add up to its processes' memory. A process whose memory NVML cannot tell (NVML_VALUE_NOT_AVAILABLE) adds nothing.",
		"node", "gpu_uuid", "namespace", "pod", "pod_uid")
	gpuIsolationViolation = family.NewSplit("dra_gpu_isolation_violation", family.TypeGauge,
		"A pod with a process on a GPU it holds in neither lane (neither the kubelet nor a claim allocation gives it this GPU). Always 1.",
		"node", "gpu_uuid", "namespace", "pod", "pod_uid")
	nodeClaimConflict = family.NewSplit("dra_node_claim_conflict", family.TypeGauge,
		"The kubelet and the API server disagree about a device of this node, or a GPU is held in both lanes."+docSep+"reason not_prepared (a running container's claim the kubelet does not report; claims only init containers use are left out), prepared_without_claim, both_lanes, or driver_prepared_without_claim (the NVIDIA driver's checkpoint, --nvidia.checkpoint-file, holds the device prepared for a claim the API server no longer has and the kubelet does not report: never unprepared, dra-driver-nvidia-gpu#1278; pod is empty). Always 1.",
		"node", "namespace", "claim", "pod", "pod_uid", "driver", "pool", "device", "gpu_uuid", "reason")
	gpuSourceUp = family.NewSplit("dra_gpu_source_up", family.TypeGauge,
		"Whether the GPU source answered the last scrape (1) or not (0)."+docSep+"source names the one serving (dcgm, nvml, recorded), or the configured one (auto, dcgm, nvml, none) while none does. With --gpu.source=auto DCGM serves where it starts (profiling needs it), NVML (part of the driver) where it does not. While it is 0 the GPU telemetry families are absent, the agent reconnects with backoff, and the claim and kubelet families are still served.",
		"source")
	gpuSourceInfo = family.NewSplit("dra_gpu_source_info", family.TypeGauge,
		"A library the GPU source may serve from (dcgm, nvml), its state and, when unavailable, why."+docSep+"Always 1. state serving, unavailable (it failed to open) or standby (a preferred one serves); reason library_missing (libdcgm.so.4 or libnvidia-ml.so.1 absent, or a build without cgo), hostengine_unreachable (the standalone nv-hostengine does not answer), embedded_mig_unprivileged (the embedded host engine cannot start while a GPU has MIG mode on: DCGM then needs root and NVML's privileged GPU-instance calls; point --dcgm.hostengine-address at the GPU Operator's nv-hostengine), failed (logged). Absent for --gpu.source recorded or none.",
		"source", "state", "reason")
	fieldGroupWatched = family.NewSplit("dra_gpu_field_group_watched", family.TypeGauge,
		"Whether the GPU source watches a group of fields (1) or not (0), with the reason when not."+docSep+"field_group basic (utilisation, memory, power, temperature, clock, ECC, XID) or profiling (DCGM_FI_PROF_*, DCGM only); reason unsupported, no_permission (before Hopper the host engine needs CAP_SYS_ADMIN to profile), profiling_module_error (DCGM's profiling module failed, -37: before Hopper most often another DCGM, the GPU Operator's dcgm-exporter, holds the profiling hardware), failed; told from DCGM's status code or, where go-dcgm returns plain text, its message. Profiling is watched apart from the basic fields, so its failure leaves them served. Absent while the source is down.",
		"field_group", "reason")
	podResourcesUp = family.NewSplit("dra_node_podresources_up", family.TypeGauge,
		"Whether the kubelet's pod-resources API answered the last scrape (1) or not (0: socket missing, kubelet down, disabled). While it is 0 the dra lane falls back to the claim allocations and the device-plugin lane is unknown.")
	podResourcesDynamic = family.NewSplit("dra_node_podresources_dynamic_resources", family.TypeGauge,
		"Whether the kubelet's pod-resources API reports DRA claims (1) or not (0)."+docSep+"0 while pods of the node hold allocated claims: feature gate KubeletPodResourcesDynamicResources off or an old kubelet; the dra lane then comes from the claim allocations. Absent when it cannot be told.")
	hostProcsVisible = family.NewSplit("dra_node_host_processes_visible", family.TypeGauge,
		"Whether the host's processes are visible under --proc-root (1) or not (0)."+docSep+"1 only in the host's PID namespace (hostPID: the kernel's kthreadd is PID 2 there), where NVML's process IDs resolve; without it the driver lists none of the pods' GPU processes (it answers only those of the caller's PID namespace): no per-pod memory, no isolation check.")
	nodeScrapeDuration = family.NewSplit("dra_node_scrape_collector_duration_seconds", family.TypeGauge,
		"Time a part of the node agent's scrape took (gpu, podresources, procmap, driver-checkpoint, join), in seconds.", "collector").Liveness()
	nodeScrapeSuccess = family.NewSplit("dra_node_scrape_collector_success", family.TypeGauge,
		"Whether a part of the node agent's scrape succeeded (1) or failed (0).", "collector").Liveness()
)

// Gatherer reads the node once per scrape.
type Gatherer interface {
	Gather(ctx context.Context) (*nodeagent.View, []nodeagent.Step)
}

// Node is the node agent's prometheus.Collector.
type Node struct {
	g       Gatherer
	timing  bool
	timeout time.Duration
}

// New returns the collector; timing adds the per-part duration and
// success families (left out of golden files).
func New(g Gatherer, timing bool) *Node {
	return &Node{g: g, timing: timing, timeout: 10 * time.Second}
}

// Defs lists the node agent's families, in exposition order.
func Defs() []*family.Def {
	defs := []*family.Def{gpuInfo}
	for _, f := range gpuFamilies {
		defs = append(defs, f.def)
	}
	return append(defs, gpuLost, gpuHolderInfo, gpuPodMemory, gpuIsolationViolation, nodeClaimConflict,
		gpuSourceUp, gpuSourceInfo, fieldGroupWatched, podResourcesUp, podResourcesDynamic, hostProcsVisible, nodeScrapeDuration, nodeScrapeSuccess)
}

// Describe implements prometheus.Collector.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range Defs() {
		if d.Live && !n.timing {
			continue
		}
		ch <- d.Desc()
	}
}

// series collects one scrape's metrics, a repeated label set of a family
// dropped (it would fail the whole scrape).
type series struct {
	out  []prometheus.Metric
	seen map[string]bool
}

func (s *series) add(d *family.Def, typ prometheus.ValueType, v float64, lvs ...string) {
	key := d.Name + "\xff" + strings.Join(lvs, "\xff")
	if s.seen[key] {
		return
	}
	s.seen[key] = true
	s.out = append(s.out, prometheus.MustNewConstMetric(d.Desc(), typ, v, lvs...))
}

func (s *series) gauge(d *family.Def, v float64, lvs ...string) {
	s.add(d, prometheus.GaugeValue, v, lvs...)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	v, steps := n.g.Gather(ctx)
	s := &series{seen: map[string]bool{}}
	node := v.Node
	for _, g := range v.Inventory {
		s.gauge(gpuInfo, 1, node, g.UUID, g.ParentUUID, g.Product, g.Driver, g.Pool, g.Device)
	}
	for _, g := range v.GPUs {
		var h nodeagent.Holder
		if g.Holder != nil {
			h = *g.Holder
		}
		lvs := []string{node, g.UUID, g.Driver, g.Pool, g.Device, g.Lane, h.Namespace, h.Pod, h.PodUID, h.Claim}
		for _, f := range gpuFamilies {
			raw, ok := g.Values[f.field]
			if !ok {
				continue
			}
			field, _ := gpu.FieldByID(f.field)
			typ := prometheus.GaugeValue
			if f.def.Type == family.TypeCounter {
				typ = prometheus.CounterValue
			}
			s.add(f.def, typ, raw*field.Scale, lvs...)
		}
		s.gauge(gpuLost, boolFloat(g.Lost), lvs...)
	}
	for _, h := range v.Holders {
		s.gauge(gpuHolderInfo, 1, node, h.GPUUUID, h.Lane, h.Namespace, h.Pod, h.PodUID, h.Claim)
	}
	for _, m := range v.PodMemory {
		s.gauge(gpuPodMemory, m.Bytes, node, m.GPUUUID, m.Namespace, m.Pod, m.PodUID)
	}
	for _, x := range v.Violations {
		s.gauge(gpuIsolationViolation, 1, node, x.GPUUUID, x.Namespace, x.Pod, x.PodUID)
	}
	for _, c := range v.Conflicts {
		s.gauge(nodeClaimConflict, 1, node, c.Namespace, c.Claim, c.Pod, c.PodUID, c.Driver, c.Pool, c.Device, c.GPUUUID, c.Reason)
	}
	s.gauge(gpuSourceUp, boolFloat(v.SourceUp), v.Source)
	for _, c := range v.Candidates {
		s.gauge(gpuSourceInfo, 1, c.Source, c.State, c.Reason)
	}
	if v.SourceUp {
		for _, g := range v.Groups {
			s.gauge(fieldGroupWatched, boolFloat(g.Watched), g.Name, g.Reason)
		}
	}
	s.gauge(podResourcesUp, boolFloat(v.PodResourcesUp))
	if v.Dynamic != nil {
		s.gauge(podResourcesDynamic, boolFloat(*v.Dynamic))
	}
	s.gauge(hostProcsVisible, boolFloat(v.ProcVisible))
	if n.timing {
		for _, st := range steps {
			s.gauge(nodeScrapeDuration, st.Duration.Seconds(), st.Name)
			s.gauge(nodeScrapeSuccess, boolFloat(st.OK), st.Name)
		}
	}
	for _, m := range s.out {
		ch <- m
	}
}
