package index

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
)

// Snapshot is a consistent, immutable view of the index at one moment. The
// objects it holds must not be modified.
type Snapshot struct {
	Classes []*Class // sorted by name
	Devices []*Device
	Claims  []*Claim
	Pods    []*Pod
	Nodes   []*Node

	events          []*Event
	poolCounters    map[PoolKey]map[string]map[string]resource.Quantity
	unreservedSince map[types.UID]time.Time
	devicePlugin    []string
	matcher         *celmatch.Matcher

	classByName   map[string]*Class
	deviceByKey   map[DeviceKey]*Device
	claimsByKey   map[Key]*Claim
	claimsByOwner map[types.UID][]*Claim
	claimsByGroup map[Key][]*Claim // by namespace and PodGroup name
	podsByKey     map[Key]*Pod
	nodesByName   map[string]*Node
	podEvents     map[Key][]*Event
	classDevices  map[string][]*Device
	classErrors   map[string][]*Device // devices a class's selectors failed on
	usage         map[DeviceKey]*deviceUsage
	remaining     map[PoolKey]map[string]map[string]resource.Quantity

	memoMu       sync.Mutex
	selectorMemo map[string]*Selection

	dpOnce sync.Once
	dpUsed map[nodeResource]int64
}

type deviceUsage struct {
	claims []*Claim
}

// Snapshot returns a consistent view. It holds the index lock only while it
// copies pointers; the joins are built afterwards.
func (ix *Index) Snapshot() *Snapshot {
	ix.mu.RLock()
	s := &Snapshot{
		Classes:         slices.Collect(maps.Values(ix.classes)),
		Devices:         slices.Collect(maps.Values(ix.devices)),
		Claims:          slices.Collect(maps.Values(ix.claims)),
		Pods:            slices.Collect(maps.Values(ix.pods)),
		Nodes:           slices.Collect(maps.Values(ix.nodes)),
		events:          slices.Collect(maps.Values(ix.events)),
		poolCounters:    make(map[PoolKey]map[string]map[string]resource.Quantity),
		unreservedSince: maps.Clone(ix.unreservedSince),
		devicePlugin:    ix.devicePlugin,
		matcher:         ix.matcher,
	}
	for pk, p := range ix.pools {
		if len(p.counters) > 0 {
			s.poolCounters[pk] = p.counters
		}
	}
	ix.mu.RUnlock()
	s.build()
	return s
}

func (s *Snapshot) build() {
	slices.SortFunc(s.Classes, func(a, b *Class) int { return strings.Compare(a.Name, b.Name) })
	s.classByName = make(map[string]*Class, len(s.Classes))
	for _, c := range s.Classes {
		s.classByName[c.Name] = c
	}
	s.deviceByKey = make(map[DeviceKey]*Device, len(s.Devices))
	s.classDevices = make(map[string][]*Device, len(s.Classes))
	for _, d := range s.Devices {
		s.deviceByKey[d.Key] = d
		for _, c := range d.Classes {
			s.classDevices[c] = append(s.classDevices[c], d)
		}
		for c := range d.ClassErrors {
			if s.classErrors == nil {
				s.classErrors = map[string][]*Device{}
			}
			s.classErrors[c] = append(s.classErrors[c], d)
		}
	}
	s.claimsByKey = make(map[Key]*Claim, len(s.Claims))
	s.claimsByOwner = map[types.UID][]*Claim{}
	s.usage = map[DeviceKey]*deviceUsage{}
	for _, c := range s.Claims {
		s.claimsByKey[c.Key] = c
		if c.OwnerPod != nil {
			s.claimsByOwner[c.OwnerPod.UID] = append(s.claimsByOwner[c.OwnerPod.UID], c)
		}
		if c.OwnerGroup != nil {
			g := Key{c.Key.Namespace, c.OwnerGroup.Name}
			if s.claimsByGroup == nil {
				s.claimsByGroup = map[Key][]*Claim{}
			}
			s.claimsByGroup[g] = append(s.claimsByGroup[g], c)
		}
		for _, r := range c.Results {
			if r.AdminAccess {
				continue
			}
			u := s.usage[r.Device]
			if u == nil {
				u = &deviceUsage{}
				s.usage[r.Device] = u
			}
			u.claims = append(u.claims, c)
		}
	}
	s.podsByKey = make(map[Key]*Pod, len(s.Pods))
	for _, p := range s.Pods {
		s.podsByKey[p.Key] = p
	}
	s.nodesByName = make(map[string]*Node, len(s.Nodes))
	for _, n := range s.Nodes {
		s.nodesByName[n.Name] = n
	}
	s.podEvents = map[Key][]*Event{}
	for _, e := range s.events {
		s.podEvents[e.Pod] = append(s.podEvents[e.Pod], e)
	}
	s.computeRemainingCounters()
	s.selectorMemo = map[string]*Selection{}
}

