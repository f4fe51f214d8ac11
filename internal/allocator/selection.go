package allocator

// What one request can get from a class: the devices its selectors keep and
// how many of those a new allocation could have, per node.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// selection is the result of evaluating one set of request selectors over
// the devices of one class.
// Selection is what one request can get from a class: the devices its
// selectors keep, and what a new allocation could take from them. An
// allocation takes devices reachable from one node: the node's own devices
// and network-attached ones (slices without a node name, assumed reachable
// from every node).
type Selection struct {
	// Devices are the class devices the selectors keep.
	Devices []*index.Device
	// Free counts those new allocations could take now (see Available;
	// the request's tolerations and capacity requests apply). Partitions
	// drawing on one counter set count as many as could be allocated one
	// after another, not each on its own: two overlapping MIG placements
	// count once.
	Free int
	// FreeEach counts the kept devices available each on its own; more
	// than Free when free partitions overlap.
	FreeEach int
	// BestNode is the node from which the most free devices are reachable,
	// BestNodeFree that number; BestNode is "" when only network-attached
	// devices are reachable.
	BestNode     string
	BestNodeFree int
	// MostOnANode is the largest number of kept devices, free or not,
	// reachable from one node: a request for more can never be allocated.
	MostOnANode int
	// AllFreeNode is a node from which every kept device is free, as
	// allocationMode All needs ("" with AllFree when only network-attached
	// devices exist).
	AllFreeNode string
	AllFree     bool
	// Errors counts devices on which the selectors failed to evaluate; the
	// scheduler rejects every node from which such a device is reachable
	// (the API: "evaluation error ... allocation to abort"). ClassErrors
	// counts those on which the class's own selectors failed (the rest,
	// the request's). ErrorNodes are the nodes so rejected, sorted ("" for
	// a network-attached device: every node reaches it), and
	// FreeOnErrorNodes how many of the free kept devices are on them.
	// Nodes counts the nodes left; ErrorSample holds a few messages, each
	// naming the device, its node and the selector.
	Errors           int
	ClassErrors      int
	ErrorSample      []string
	ErrorNodes       []string
	FreeOnErrorNodes int
	Nodes            int
	// TooSmall counts devices the selectors keep whose whole capacity, or
	// request policy, cannot serve the request's capacity.requests: they
	// are left out of Devices, as if a selector excluded them.
	TooSmall int

	// What a later snapshot with the same devices, classes and nodes keeps
	// (patchSelection): the kept devices by node ("": network-attached),
	// each node's counts, the nodes an evaluation error rejects.
	onNode     map[string][]*index.Device
	counts     map[string]nodeCount
	errNodes   map[string]bool
	errNetwork bool

	holdersOnce sync.Once
	holders     []*index.Pod // pods holding kept devices
	priorities  []int32      // their priorities, sorted
	sortedOnce  sync.Once
	sorted      []*index.Pod // holders by priority, then name
}

// Holders returns the pods that hold the kept devices (through the claims
// allocated to them, or to partitions drawing on the same shared counters,
// reserved for the pods), each once, lowest priority first. It is computed
// once per selection: every pod blocked on the same request asks the same
// question.
func (sel *Selection) Holders(m *Model) []*index.Pod {
	sel.sortedOnce.Do(func() {
		sel.sorted = slices.Clone(sel.holderPods(m))
		slices.SortStableFunc(sel.sorted, func(a, b *index.Pod) int {
			if c := cmp.Compare(a.Priority(), b.Priority()); c != 0 {
				return c
			}
			return strings.Compare(a.Key.String(), b.Key.String())
		})
	})
	return sel.sorted
}

// holderPods are the holders unsorted, and their priorities sorted (what
// LowerPriorityHolders asks of every capacity-blocked pod: sorting the pods
// themselves by name was most of a scrape after a placement change).
func (sel *Selection) holderPods(m *Model) []*index.Pod {
	sel.holdersOnce.Do(func() {
		seen := map[*index.Pod]bool{}
		var held []index.DeviceKey
		for _, d := range sel.Devices {
			// Partitions on the same counters hold a device too.
			held = append(append(held, d.Key), m.CounterSiblings(d)...)
		}
		for _, k := range held {
			for _, c := range m.s.AllocatedTo(k) {
				for _, r := range c.Obj.Status.ReservedFor {
					if r.Resource != "pods" || r.APIGroup != "" {
						continue
					}
					if p := m.s.Pod(index.Key{Namespace: c.Key.Namespace, Name: r.Name}); p != nil && p.UID == r.UID && !seen[p] {
						seen[p] = true
						sel.holders = append(sel.holders, p)
						sel.priorities = append(sel.priorities, p.Priority())
					}
				}
			}
		}
		slices.Sort(sel.priorities)
	})
	return sel.holders
}

