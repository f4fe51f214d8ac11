package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var laneDevices = family.New("dra_lane_devices", family.TypeGauge,
	"Device capacity of the device-plugin and DRA lanes on one scale, per node, device class and state.",
	"lane", "node", "device_class", "state").
	WithDoc("Classes may overlap: do not sum across them. lane=device-plugin counts the device-plugin resources (device_class is the class serving the same extended resource, else the resource name): total is node capacity (unhealthy devices included, never less than what pods hold), allocated the requests of bound pods, free allocatable minus allocated on nodes that are neither cordoned nor NotReady; lane=dra owns total and free of DRA devices and the devices allocated to any other claim; lane=dra-extended has only state=allocated: devices allocated to claims the scheduler made for extended-resource requests.")

type laneCollector struct {
	memo *classify.Memo
}

// NewLaneCollector exports capacity per lane.
func NewLaneCollector() engine.Collector { return laneCollector{memo: classify.NewMemo(nil)} }

func (laneCollector) Name() string        { return "lane" }
func (laneCollector) Defs() []*family.Def { return []*family.Def{laneDevices} }

func (c laneCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per lane, node and class, keyed on its counts, of the
// capacity the memo keeps.
func (c laneCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, r := range c.memo.LaneCapacity(s) {
		e := rows.Row(r)
		if e == nil {
			continue
		}
		if r.Lane != index.LaneDRAExtended {
			e.Gauge(laneDevices, float64(r.Total), r.Lane, r.Node, r.DeviceClass, allocator.StateTotal)
			e.Gauge(laneDevices, float64(r.Free), r.Lane, r.Node, r.DeviceClass, allocator.StateFree)
		}
		e.Gauge(laneDevices, float64(r.Allocated), r.Lane, r.Node, r.DeviceClass, allocator.StateAllocated)
	}
}
