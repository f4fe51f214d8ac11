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

type conflictCollector struct {
	memo *classify.Memo
}

// NewConflictCollector exports devices allocated to two claims at once.
func NewConflictCollector() engine.Collector { return conflictCollector{memo: classify.NewMemo(nil)} }

func (conflictCollector) Name() string        { return "conflict" }
func (conflictCollector) Defs() []*family.Def { return []*family.Def{allocationConflict} }

func (c conflictCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// conflictRow is a conflict's series: the device, the claim and the pod
// (a repeat is one series).
type conflictRow struct {
	device      *index.Device
	claim       index.Key
	pod, podUID string
}

// EachRow: a row per conflict's series, of the double allocations the
// memo keeps.
func (c conflictCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, x := range c.memo.DoubleAllocations(s) {
		k := conflictRow{x.Device, x.Claim.Key, x.Pod, string(x.PodUID)}
		if e := rows.Row(k); e != nil {
			d := x.Device
			e.Gauge(allocationConflict, 1, d.Key.Driver, d.Key.Pool, d.Node, d.Key.Device, d.GPUUUID,
				k.claim.Namespace, k.claim.Name, k.pod, k.podUID)
		}
	}
}