// computeRemainingCounters subtracts what allocated devices consume from
// their pool's shared counters (partitionable devices such as MIG).
func (s *Snapshot) computeRemainingCounters() {
	s.remaining = make(map[PoolKey]map[string]map[string]resource.Quantity, len(s.poolCounters))
	for pk, sets := range s.poolCounters {
		cp := make(map[string]map[string]resource.Quantity, len(sets))
		for name, counters := range sets {
			cp[name] = maps.Clone(counters)
		}
		s.remaining[pk] = cp
	}
	for key := range s.usage {
		d := s.deviceByKey[key]
		if d == nil || len(d.Counters) == 0 {
			continue
		}
		sets := s.remaining[PoolKey{key.Driver, key.Pool}]
		for _, cc := range d.Counters {
			for name, c := range cc.Counters {
				if set := sets[cc.CounterSet]; set != nil {
					q := set[name]
					q.Sub(c.Value)
					set[name] = q
				}
			}
		}
	}
}

// Class returns a class by name.
func (s *Snapshot) Class(name string) *Class { return s.classByName[name] }

// Device returns a device by key.
func (s *Snapshot) Device(k DeviceKey) *Device { return s.deviceByKey[k] }

// Claim returns a claim by key.
func (s *Snapshot) Claim(k Key) *Claim { return s.claimsByKey[k] }

// Pod returns a pod by key.
func (s *Snapshot) Pod(k Key) *Pod { return s.podsByKey[k] }

// Node returns a node by name.
func (s *Snapshot) Node(name string) *Node { return s.nodesByName[name] }

// ClassDevices returns the devices a class selects.
func (s *Snapshot) ClassDevices(class string) []*Device { return s.classDevices[class] }

// AllocatedTo returns the claims a device is allocated to (admin-access
// allocations excluded).
func (s *Snapshot) AllocatedTo(k DeviceKey) []*Claim {
	if u := s.usage[k]; u != nil {
		return u.claims
	}
	return nil
}

// InUse reports whether a device is allocated to at least one claim.
func (s *Snapshot) InUse(k DeviceKey) bool { return s.usage[k] != nil }

// Available reports whether a new claim could be allocated the device: it
// is not taken (or may be shared), no NoSchedule/NoExecute taint is on it,
// its pool's shared counters still cover what it consumes, and its node
// (when the snapshot has it) is neither cordoned nor NotReady.
func (s *Snapshot) Available(d *Device) bool { return s.availableWith(d, nil) }

// availableWith is Available for a request with these tolerations: a taint
// it tolerates does not keep it from the device.
func (s *Snapshot) availableWith(d *Device, tolerations []resourceapi.DeviceToleration) bool {
	if s.InUse(d.Key) && !d.Shareable {
		return false
	}
	if tainted(d, tolerations) {
		return false
	}
	if d.Node != "" {
		n := s.nodesByName[d.Node]
		if n != nil && n.Unusable != "" {
			return false // no new pod lands there to use it
		}
		if n == nil && len(s.nodesByName) > 0 {
			// The Node is gone (scale-down) and its slice not yet
			// collected: the scheduler has no node to place a pod on. A
			// file without any Node object says nothing, though.
			return false
		}
	}
	if len(d.Counters) == 0 {
		return true
	}
	sets := s.remaining[PoolKey{d.Key.Driver, d.Key.Pool}]
	for _, cc := range d.Counters {
		set := sets[cc.CounterSet]
		if set == nil {
			return false // consumes a counter set nobody published
		}
		for name, c := range cc.Counters {
			left, ok := set[name]
			if !ok || left.Cmp(c.Value) < 0 {
				return false
			}
		}
	}
	return true
}

