package index

import (
	"cmp"
	"slices"
	"strings"
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
// "no devices for this class" is a value, not an absent series.
func (s *Snapshot) ClassCapacity() []Capacity {
	var out []Capacity
	for _, c := range s.Classes {
		byNode := map[string]*Capacity{}
		sel := s.Select(c.Name, nil, Demand{Least: true})
		for _, d := range s.classDevices[c.Name] {
			row := byNode[d.Node]
			if row == nil {
				row = &Capacity{DeviceClass: c.Name, Node: d.Node, Free: sel.freeAt(d.Node)}
				byNode[d.Node] = row
			}
			row.Total++
			if s.InUse(d.Key) {
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
// one exists, else the resource name itself.
func (s *Snapshot) LaneCapacity() []Capacity {
	rows := map[Capacity]*Capacity{}
	row := func(lane, class, node string) *Capacity {
		k := Capacity{Lane: lane, DeviceClass: class, Node: node}
		r := rows[k]
		if r == nil {
			r = &Capacity{Lane: lane, DeviceClass: class, Node: node}
			rows[k] = r
		}
		return r
	}
	for _, c := range s.Classes {
		sel := s.Select(c.Name, nil, Demand{Least: true})
		for _, d := range s.classDevices[c.Name] {
			dra := row(LaneDRA, c.Name, d.Node)
			if dra.Total == 0 {
				dra.Free = sel.freeAt(d.Node)
			}
			dra.Total++
			claims := s.AllocatedTo(d.Key)
			switch {
			case len(claims) > 0 && slices.ContainsFunc(claims, func(cl *Claim) bool { return !cl.Extended }):
				dra.Allocated++
			case len(claims) > 0:
				row(LaneDRAExtended, c.Name, d.Node).Allocated++
			}
		}
	}
	used := s.devicePluginUsed()
	for _, n := range s.Nodes {
		for _, name := range s.devicePlugin {
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
			if c := s.ClassForExtendedResource(name); c != nil {
				class = c.Name
			}
			r := row(LaneDevicePlugin, class, n.Name)
			r.Total += int(total)
			r.Allocated += int(alloc)
			if n.Unusable == "" {
				r.Free += int(max(n.Allocatable[name]-alloc, 0))
			}
		}
	}
	out := make([]Capacity, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sortCapacity(out)
	return out
}

func sortCapacity(rows []Capacity) {
	// Field by field (joining the fields per comparison allocated two
	// strings each time: 350k of them for 12k nodes).
	slices.SortFunc(rows, func(a, b Capacity) int {
		return cmp.Or(strings.Compare(a.Lane, b.Lane), strings.Compare(a.DeviceClass, b.DeviceClass), strings.Compare(a.Node, b.Node))
	})
}

type nodeResource struct{ node, resource string }

// devicePluginUsed sums the device-plugin requests of bound, unfinished
// pods per node and resource (computed once per snapshot). A pod that also
// has DRA claims still takes its device-plugin GPUs; a pod whose extended
// resources DRA serves (extendedResourceClaimStatus) takes none.
func (s *Snapshot) devicePluginUsed() map[nodeResource]int64 {
	s.dpOnce.Do(func() {
		s.dpUsed = map[nodeResource]int64{}
		for _, p := range s.Pods {
			if p.Obj.Spec.NodeName == "" || p.Terminal() || p.Obj.Status.ExtendedResourceClaimStatus != nil {
				continue
			}
			for name, v := range p.ExtendedRequests {
				if s.IsDevicePluginResource(name) {
					s.dpUsed[nodeResource{p.Obj.Spec.NodeName, name}] += v
				}
			}
		}
	})
	return s.dpUsed
}

// DevicePluginFree returns how many units of a device-plugin resource are
// free across all nodes.
func (s *Snapshot) DevicePluginFree(name string) int64 {
	used := s.devicePluginUsed()
	var free int64
	for _, n := range s.Nodes {
		if total := n.Allocatable[name]; total > 0 && n.Unusable == "" {
			free += max(total-used[nodeResource{n.Name, name}], 0)
		}
	}
	return free
}

// DevicePluginFreeOn returns how many units of a device-plugin resource are
// free on one node.
func (s *Snapshot) DevicePluginFreeOn(node, name string) int64 {
	n := s.nodesByName[node]
	if n == nil || n.Unusable != "" {
		return 0
	}
	return max(n.Allocatable[name]-s.devicePluginUsed()[nodeResource{node, name}], 0)
}
