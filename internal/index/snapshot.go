package index

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// Snapshot is a consistent, immutable view of the index at one moment. The
// objects it holds must not be modified.
type Snapshot struct {
	// version is where the index stood when the snapshot was taken.
	version Version

	Classes []*Class // sorted by name
	Devices []*Device
	Claims  []*Claim
	Pods    []*Pod
	Nodes   []*Node
	Events  []*Event // Warning events about pods that are DRA evidence
	// TaintRules are the DeviceTaintRules, sorted by name.
	TaintRules []*resourceapi.DeviceTaintRule

	poolCounters    map[PoolKey]map[string]map[string]resource.Quantity
	poolProblems    map[PoolKey]string
	unreservedSince map[types.UID]time.Time
	devicePlugin    []string
	shard           shard.Shard
	matcher         *celmatch.Matcher
	matches         *matchCache

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
	sliceTaints   bool                 // a device has a taint of its slice
	drawsCounters bool                 // a device consumes counters
	usage         map[DeviceKey]*deviceUsage
	remaining     map[PoolKey]map[string]map[string]resource.Quantity
	// overdrawn pools have a counter below zero: the allocator then gives
	// out none of their counter-consuming devices.
	overdrawn map[PoolKey]bool
	// counterUsers are the allocated devices drawing on each counter set.
	counterUsers map[counterSetKey][]DeviceKey

	memoMu       sync.Mutex
	taintsOnce   sync.Once
	ruleTaints   map[DeviceKey][]Taint
	selectorMemo map[string]*Selection

	dpOnce sync.Once
	dpUsed map[nodeResource]int64

	// trace, when set, is called with each record a lookup hands out
	// (TraceReads).
	trace func(record any)

	// since is the version of the snapshot taken just before this one
	// (the zero Version: none), and claimsBefore and podsBefore the
	// claims and pods written or deleted between the two, as that one
	// held them (nil: new).
	since        Version
	claimsBefore map[Key]*Claim
	podsBefore   map[Key]*Pod
}

type deviceUsage struct {
	claims []*Claim
	// exclusive is set when an allocation without a shareID holds the
	// device: the scheduler then gives it to nobody else.
	exclusive bool
	// consumed sums the consumedCapacity of the shared allocations.
	consumed map[resourceapi.QualifiedName]resource.Quantity
}

func (u *deviceUsage) add(c *Claim, r Result) {
	u.claims = append(u.claims, c)
	if !r.Shared {
		u.exclusive = true
		return
	}
	for name, q := range r.ConsumedCapacity {
		if u.consumed == nil {
			u.consumed = map[resourceapi.QualifiedName]resource.Quantity{}
		}
		sum := u.consumed[name]
		sum.Add(q)
		u.consumed[name] = sum
	}
}

// Snapshot returns a consistent view. It holds the index lock only while it
// copies pointers; the joins are built afterwards. While nothing changed
// since the last one (no Upsert or Delete), it returns that one: a snapshot
// is read-only, and collectors may key what they rendered on its pointer.
// The joins of the kinds that did not change since the last one are that
// one's (read-only too): a new event rebuilds the event joins only. While
// the index is poisoned (a write panicked half-way; see Rebuild) it hands
// out the last snapshot taken before.
func (ix *Index) Snapshot() *Snapshot {
	ix.snapMu.Lock()
	defer ix.snapMu.Unlock()
	ix.mu.RLock()
	if ix.snap != nil && (ix.snapVersion == ix.version || ix.poisoned) {
		ix.mu.RUnlock()
		return ix.snap
	}
	claims, pods := ix.changedClaims, ix.changedPods
	ix.changedClaims, ix.changedPods = map[Key]struct{}{}, map[Key]struct{}{}
	s := ix.snapshot(ix.snap, claims, pods)
	if prev := ix.snap; prev != nil {
		s.since = prev.version
		s.claimsBefore, s.podsBefore = before(claims, prev.claimsByKey), before(pods, prev.podsByKey)
	}
	ix.matches.retain(s.Devices)
	ix.snap, ix.snapVersion = s, s.version
	return s
}

// SnapshotFromScratch is Snapshot without the last one's joins, for tests
// that hold the two equal. It does not replace the kept snapshot.
func (ix *Index) SnapshotFromScratch() *Snapshot {
	ix.snapMu.Lock()
	defer ix.snapMu.Unlock()
	ix.mu.RLock()
	return ix.snapshot(nil, nil, nil)
}

