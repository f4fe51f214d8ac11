package collector

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/nodeagent"
)

// gpuLabels are the labels of the node agent's per-GPU gauges. namespace,
// pod, pod_uid and claim are set only when exactly one pod holds the GPU:
// with several holders (a shared claim, time-slicing) a copy per pod would
// make sums double-count; dra_gpu_holder_info lists the holders instead.
var gpuLabels = []string{"node", "gpu_uuid", "driver", "pool", "device", "lane", "namespace", "pod", "pod_uid", "claim"}

// gpuFamily is a per-GPU family read from one DCGM field.
type gpuFamily struct {
	field gpu.FieldID
	def   *Def
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
	return gpuFamily{field: id, def: newDefSplit(name, typ, help+".", gpuLabels...)}
}

var gpuFamilies = []gpuFamily{
	newGPUFamily(gpu.FieldGPUUtil, "dra_gpu_utilization_ratio", typeGauge,
		"Fraction of the last sample period a kernel ran on the GPU (not reported for MIG instances)."),
	newGPUFamily(gpu.FieldFBUsed, "dra_gpu_memory_used_bytes", typeGauge,
		"Framebuffer memory used on the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldFBFree, "dra_gpu_memory_free_bytes", typeGauge,
		"Framebuffer memory free on the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldFBTotal, "dra_gpu_memory_total_bytes", typeGauge,
		"Framebuffer memory of the GPU or MIG instance, in bytes."),
	newGPUFamily(gpu.FieldPowerUsage, "dra_gpu_power_watts", typeGauge,
		"Board power draw, in watts."),
	newGPUFamily(gpu.FieldGPUTemp, "dra_gpu_temperature_celsius", typeGauge,
		"GPU core temperature, in degrees Celsius."),
	newGPUFamily(gpu.FieldSMClock, "dra_gpu_sm_clock_hertz", typeGauge,
		"Streaming multiprocessor clock, in hertz."),
	newGPUFamily(gpu.FieldXIDErrors, "dra_gpu_last_xid_error", typeGauge,
		"Code of the last XID error the driver reported for the GPU (0: none since the driver loaded)."),
	newGPUFamily(gpu.FieldECCSBEVolTotal, "dra_gpu_ecc_single_bit_errors_total", typeCounter,
		"Single-bit (corrected) ECC errors since the driver loaded."),
	newGPUFamily(gpu.FieldECCDBEVolTotal, "dra_gpu_ecc_double_bit_errors_total", typeCounter,
		"Double-bit (uncorrectable) ECC errors since the driver loaded."),
	newGPUFamily(gpu.FieldProfGrEngine, "dra_gpu_graphics_engine_active_ratio", typeGauge,
		"Fraction of time the graphics or compute engine was active (profiling; MIG instances included)."),
	newGPUFamily(gpu.FieldProfSMActive, "dra_gpu_sm_active_ratio", typeGauge,
		"Fraction of time at least one warp was active on an SM, averaged over the SMs (profiling)."),
	newGPUFamily(gpu.FieldProfTensor, "dra_gpu_tensor_pipe_active_ratio", typeGauge,
		"Fraction of cycles the tensor pipes were active (profiling)."),
	newGPUFamily(gpu.FieldProfDRAMActive, "dra_gpu_dram_active_ratio", typeGauge,
		"Fraction of cycles device memory was sending or receiving data (profiling)."),
}