// tainted reports whether a taint keeps a request with these tolerations
// from the device. Like the scheduler, only the NoSchedule and NoExecute
// effects count; None and unknown effects do not.
func tainted(d *Device, tolerations []resourceapi.DeviceToleration) bool {
	for _, t := range d.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(tol, t) }) {
			return true
		}
	}
	return false
}

// ResolvePodClaims returns the claims a pod depends on (see PodClaim).
func (s *Snapshot) ResolvePodClaims(p *Pod) []PodClaim { return resolvePodClaims(s, p) }

func (s *Snapshot) claimByKey(k Key) *Claim { return s.claimsByKey[k] }

func (s *Snapshot) claimsOwnedBy(uid types.UID) []*Claim { return s.claimsByOwner[uid] }

func (s *Snapshot) claimsOfGroup(g Key) []*Claim { return s.claimsByGroup[g] }

// OwnedClaims returns the claims a pod controls.
func (s *Snapshot) OwnedClaims(uid types.UID) []*Claim { return s.claimsByOwner[uid] }

// PodLane returns the lane serving the pod's GPUs, "" when none.
func (s *Snapshot) PodLane(p *Pod) string {
	return podLane(p, s.IsDevicePluginResource, func(name string) bool { return s.ClassForExtendedResource(name) != nil })
}

// IsDevicePluginResource reports whether the resource name belongs to the
// device-plugin lane.
func (s *Snapshot) IsDevicePluginResource(name string) bool {
	return slices.Contains(s.devicePlugin, name)
}

// DevicePluginResources returns the device-plugin lane's resource names.
func (s *Snapshot) DevicePluginResources() []string { return s.devicePlugin }

// ClassForExtendedResource returns the class serving an extended resource.
func (s *Snapshot) ClassForExtendedResource(name string) *Class {
	return classForExtendedResource(s.classByName, name)
}