// snapshot copies the index, under ix.mu held for reading (released here),
// and builds the joins, reusing prev's for the kinds unchanged since it and
// patching prev's claim and pod joins when few of them (the keys in
// changedClaims and changedPods) were written since. Snapshot holds snapMu,
// which keeps the writers of the changed sets out while ix.mu is held for
// reading.
func (ix *Index) snapshot(prev *Snapshot, changedClaims, changedPods map[Key]struct{}) *Snapshot {
	same := func(ks Kinds) bool { return prev != nil && ix.version.Unchanged(prev.version, ks) }
	s := &Snapshot{
		version:      ix.version,
		TaintRules:   slices.Collect(maps.Values(ix.taintRules)),
		devicePlugin: ix.devicePlugin,
		shard:        ix.shard,
		matcher:      ix.matcher,
		matches:      ix.matches,
	}
	// The joins of the changed kinds, built once the lock is released.
	var builds []func()
	classes, devices := same(KindsOf(KindClass)), same(DeviceKinds)
	claims, pods := same(KindsOf(KindClaim)), same(KindsOf(KindPod))
	nodes, events := same(KindsOf(KindNode)), same(KindsOf(KindEvent))
	if classes {
		s.Classes, s.classByName = prev.Classes, prev.classByName
	} else {
		s.Classes = slices.Collect(maps.Values(ix.classes))
		builds = append(builds, s.buildClasses)
	}
	if devices {
		s.Devices, s.deviceByKey, s.classDevices, s.classErrors, s.sliceTaints = prev.Devices, prev.deviceByKey, prev.classDevices, prev.classErrors, prev.sliceTaints
		s.drawsCounters = prev.drawsCounters
		s.poolCounters, s.poolProblems = prev.poolCounters, prev.poolProblems
	} else {
		s.Devices = slices.Collect(maps.Values(ix.devices))
		builds = append(builds, s.buildDevices)
		s.poolCounters = make(map[PoolKey]map[string]map[string]resource.Quantity)
		for pk, p := range ix.pools {
			if len(p.counters) > 0 {
				s.poolCounters[pk] = p.counters
			}
			if p.problem != "" {
				if s.poolProblems == nil {
					s.poolProblems = map[PoolKey]string{}
				}
				s.poolProblems[pk] = p.problem
			}
		}
	}
	if claims {
		s.Claims, s.claimsByKey, s.claimsByOwner, s.claimsByGroup, s.usage = prev.Claims, prev.claimsByKey, prev.claimsByOwner, prev.claimsByGroup, prev.usage
		s.unreservedSince = prev.unreservedSince
	} else {
		s.unreservedSince = maps.Clone(ix.unreservedSince)
		if prev != nil && fewChanged(len(changedClaims), len(prev.Claims)) {
			changed := current(changedClaims, ix.claims)
			builds = append(builds, func() { s.patchClaims(prev, changed) })
		} else {
			s.Claims = slices.Collect(maps.Values(ix.claims))
			builds = append(builds, s.buildClaims)
		}
	}
	if pods {
		s.Pods, s.podsByKey = prev.Pods, prev.podsByKey
	} else if prev != nil && fewChanged(len(changedPods), len(prev.Pods)) {
		changed := current(changedPods, ix.pods)
		builds = append(builds, func() { s.patchPods(prev, changed) })
	} else {
		s.Pods = slices.Collect(maps.Values(ix.pods))
		builds = append(builds, s.buildPods)
	}
	if nodes {
		s.Nodes, s.nodesByName = prev.Nodes, prev.nodesByName
	} else {
		s.Nodes = slices.Collect(maps.Values(ix.nodes))
		builds = append(builds, s.buildNodes)
	}
	if events {
		s.Events, s.podEvents = prev.Events, prev.podEvents
	} else {
		s.Events = slices.Collect(maps.Values(ix.events))
		builds = append(builds, s.buildEvents)
	}
	ix.mu.RUnlock()
	for _, build := range builds {
		build()
	}
	if devices && claims {
		s.remaining, s.overdrawn, s.counterUsers = prev.remaining, prev.overdrawn, prev.counterUsers
	} else {
		s.computeRemainingCounters()
	}
	s.selectorMemo = map[string]*Selection{}
	return s
}

