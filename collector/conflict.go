package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var allocationConflict = family.New("dra_device_allocation_conflict", family.TypeGauge,
	"A non-shareable device allocated to more than one claim, per claim and pod holding it.",
	"driver", "pool", "node", "device", "gpu_uuid", "namespace", "claim", "pod", "pod_uid").
	WithDoc("The scheduler never allocates a device twice; a force-deleted pod's device prepared for a new claim before the old claim let go does (kubernetes #141471). Each claim holding the device has its own series (count by (driver, pool, device) gives how many) (pod and pod_uid empty for a claim that reserves no pod). Admin-access allocations and devices with allowMultipleAllocations are left out. 1 while the conflict lasts.")

type conflictCollector struct{}

// NewConflictCollector exports devices allocated to two claims at once.
func NewConflictCollector() engine.Collector { return conflictCollector{} }

func (conflictCollector) Name() string        { return "conflict" }
func (conflictCollector) Defs() []*family.Def { return []*family.Def{allocationConflict} }

func (conflictCollector) Update(s *index.Snapshot, _ time.Time, e *family.Emitter) error {
	for _, c := range classify.DoubleAllocations(s) {
		d := c.Device
		e.UniqueGauge(allocationConflict, 1, d.Key.Driver, d.Key.Pool, d.Node, d.Key.Device, d.GPUUUID,
			c.Claim.Key.Namespace, c.Claim.Key.Name, c.Pod, string(c.PodUID))
	}
	return nil
}
