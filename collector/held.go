package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var (
	heldDeviceHealth = family.New("dra_allocated_device_health", family.TypeGauge,
		"The kubelet's health of a device a running pod holds, per pod, claim and device.",
		"namespace", "pod", "pod_uid", "claim", "driver", "pool", "device", "node", "gpu_uuid", "health").
		WithDoc("health is healthy, unhealthy or unknown, from status.containerStatuses[].allocatedResourcesStatus (KEP-4680, ResourceHealthStatus, beta in 1.36; the driver reports it through the kubelet). Only devices the kubelet reports on; the worst of the pod's containers. The kubelet names a device by its first CDI device ID (driver/pool/device only without one): a CDI name ending in the device's name, or the only device of the claim's request, is attributed; a CDI name several devices of a request share is not. Always 1.")
	heldDeviceTaint = family.New("dra_allocated_device_taint", family.TypeGauge,
		"A taint on a device a running pod holds, per pod, claim, device and taint.",
		"namespace", "pod", "pod_uid", "claim", "driver", "pool", "device", "node", "gpu_uuid", "taint", "effect", "rule").
		WithDoc("taint is the taint key (the NVIDIA driver's gpu.nvidia.com/xid, gpu.nvidia.com/gpu-lost, gpu.nvidia.com/unmonitored), effect None, NoSchedule or NoExecute; rule names the DeviceTaintRule that put it there, empty for a taint of the ResourceSlice entry. A running pod keeps a NoSchedule-tainted device; NoExecute evicts it. Always 1.")
)

type heldCollector struct{}

// NewHeldCollector exports the health and taints of devices pods hold.
func NewHeldCollector() engine.Collector { return heldCollector{} }

func (heldCollector) Name() string        { return "held" }
func (heldCollector) Defs() []*family.Def { return []*family.Def{heldDeviceHealth, heldDeviceTaint} }

func (c heldCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per pod that may hold a device with a health report or a
// taint, which reads its claims and their devices (FanOut).
func (heldCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, p := range s.Pods {
		heldRow(s, p, rows)
	}
}

// RowsOf (engine.Partial) is EachRow over some pods.
func (heldCollector) RowsOf(s *index.Snapshot, _ time.Time, objs []any, rows *engine.Rows) {
	for _, o := range objs {
		heldRow(s, o.(*index.Pod), rows)
	}
}

func heldRow(s *index.Snapshot, p *index.Pod, rows *engine.Rows) {
	if !heldMayShow(s, p) {
		return
	}
	if e := rows.Row(p); e != nil {
		emitHeld(s, p, e)
	}
}

func emitHeld(s *index.Snapshot, p *index.Pod, e *family.Emitter) {
	for _, h := range classify.HeldBy(s, p) {
		c, d := h.Claim, h.Device
		lvs := []string{p.Key.Namespace, p.Key.Name, string(p.UID), c.Key.Name, d.Key.Driver, d.Key.Pool, d.Key.Device, d.Node, d.GPUUUID}
		if h.Health != "" {
			e.UniqueGauge(heldDeviceHealth, 1, append(lvs, h.Health)...)
		}
		for _, t := range h.Taints {
			e.UniqueGauge(heldDeviceTaint, 1, append(lvs, t.Key, string(t.Effect), t.Rule)...)
		}
	}
}