// PodEvents returns the events about a pod, newest first. Events recorded
// for another pod of the same name (another UID) are left out.
func (s *Snapshot) PodEvents(p *Pod) []*Event {
	var out []*Event
	for _, e := range s.podEvents[p.Key] {
		if e.PodUID == "" || e.PodUID == p.UID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *Event) int {
		if c := b.Timestamp.Compare(a.Timestamp); c != 0 {
			return c
		}
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	return out
}

// UnreservedSince returns since when an allocated claim has reserved
// nobody: when the exporter saw it happen, else (a file, or a restart) the
// allocation time, else the claim's creation.
func (s *Snapshot) UnreservedSince(c *Claim) time.Time {
	if t, ok := s.unreservedSince[c.UID]; ok {
		return t
	}
	if !c.AllocatedAt.IsZero() {
		return c.AllocatedAt
	}
	return c.Obj.CreationTimestamp.Time
}

// selection is the result of evaluating one set of request selectors over
// the devices of one class.
// Selection is what one request can get from a class: the devices its
// selectors keep, and what a new allocation could take from them. An
// allocation takes devices reachable from one node: the node's own devices
// and network-attached ones (slices without a node name, assumed reachable
// from every node).
type Selection struct {
	// Devices are the class devices the selectors keep.
	Devices []*Device
	// Free counts those a new allocation could take (see Available; the
	// request's tolerations apply to device taints).
	Free int
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
	// (the API: "evaluation error ... allocation to abort"). Nodes counts
	// the nodes left after that; ErrorSample holds a few messages.
	Errors      int
	ErrorSample []string
	Nodes       int

	freeOn      map[string]int
	networkFree int
}

// FreeOn returns how many kept devices a new allocation on the node could
// take: the node's own and the network-attached ones.
func (sel *Selection) FreeOn(node string) int { return sel.freeOn[node] + sel.networkFree }

// DeviceNodes returns the nodes with local kept devices, sorted.
func (sel *Selection) DeviceNodes() []string { return slices.Sorted(maps.Keys(sel.freeOn)) }

// Select returns what a request with these selectors and tolerations can
// get from the class. Results are memoised per snapshot: pods from one
// template share their selectors, and a scrape classifies them all.
func (s *Snapshot) Select(class string, selectors []resourceapi.DeviceSelector, tolerations []resourceapi.DeviceToleration) *Selection {
	var b strings.Builder
	b.WriteString(class)
	for _, sel := range selectors {
		b.WriteByte(0)
		if sel.CEL != nil {
			b.WriteString(sel.CEL.Expression)
		}
	}
	for _, t := range tolerations {
		fmt.Fprintf(&b, "\x01%s=%s:%s:%s", t.Key, t.Operator, t.Value, t.Effect)
	}
	key := b.String()
	s.memoMu.Lock()
	res, ok := s.selectorMemo[key]
	s.memoMu.Unlock()
	if ok {
		return res
	}
	res = s.selectDevices(class, selectors, tolerations)
	s.memoMu.Lock()
	s.selectorMemo[key] = res
	s.memoMu.Unlock()
	return res
}

type nodeTally struct{ kept, free int }

func (s *Snapshot) selectDevices(class string, selectors []resourceapi.DeviceSelector, tolerations []resourceapi.DeviceToleration) *Selection {
	res := &Selection{}
	byNode := map[string]*nodeTally{}
	var network nodeTally
	errNodes := map[string]bool{}
	errNetwork := false
	// The class's own selectors failing on a device rejects its nodes too.
	for _, d := range s.classErrors[class] {
		res.Errors++
		res.ErrorSample = append(res.ErrorSample, d.Key.String()+": class "+class+": "+d.ClassErrors[class])
		if d.Node == "" {
			errNetwork = true
		} else {
			errNodes[d.Node] = true
		}
	}
	for _, d := range s.classDevices[class] {
		if len(selectors) > 0 {
			match, err := s.matcher.Match(selectors, celmatch.Device{Driver: d.Key.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
			if err != nil {
				res.Errors++
				res.ErrorSample = append(res.ErrorSample, d.Key.String()+": "+err.Error())
				if d.Node == "" {
					errNetwork = true
				} else {
					errNodes[d.Node] = true
				}
				continue
			}
			if !match {
				continue
			}
		}
		res.Devices = append(res.Devices, d)
		t := &network
		if d.Node != "" {
			t = byNode[d.Node]
			if t == nil {
				t = &nodeTally{}
				byNode[d.Node] = t
			}
		}
		t.kept++
		if s.availableWith(d, tolerations) {
			res.Free++
			t.free++
		}
	}
	if len(res.ErrorSample) > 3 {
		slices.Sort(res.ErrorSample) // a stable sample whatever the map order
		res.ErrorSample = res.ErrorSample[:3]
	}
	res.freeOn = make(map[string]int, len(byNode))
	for node, t := range byNode {
		res.freeOn[node] = t.free
	}
	res.networkFree = network.free
	if errNetwork {
		return res // every node reaches a device the selectors fail on
	}
	// Nodes that only reach network-attached devices (no local device of
	// the class) count as one candidate, "".
	consider := func(node string, t nodeTally) {
		res.Nodes++
		kept, free := t.kept+network.kept, t.free+network.free
		if free > res.BestNodeFree || (free == res.BestNodeFree && (res.Nodes == 1 || node < res.BestNode)) {
			res.BestNode, res.BestNodeFree = node, free
		}
		res.MostOnANode = max(res.MostOnANode, kept)
		if kept > 0 && kept == free && (!res.AllFree || node < res.AllFreeNode) {
			res.AllFree, res.AllFreeNode = true, node
		}
	}
	nodes := 0
	for node, t := range byNode {
		if errNodes[node] {
			continue
		}
		nodes++
		consider(node, *t)
	}
	if nodes == 0 && network.kept > 0 {
		consider("", nodeTally{})
	}
	return res
}

// CompileSelectors reports whether request selectors compile.
func (s *Snapshot) CompileSelectors(selectors []resourceapi.DeviceSelector) error {
	return s.matcher.Compile(selectors)
}

// Events returns every pod event record (for tests and tooling).
func (s *Snapshot) Events() []*Event { return s.events }
