package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var (
	classDevices = family.New("dra_device_class_devices", family.TypeGauge,
		"Devices a DeviceClass selects, per node and state (total, allocated, free).",
		"device_class", "node", "state").
		WithDoc("Selection is the scheduler's CEL over every published device. free is what new claims could be allocated now, as the scheduler's allocator decides: partitions drawing on one set of shared counters (KEP-4815, MIG placements) count as many as could be allocated together, so two overlapping placements count once, and a whole GPU whose counters a placement drew is not free. A shared device (allowMultipleAllocations, KEP-5075) in use is allocated and also free while a share fits, so allocated plus free may pass total. Devices neither allocated nor free are tainted, blocked by shared counters, in a pool the driver is republishing, or on a cordoned or NotReady node. A class that selects nothing reports total 0 with node \"\".")
	classSelectorErrors = family.New("dra_device_class_selector_errors", family.TypeGauge,
		"Devices on which the DeviceClass selectors failed to evaluate.",
		"device_class").
		WithDoc("A CEL compile or runtime error; such devices cannot be allocated through the class.")
	classSelectorErrorInfo = family.New("dra_device_class_selector_error_info", family.TypeGauge,
		"A device on which a DeviceClass's selectors fail to evaluate.",
		"device_class", "driver", "pool", "device", "node").
		WithDoc("One series per device and class while the class's CEL fails on the device (a runtime error, such as an attribute the device does not publish, or a compile error); node \"\" for a network-attached device. The scheduler gives up a pod's scheduling attempt when it meets the error on any node it tries (PodScheduled=False, reason SchedulerError, the CEL error as message), so pods of the class stay Pending even where another node fits; dra_pod_blocked leaves the device's node out of what could serve them (capacity_exhausted when no other node has a free device, else unallocated), and `dra-exporter explain` names the error. No series while the selectors evaluate everywhere. Always 1.")
)

type deviceClassCollector struct {
	memo *classify.Memo
}

// NewDeviceClassCollector exports capacity per DeviceClass.
func NewDeviceClassCollector() engine.Collector {
	return deviceClassCollector{memo: classify.NewMemo(nil)}
}

func (deviceClassCollector) Name() string { return "deviceclass" }
func (deviceClassCollector) Defs() []*family.Def {
	return []*family.Def{classDevices, classSelectorErrors, classSelectorErrorInfo}
}

func (c deviceClassCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// selectorError is a class whose selectors fail on a device: the row of
// its dra_device_class_selector_error_info series.
type selectorError struct {
	class  string
	device *index.Device
}

// selectorErrors is a class and the devices its selectors fail on: the row
// of its dra_device_class_selector_errors series.
type selectorErrors struct {
	class string
	n     int
}

// EachRow: a row per class and node, keyed on its counts, of the capacity
// the memo keeps; a row per class and device its selectors fail on; a row
// per class and its count of such devices.
func (c deviceClassCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, row := range c.memo.ClassCapacity(s) {
		if e := rows.Row(row); e != nil {
			e.Gauge(classDevices, float64(row.Total), row.DeviceClass, row.Node, allocator.StateTotal)
			e.Gauge(classDevices, float64(row.Allocated), row.DeviceClass, row.Node, allocator.StateAllocated)
			e.Gauge(classDevices, float64(row.Free), row.DeviceClass, row.Node, allocator.StateFree)
		}
	}
	errors := map[string]int{}
	for _, d := range s.Devices {
		for class := range d.ClassErrors {
			errors[class]++
			if e := rows.Row(selectorError{class, d}); e != nil {
				e.Gauge(classSelectorErrorInfo, 1, class, d.Key.Driver, d.Key.Pool, d.Key.Device, d.Node)
			}
		}
	}
	for _, cl := range s.Classes {
		if e := rows.Row(selectorErrors{cl.Name, errors[cl.Name]}); e != nil {
			e.Gauge(classSelectorErrors, float64(errors[cl.Name]), cl.Name)
		}
	}
}
