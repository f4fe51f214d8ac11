package allocator

import (
	"slices"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Device states in capacity figures. A device that is neither allocated nor
// free is unavailable: tainted, its pool incomplete or invalid, or a sibling
// partition uses its shared counters. A shareable device in use is
// allocated, and also free while a new share of its capacity fits, so
// allocated plus free may pass total. Free partitions of one counter set
// count as many as could be allocated together.
const (
	StateTotal     = "total"
	StateAllocated = "allocated"
	StateFree      = "free"
)

// Capacity counts devices of one class (or one device-plugin resource) on
// one node.
type Capacity struct {
	Lane        string
	DeviceClass string
	Node        string
	Total       int
	Allocated   int
	Free        int
}

// ClassCapacity counts the devices each class selects, per node. A class
// that selects no device reports one row with node "" and zeros, so that
// "no devices for this class" is a value, not an absent series. Computed
// once per snapshot; a snapshot taken after a change of placement patches
// the last one's rows (cappatch.go). The rows must not be modified.
func (m *Model) ClassCapacity() []Capacity {
	return m.classCap.get(func() []Capacity {
		if m.prevClassCap != nil {
			return m.patchClassCapacity(*m.prevClassCap)
		}
		return m.classCapacity()
	})
}

func (m *Model) classCapacity() []Capacity {
	var out []Capacity
	for _, c := range m.s.Classes {
		byNode := map[string]*Capacity{}
		sel := m.Select(c.Name, nil, Demand{Least: true})
		for _, d := range m.raw.ClassDevices(c.Name) {
			row := byNode[d.Node]
			if row == nil {
				row = &Capacity{DeviceClass: c.Name, Node: d.Node, Free: sel.freeAt(d.Node)}
				byNode[d.Node] = row
			}
			row.Total++
			if m.s.InUse(d.Key) {
				row.Allocated++
			}
		}
		if len(byNode) == 0 {
			out = append(out, Capacity{DeviceClass: c.Name})
			continue
		}
		for _, row := range byNode {
			out = append(out, *row)
		}
	}
	sortCapacity(out)
	return out
}

// LaneCapacity puts both lanes on one scale. The dra lane owns the total
// and free counts of DRA devices; their allocations are split between the
// dra lane (claims of pods) and the dra-extended lane (claims the scheduler
// made for extended-resource requests). The device-plugin lane counts node
// allocatable and pod requests of the device-plugin resources; its
// device_class is the class serving the same extended resource name when
// one exists, else the resource name itself. Computed once per snapshot,
// patched as ClassCapacity is; the rows must not be modified.
func (m *Model) LaneCapacity() []Capacity {
	return m.laneCap.get(func() []Capacity {
		if m.prevLaneCap != nil {
			return m.patchLaneCapacity(*m.prevLaneCap)
		}
		rows := laneRows{}
		for _, c := range m.s.Classes {
			m.draRows(rows, c.Name, m.raw.ClassDevices(c.Name))
		}
		m.devicePluginRows(rows)
		return rows.sorted()
	})
}

// laneRows are lane capacity rows being counted, by lane, class and node.
type laneRows map[Capacity]*Capacity

func (rows laneRows) row(lane, class, node string) *Capacity {
	k := Capacity{Lane: lane, DeviceClass: class, Node: node}
	r := rows[k]
	if r == nil {
		r = &Capacity{Lane: lane, DeviceClass: class, Node: node}
		rows[k] = r
	}
	return r
}

func (rows laneRows) sorted() []Capacity {
	out := make([]Capacity, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sortCapacity(out)
	return out
}

// draRows counts a class's devices (all of them, or those of some nodes)
// into the dra and dra-extended lanes.
func (m *Model) draRows(rows laneRows, class string, devices []*index.Device) {
	if len(devices) == 0 {
		return
	}
	sel := m.Select(class, nil, Demand{Least: true})
	for _, d := range devices {
		dra := rows.row(index.LaneDRA, class, d.Node)
		if dra.Total == 0 {
			dra.Free = sel.freeAt(d.Node)
		}
		dra.Total++
		claims := m.s.AllocatedTo(d.Key)
		switch {
		case len(claims) > 0 && slices.ContainsFunc(claims, func(cl *index.Claim) bool { return !cl.Extended }):
			dra.Allocated++
		case len(claims) > 0:
			rows.row(index.LaneDRAExtended, class, d.Node).Allocated++
		}
	}
}

// devicePluginRows counts the device-plugin lane.
func (m *Model) devicePluginRows(rows laneRows) {
	used := m.devicePluginUsed()
	for _, n := range m.s.Nodes {
		for _, name := range m.raw.DevicePluginResources() {
			// The device plugin reports every device in capacity and only
			// the healthy ones in allocatable; pods keep the GPUs they hold
			// when theirs turn unhealthy or the plugin goes away, so those
			// count in the total too and allocated never exceeds it. Only
			// healthy, unheld devices are free.
			alloc := used[nodeResource{n.Name, name}]
			total := max(n.Capacity[name], n.Allocatable[name], alloc)
			if total == 0 {
				continue
			}
			class := name
			if c := m.s.ClassForExtendedResource(name); c != nil {
				class = c.Name
			}
			r := rows.row(index.LaneDevicePlugin, class, n.Name)
			r.Total += int(total)
			r.Allocated += int(alloc)
			if n.Unusable == "" {
				r.Free += int(max(n.Allocatable[name]-alloc, 0))
			}
		}
	}
}

func sortCapacity(rows []Capacity) {
	// Field by field (joining the fields per comparison allocated two
	// strings each time: 350k of them for 12k nodes).
	slices.SortFunc(rows, compareCapacity)
}

type nodeResource struct{ node, resource string }

// devicePluginUsed sums the device-plugin requests of bound, unfinished
// pods per node and resource (computed once per snapshot). A pod that also
// has DRA claims still takes its device-plugin GPUs; a pod whose extended
// resources DRA serves (extendedResourceClaimStatus) takes none.
func (m *Model) devicePluginUsed() map[nodeResource]int64 {
	m.dpOnce.Do(func() {
		m.dpUsed = map[nodeResource]int64{}
		for _, p := range m.s.Pods {
			if p.Obj.Spec.NodeName == "" || p.Terminal() || p.Obj.Status.ExtendedResourceClaimStatus != nil {
				continue
			}
			for name, v := range p.ExtendedRequests {
				if m.s.IsDevicePluginResource(name) {
					m.dpUsed[nodeResource{p.Obj.Spec.NodeName, name}] += v
				}
			}
		}
	})
	return m.dpUsed
}

// DevicePluginFree returns how many units of a device-plugin resource are
// free across all nodes.
func (m *Model) DevicePluginFree(name string) int64 {
	used := m.devicePluginUsed()
	var free int64
	for _, n := range m.s.Nodes {
		if total := n.Allocatable[name]; total > 0 && n.Unusable == "" {
			free += max(total-used[nodeResource{n.Name, name}], 0)
		}
	}
	return free
}

// DevicePluginFreeOn returns how many units of a device-plugin resource are
// free on one node.
func (m *Model) DevicePluginFreeOn(node, name string) int64 {
	n := m.raw.Node(node)
	if n == nil || n.Unusable != "" {
		return 0
	}
	return max(n.Allocatable[name]-m.devicePluginUsed()[nodeResource{node, name}], 0)
}