func (s *Snapshot) buildClasses() {
	slices.SortFunc(s.Classes, func(a, b *Class) int { return strings.Compare(a.Name, b.Name) })
	s.classByName = make(map[string]*Class, len(s.Classes))
	for _, c := range s.Classes {
		s.classByName[c.Name] = c
	}
}

func (s *Snapshot) buildDevices() {
	s.deviceByKey = make(map[DeviceKey]*Device, len(s.Devices))
	s.classDevices = map[string][]*Device{}
	for _, d := range s.Devices {
		s.deviceByKey[d.Key] = d
		if len(d.Taints) > 0 {
			s.sliceTaints = true
		}
		if len(d.Counters) > 0 {
			s.drawsCounters = true
		}
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
}

func (s *Snapshot) buildClaims() {
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
			u.add(c, r)
		}
	}
}

// fewChanged reports whether the last snapshot's claim or pod joins are
// patched: while at most one in eight of them (or 64) changed; beyond,
// they are built again.
func fewChanged(changed, total int) bool { return changed <= 64 || changed <= total/8 }

// patchClaims builds the claim joins from prev's and the claims written
// since (nil: deleted), as buildClaims would build them from all claims
// (the order of Claims and of a device's holders may differ: neither is
// an order anything reads). prev's maps and slices are shared, never
// written: a changed entry gets a new slice or usage.
func (s *Snapshot) patchClaims(prev *Snapshot, changed map[Key]*Claim) {
	s.Claims = patchList(prev.Claims, changed, func(c *Claim) Key { return c.Key })
	s.claimsByKey = patchByKey(prev.claimsByKey, changed)
	s.claimsByOwner = maps.Clone(prev.claimsByOwner)
	s.claimsByGroup = maps.Clone(prev.claimsByGroup)
	s.usage = maps.Clone(prev.usage)
	devices := map[DeviceKey]struct{}{}
	for k, c := range changed {
		if old := prev.claimsByKey[k]; old != nil {
			if o := old.OwnerPod; o != nil {
				setOrDelete(s.claimsByOwner, o.UID, without(s.claimsByOwner[o.UID], old))
			}
			if o := old.OwnerGroup; o != nil {
				g := Key{k.Namespace, o.Name}
				setOrDelete(s.claimsByGroup, g, without(s.claimsByGroup[g], old))
			}
			for _, r := range old.Results {
				devices[r.Device] = struct{}{}
			}
		}
		if c == nil {
			continue
		}
		if o := c.OwnerPod; o != nil {
			s.claimsByOwner[o.UID] = append(slices.Clip(s.claimsByOwner[o.UID]), c)
		}
		if o := c.OwnerGroup; o != nil {
			if s.claimsByGroup == nil {
				s.claimsByGroup = map[Key][]*Claim{}
			}
			g := Key{k.Namespace, o.Name}
			s.claimsByGroup[g] = append(slices.Clip(s.claimsByGroup[g]), c)
		}
		for _, r := range c.Results {
			devices[r.Device] = struct{}{}
		}
	}
	for d := range devices {
		var holders []*Claim
		if u := prev.usage[d]; u != nil {
			for _, c := range u.claims {
				if _, ok := changed[c.Key]; !ok && !slices.Contains(holders, c) {
					holders = append(holders, c)
				}
			}
		}
		for _, c := range changed {
			if c != nil && slices.ContainsFunc(c.Results, func(r Result) bool { return r.Device == d }) {
				holders = append(holders, c)
			}
		}
		u := &deviceUsage{}
		for _, c := range holders {
			for _, r := range c.Results {
				if r.Device == d && !r.AdminAccess {
					u.add(c, r)
				}
			}
		}
		if len(u.claims) == 0 {
			delete(s.usage, d)
		} else {
			s.usage[d] = u
		}
	}
}

// without returns a copy of list without c.
func without(list []*Claim, c *Claim) []*Claim {
	return slices.DeleteFunc(slices.Clone(list), func(x *Claim) bool { return x == c })
}