var (
	gpuInfo = newDefSplit("dra_gpu_info", typeGauge,
		"A GPU or MIG instance of the node, with the ResourceSlice device that publishes it."+docSep+"From the GPU source or the node's ResourceSlices. Always 1.",
		"node", "gpu_uuid", "parent_gpu_uuid", "product", "driver", "pool", "device")
	gpuHolderInfo = newDefSplit("dra_gpu_holder_info", typeGauge,
		"A pod holding a GPU or MIG instance, in the dra, dra-extended or device-plugin lane."+docSep+"In the dra lane through a claim (what the kubelet prepared, or the claim allocations when the kubelet does not report DRA), in the device-plugin lane through the kubelet's device assignment. Always 1.",
		"node", "gpu_uuid", "lane", "namespace", "pod", "pod_uid", "claim")
	gpuPodMemory = newDefSplit("dra_gpu_pod_memory_used_bytes", typeGauge,
		"GPU memory the processes of one pod use on a GPU or MIG instance, in bytes."+docSep+"From the NVML process list, each PID mapped to its pod by its cgroup. Processes of no pod have empty pod labels; the series of a GPU add up to its processes' memory.",
		"node", "gpu_uuid", "namespace", "pod", "pod_uid")
	gpuIsolationViolation = newDefSplit("dra_gpu_isolation_violation", typeGauge,
		"A pod with a process on a GPU it holds in neither lane (neither the kubelet nor a claim allocation gives it this GPU). Always 1.",
		"node", "gpu_uuid", "namespace", "pod", "pod_uid")
	nodeClaimConflict = newDefSplit("dra_node_claim_conflict", typeGauge,
		"The kubelet and the API server disagree about a device of this node, or a GPU is held in both lanes."+docSep+"reason not_prepared, prepared_without_claim or both_lanes. Always 1.",
		"node", "namespace", "claim", "pod", "pod_uid", "driver", "pool", "device", "gpu_uuid", "reason")
	gpuSourceUp = newDefSplit("dra_gpu_source_up", typeGauge,
		"Whether the GPU source (dcgm, recorded, none) answered the last scrape (1) or not (0). While it is 0 the GPU telemetry families are absent and the claim and kubelet families are still served.",
		"source")
	podResourcesUp = newDefSplit("dra_node_podresources_up", typeGauge,
		"Whether the kubelet's pod-resources API answered the last scrape (1) or not (0: socket missing, kubelet down, disabled). While it is 0 the dra lane falls back to the claim allocations and the device-plugin lane is unknown.")
	podResourcesDynamic = newDefSplit("dra_node_podresources_dynamic_resources", typeGauge,
		"Whether the kubelet's pod-resources API reports DRA claims (1) or not (0)."+docSep+"0 while pods of the node hold allocated claims: feature gate KubeletPodResourcesDynamicResources off or an old kubelet; the dra lane then comes from the claim allocations. Absent when it cannot be told.")
	hostProcsVisible = newDefSplit("dra_node_host_processes_visible", typeGauge,
		"Whether the host's processes are visible under --proc-root (hostPID) (1) or not (0)."+docSep+"Without them GPU processes do not map to pods: no per-pod memory, no isolation check.")
	nodeScrapeDuration = newDefSplit("dra_node_scrape_collector_duration_seconds", typeGauge,
		"Time a part of the node agent's scrape took (gpu, podresources, procmap, join), in seconds.", "collector").live()
	nodeScrapeSuccess = newDefSplit("dra_node_scrape_collector_success", typeGauge,
		"Whether a part of the node agent's scrape succeeded (1) or failed (0).", "collector").live()
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

// NewNode returns the collector; timing adds the per-part duration and
// success families (left out of golden files).
func NewNode(g Gatherer, timing bool) *Node {
	return &Node{g: g, timing: timing, timeout: 10 * time.Second}
}

// NodeDefs lists the node agent's families, in exposition order.
func NodeDefs() []*Def {
	defs := []*Def{gpuInfo}
	for _, f := range gpuFamilies {
		defs = append(defs, f.def)
	}
	return append(defs, gpuHolderInfo, gpuPodMemory, gpuIsolationViolation, nodeClaimConflict,
		gpuSourceUp, podResourcesUp, podResourcesDynamic, hostProcsVisible, nodeScrapeDuration, nodeScrapeSuccess)
}

// Describe implements prometheus.Collector.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range NodeDefs() {
		if d.Live && !n.timing {
			continue
		}
		ch <- d.desc
	}
}

// Collect implements prometheus.Collector.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	v, steps := n.g.Gather(ctx)
	e := &emitter{}
	defer func() {
		for _, m := range e.constMetrics() {
			ch <- m
		}
	}()
	node := v.Node
	for _, g := range v.Inventory {
		e.uniqueGauge(gpuInfo, 1, node, g.UUID, g.ParentUUID, g.Product, g.Driver, g.Pool, g.Device)
	}
	for _, g := range v.GPUs {
		var h nodeagent.Holder
		if g.Holder != nil {
			h = *g.Holder
		}
		for _, f := range gpuFamilies {
			raw, ok := g.Values[f.field]
			if !ok {
				continue
			}
			field, _ := gpu.FieldByID(f.field)
			lvs := []string{node, g.UUID, g.Driver, g.Pool, g.Device, g.Lane, h.Namespace, h.Pod, h.PodUID, h.Claim}
			if f.def.Type == typeCounter {
				e.metrics = append(e.metrics, prometheus.MustNewConstMetric(f.def.desc, prometheus.CounterValue, raw*field.Scale, lvs...))
				continue
			}
			e.gauge(f.def, raw*field.Scale, lvs...)
		}
	}
	for _, h := range v.Holders {
		e.uniqueGauge(gpuHolderInfo, 1, node, h.GPUUUID, h.Lane, h.Namespace, h.Pod, h.PodUID, h.Claim)
	}
	for _, m := range v.PodMemory {
		e.uniqueGauge(gpuPodMemory, m.Bytes, node, m.GPUUUID, m.Namespace, m.Pod, m.PodUID)
	}
	for _, x := range v.Violations {
		e.uniqueGauge(gpuIsolationViolation, 1, node, x.GPUUUID, x.Namespace, x.Pod, x.PodUID)
	}
	for _, c := range v.Conflicts {
		e.uniqueGauge(nodeClaimConflict, 1, node, c.Namespace, c.Claim, c.Pod, c.PodUID, c.Driver, c.Pool, c.Device, c.GPUUUID, c.Reason)
	}
	e.gauge(gpuSourceUp, boolFloat(v.SourceUp), v.Source)
	e.gauge(podResourcesUp, boolFloat(v.PodResourcesUp))
	if v.Dynamic != nil {
		e.gauge(podResourcesDynamic, boolFloat(*v.Dynamic))
	}
	e.gauge(hostProcsVisible, boolFloat(v.ProcVisible))
	if n.timing {
		for _, s := range steps {
			e.gauge(nodeScrapeDuration, s.Duration.Seconds(), s.Name)
			e.gauge(nodeScrapeSuccess, boolFloat(s.OK), s.Name)
		}
	}
}