// LowerPriorityHolders returns how many holders of the kept devices have a
// priority below prio.
func (sel *Selection) LowerPriorityHolders(m *Model, prio int32) int {
	sel.holderPods(m)
	n, _ := slices.BinarySearch(sel.priorities, prio)
	return n
}

// FreeOn returns how many kept devices a new allocation on the node could
// take: the node's own and the network-attached ones.
func (sel *Selection) FreeOn(node string) int {
	if node == "" {
		return sel.freeAt("")
	}
	return sel.freeAt(node) + sel.freeAt("")
}

// freeAt is FreeOn without the network-attached devices; node "" counts
// only those.
func (sel *Selection) freeAt(node string) int { return sel.counts[node].free }

// DeviceNodes returns the nodes with local kept devices, sorted.
func (sel *Selection) DeviceNodes() []string {
	var out []string
	for node := range sel.counts {
		if node != "" {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// Select returns what a request with these selectors and demand can get
// from the class. Results are memoised per snapshot: pods from one
// template share their selectors, and a scrape classifies them all.
func (m *Model) Select(class string, selectors []resourceapi.DeviceSelector, dm Demand) *Selection {
	var b strings.Builder
	b.WriteString(class)
	for _, sel := range selectors {
		b.WriteByte(0)
		if sel.CEL != nil {
			b.WriteString(sel.CEL.Expression)
		}
	}
	for _, t := range dm.Tolerations {
		fmt.Fprintf(&b, "\x01%s=%s:%s:%s", t.Key, t.Operator, t.Value, t.Effect)
	}
	if dm.Capacity != nil {
		for _, name := range slices.Sorted(maps.Keys(dm.Capacity.Requests)) {
			q := dm.Capacity.Requests[name]
			fmt.Fprintf(&b, "\x02%s=%s", name, q.String())
		}
	}
	if dm.Least {
		b.WriteString("\x03")
	}
	key := b.String()
	m.mu.Lock()
	res, ok := m.selections[key]
	m.mu.Unlock()
	if ok {
		return res
	}
	if prev := m.prevSelections[key]; prev != nil {
		res = m.patchSelection(prev, dm)
	} else {
		res = m.selectDevices(class, selectors, dm)
	}
	m.mu.Lock()
	m.selections[key] = res
	m.mu.Unlock()
	return res
}

func (m *Model) selectDevices(class string, selectors []resourceapi.DeviceSelector, dm Demand) *Selection {
	res := m.matchDevices(class, selectors, dm)
	res.counts = make(map[string]nodeCount, len(res.onNode))
	for node, devices := range res.onNode {
		res.counts[node] = m.countNode(devices, dm)
	}
	res.tally()
	return res
}

// matchDevices is the part of a selection that depends on the devices, the
// class and the request only: the kept devices by node, the evaluation
// errors and the nodes they reject, the devices too small for the request.
func (m *Model) matchDevices(class string, selectors []resourceapi.DeviceSelector, dm Demand) *Selection {
	res := &Selection{onNode: map[string][]*index.Device{}}
	// The class's own selectors failing on a device rejects its nodes too.
	for _, d := range m.raw.ClassErrors(class) {
		res.Errors++
		res.ClassErrors++
		res.ErrorSample = append(res.ErrorSample, errorSample(d, "DeviceClass "+class, d.ClassErrors[class]))
		res.rejectNode(d.Node)
	}
	var kept *selectorMatches
	if m.matches != nil && len(selectors) > 0 {
		kept = m.matches.of(selectorsKey(selectors))
	}
	for _, d := range m.raw.ClassDevices(class) {
		if len(selectors) > 0 {
			var match bool
			var err error
			if kept != nil {
				match, err = kept.match(m.matcher, selectors, d)
			} else {
				match, err = m.matcher.Match(selectors, celmatch.Device{Driver: d.Key.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
			}
			if err != nil {
				res.Errors++
				res.ErrorSample = append(res.ErrorSample, errorSample(d, "request", err.Error()))
				res.rejectNode(d.Node)
				continue
			}
			if !match {
				continue
			}
		}
		if !couldEverFit(d, dm) {
			res.TooSmall++
			continue
		}
		res.Devices = append(res.Devices, d)
		res.onNode[d.Node] = append(res.onNode[d.Node], d)
	}
	if len(res.ErrorSample) > 3 {
		slices.Sort(res.ErrorSample) // a stable sample whatever the map order
		res.ErrorSample = res.ErrorSample[:3]
	}
	for node := range res.errNodes {
		res.ErrorNodes = append(res.ErrorNodes, node)
	}
	slices.Sort(res.ErrorNodes)
	if res.errNetwork {
		res.ErrorNodes = append([]string{""}, res.ErrorNodes...)
	}
	return res
}

// rejectNode notes that a device on node ("": network-attached, reached
// from every node) failed to evaluate.
func (sel *Selection) rejectNode(node string) {
	if node == "" {
		sel.errNetwork = true
		return
	}
	if sel.errNodes == nil {
		sel.errNodes = map[string]bool{}
	}
	sel.errNodes[node] = true
}

// nodeCount is what a selection keeps on one node ("": the network-attached
// devices): kept devices, how many a sequence of new allocations could take
// (partitions of one counter set count jointly), and how many are free each
// on its own.
type nodeCount struct{ kept, free, freeEach int }

// countNode counts the kept devices of one node against this snapshot's
// allocations, counters, taints and nodes.
func (m *Model) countNode(devices []*index.Device, dm Demand) nodeCount {
	c := nodeCount{kept: len(devices)}
	var partitions []*index.Device
	for _, d := range devices {
		if !m.availableFor(d, dm) {
			continue
		}
		c.freeEach++
		if len(d.Counters) > 0 && !m.s.InUse(d.Key) {
			partitions = append(partitions, d)
			continue
		}
		c.free++
	}
	// Partitions of one counter set cannot all be given out: count how
	// many a sequence of new claims could take.
	c.free += m.jointCount(partitions)
	return c
}

// tally sums the node counts into the selection's figures.
func (res *Selection) tally() {
	network := res.counts[""]
	for _, c := range res.counts {
		res.Free += c.free
		res.FreeEach += c.freeEach
	}
	for node := range res.errNodes {
		res.FreeOnErrorNodes += res.freeAt(node)
	}
	if res.errNetwork {
		res.FreeOnErrorNodes = res.Free
		return // every node reaches a device the selectors fail on
	}
	// Nodes that only reach network-attached devices (no local device of
	// the class) count as one candidate, "".
	consider := func(node string, c nodeCount) {
		res.Nodes++
		kept, free := c.kept+network.kept, c.free+network.free
		if free > res.BestNodeFree || (free == res.BestNodeFree && (res.Nodes == 1 || node < res.BestNode)) {
			res.BestNode, res.BestNodeFree = node, free
		}
		res.MostOnANode = max(res.MostOnANode, kept)
		if kept > 0 && kept == free && (!res.AllFree || node < res.AllFreeNode) {
			res.AllFree, res.AllFreeNode = true, node
		}
	}
	nodes := 0
	for node, c := range res.counts {
		if node == "" || res.errNodes[node] {
			continue
		}
		nodes++
		consider(node, c)
	}
	if nodes == 0 && network.kept > 0 {
		consider("", nodeCount{})
	}
}

// errorSample is one line of Selection.ErrorSample: the device, where it
// is, whose selectors failed and the CEL error.
func errorSample(d *index.Device, whose, msg string) string {
	where := "node " + d.Node
	if d.Node == "" {
		where = "a network-attached pool"
	}
	return fmt.Sprintf("device %s on %s: %s %s", d.Key, where, whose, msg)
}

// jointCount returns how many of the devices (each available on its own,
// each consuming shared counters) could be allocated one after another:
// the least-consuming first, as a first fit over MIG placements takes the
// small profiles first. It is a lower bound of the best packing, exact for
// a single request (one device) and for placements of one size.
func (m *Model) jointCount(devices []*index.Device) int {
	if len(devices) <= 1 {
		return len(devices)
	}
	slices.SortFunc(devices, func(a, b *index.Device) int {
		if c := cmp.Compare(counterWeight(a), counterWeight(b)); c != 0 {
			return c
		}
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	taken := map[counterSetKey]map[string]resource.Quantity{}
	n := 0
	for _, d := range devices {
		if m.countersCover(d, taken) {
			take(d, taken)
			n++
		}
	}
	return n
}

func counterWeight(d *index.Device) float64 {
	var w float64
	for _, cc := range d.Counters {
		for _, c := range cc.Counters {
			w += c.Value.AsApproximateFloat64()
		}
	}
	return w
}

// couldEverFit reports whether the device could serve the request's
// capacity.requests were nothing allocated: it has each capacity asked
// for, and the request, rounded up by its policy, is allowed and no larger
// than the whole capacity.
func couldEverFit(d *index.Device, dm Demand) bool {
	if dm.Capacity == nil || len(dm.Capacity.Requests) == 0 {
		return true
	}
	return fitsCapacity(d, Demand{Capacity: dm.Capacity}, nil)
}