func setOrDelete[K comparable, V any](m map[K][]V, k K, v []V) {
	if len(v) == 0 {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// patchPods is patchClaims for the pod joins.
func (s *Snapshot) patchPods(prev *Snapshot, changed map[Key]*Pod) {
	s.Pods = patchList(prev.Pods, changed, func(p *Pod) Key { return p.Key })
	s.podsByKey = patchByKey(prev.podsByKey, changed)
}

// current returns the records the index holds under the changed keys (nil:
// deleted).
func current[R any](keys map[Key]struct{}, held map[Key]*R) map[Key]*R {
	out := make(map[Key]*R, len(keys))
	for k := range keys {
		out[k] = held[k]
	}
	return out
}

// patchList returns prev without the changed records' old versions, with
// their current ones (those not deleted) at the end.
func patchList[R any](prev []*R, changed map[Key]*R, key func(*R) Key) []*R {
	out := make([]*R, 0, len(prev)+len(changed))
	for _, r := range prev {
		if _, ok := changed[key(r)]; !ok {
			out = append(out, r)
		}
	}
	for _, r := range changed {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// patchByKey returns a copy of prev with the changed records set (or
// deleted).
func patchByKey[R any](prev map[Key]*R, changed map[Key]*R) map[Key]*R {
	out := maps.Clone(prev)
	if out == nil {
		out = make(map[Key]*R, len(changed))
	}
	for k, r := range changed {
		if r == nil {
			delete(out, k)
		} else {
			out[k] = r
		}
	}
	return out
}

func (s *Snapshot) buildPods() {
	s.podsByKey = make(map[Key]*Pod, len(s.Pods))
	for _, p := range s.Pods {
		s.podsByKey[p.Key] = p
	}
}

func (s *Snapshot) buildNodes() {
	s.nodesByName = make(map[string]*Node, len(s.Nodes))
	for _, n := range s.Nodes {
		s.nodesByName[n.Name] = n
	}
}

func (s *Snapshot) buildEvents() {
	s.podEvents = map[Key][]*Event{}
	for _, e := range s.Events {
		s.podEvents[e.Pod] = append(s.podEvents[e.Pod], e)
	}
}

// Owns reports whether the namespace belongs to the exporter's shard (always,
// unsharded): the classifier skips other shards' pods and claims, whose
// series another shard emits.
func (s *Snapshot) Owns(namespace string) bool { return s.shard.Owns(namespace) }

// Class returns a class by name.
func (s *Snapshot) Class(name string) *Class { return traced(s, s.classByName[name]) }

// Device returns a device by key.
func (s *Snapshot) Device(k DeviceKey) *Device { return traced(s, s.deviceByKey[k]) }

// Claim returns a claim by key.
func (s *Snapshot) Claim(k Key) *Claim { return traced(s, s.claimsByKey[k]) }

// Pod returns a pod by key.
func (s *Snapshot) Pod(k Key) *Pod { return traced(s, s.podsByKey[k]) }

// Node returns a node by name.
func (s *Snapshot) Node(name string) *Node { return traced(s, s.nodesByName[name]) }

// ClassDevices returns the devices a class selects.
func (s *Snapshot) ClassDevices(class string) []*Device { return tracedAll(s, s.classDevices[class]) }

// ResolvePodClaims returns the claims a pod depends on (see PodClaim).
func (s *Snapshot) ResolvePodClaims(p *Pod) []PodClaim {
	out := resolvePodClaims((*snapshotClaims)(s), p)
	if s.trace != nil {
		for _, pc := range out {
			traced(s, pc.Claim)
		}
	}
	return out
}

func (s *Snapshot) claimByKey(k Key) *Claim { return s.claimsByKey[k] }

func (s *Snapshot) claimsOwnedBy(uid types.UID) []*Claim { return s.claimsByOwner[uid] }

func (s *Snapshot) claimsOfGroup(g Key) []*Claim { return s.claimsByGroup[g] }

// PodLane returns the lane serving the pod's GPUs, "" when none.
func (s *Snapshot) PodLane(p *Pod) string {
	return podLane(p, s.IsDevicePluginResource, func(name string) bool { return s.ClassForExtendedResource(name) != nil })
}

// IsDevicePluginResource reports whether the resource name belongs to the
// device-plugin lane.
func (s *Snapshot) IsDevicePluginResource(name string) bool {
	return slices.Contains(s.devicePlugin, name)
}

// ClassForExtendedResource returns the class serving an extended resource.
func (s *Snapshot) ClassForExtendedResource(name string) *Class {
	return traced(s, classForExtendedResource(s.classByName, name))
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
	return tracedAll(s, out)
}

// PodEventRecords returns the events held under the pod's name, as the
// snapshot holds them (unsorted, other UIDs included): to tell whether a
// pod's evidence changed between two snapshots, not to read. The slice must
// not be modified.
func (s *Snapshot) PodEventRecords(p *Pod) []*Event { return s.podEvents[p.Key] }

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
