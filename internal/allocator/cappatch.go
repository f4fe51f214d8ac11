package allocator

// Keeping the last snapshot's capacity rows across a change of placement,
// as its selections are kept (selpatch.go): with the same devices, classes,
// taint rules and nodes, a claim allocated or released changes the counts
// of the nodes that reach its devices' pools (the model's recount) and
// of no other. ClassCapacity and LaneCapacity patch those nodes' rows of
// the last snapshot's, instead of counting every device of every class
// again (at 100k GPUs, most of a scrape after a change of placement).

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// capacityRows are a snapshot's rows of one capacity family, computed once.
// rows is set once computed: the next model reads it without waiting.
type capacityRows struct {
	once sync.Once
	rows atomic.Pointer[[]Capacity]
}

func (c *capacityRows) get(compute func() []Capacity) []Capacity {
	c.once.Do(func() {
		rows := compute()
		c.rows.Store(&rows)
	})
	return *c.rows.Load()
}

// keepCapacity lets m patch prev's capacity rows, those prev computed (the
// scrape before this change asked for them), over the nodes in m.recount.
// Called by keepSelections, under the same conditions.
func (m *Model) keepCapacity(prev *Model) {
	m.prevClassCap, m.prevLaneCap = prev.classCap.rows.Load(), prev.laneCap.rows.Load()
	m.byNode.Store(prev.byNode.Load())
}

// classNodeDevices returns each class's devices by node: built once for a
// world of devices, then handed from snapshot to snapshot with the
// selections.
func (m *Model) classNodeDevices() map[string]map[string][]*index.Device {
	if byNode := m.byNode.Load(); byNode != nil {
		return *byNode
	}
	classes := make(map[string]map[string][]*index.Device, len(m.s.Classes))
	for _, c := range m.s.Classes {
		byNode := map[string][]*index.Device{}
		for _, d := range m.raw.ClassDevices(c.Name) {
			byNode[d.Node] = append(byNode[d.Node], d)
		}
		classes[c.Name] = byNode
	}
	m.byNode.CompareAndSwap(nil, &classes)
	return *m.byNode.Load()
}

// patchClassCapacity is prev's rows with the allocated and free counts of
// the recounted nodes counted again; the rows themselves (which class has
// devices on which node, and how many) are the same.
func (m *Model) patchClassCapacity(prev []Capacity) []Capacity {
	out := slices.Clone(prev)
	byNode := m.classNodeDevices()
	for i := range out {
		r := &out[i]
		if r.Total == 0 || !m.recount[r.Node] {
			continue
		}
		r.Allocated = 0
		for _, d := range byNode[r.DeviceClass][r.Node] {
			if m.s.InUse(d.Key) {
				r.Allocated++
			}
		}
		r.Free = m.Select(r.DeviceClass, nil, Demand{Least: true}).freeAt(r.Node)
	}
	return out
}

// patchLaneCapacity is prev's dra and dra-extended rows, those of the
// recounted nodes counted again (a node's dra-extended row comes and goes
// with its extended claims), and the device-plugin lane counted again (it
// reads the pods' requests, which a change of placement changes).
func (m *Model) patchLaneCapacity(prev []Capacity) []Capacity {
	kept := make([]Capacity, 0, len(prev))
	for _, r := range prev {
		if r.Lane != index.LaneDevicePlugin && !m.recount[r.Node] {
			kept = append(kept, r)
		}
	}
	rows := laneRows{}
	byNode := m.classNodeDevices()
	for _, c := range m.s.Classes {
		for node := range m.recount {
			m.draRows(rows, c.Name, byNode[c.Name][node])
		}
	}
	m.devicePluginRows(rows)
	return mergeCapacity(kept, rows.sorted())
}

// mergeCapacity merges two lists of rows in sortCapacity's order.
func mergeCapacity(a, b []Capacity) []Capacity {
	out := make([]Capacity, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if compareCapacity(a[0], b[0]) <= 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

func compareCapacity(a, b Capacity) int {
	return cmp.Or(strings.Compare(a.Lane, b.Lane), strings.Compare(a.DeviceClass, b.DeviceClass), strings.Compare(a.Node, b.Node))
}
