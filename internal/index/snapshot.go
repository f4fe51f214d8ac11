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
	usage         map[DeviceKey]*DeviceUsage
	// poolNodes are the nodes each pool's devices are on ("":
	// network-attached).
	poolNodes map[PoolKey]map[string]bool

	taintsOnce sync.Once
	ruleTaints map[DeviceKey][]Taint

	// derived is what the allocator model derives from the snapshot, and
	// kept what it keeps beside the index (derive.go).
	derived *derived
	kept    *kept

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
		kept:         ix.kept,
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
		s.drawsCounters, s.poolNodes = prev.drawsCounters, prev.poolNodes
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
	// The devices whose allocations changed, when the claims are patched.
	var usageChanged map[DeviceKey]struct{}
	if claims {
		s.Claims, s.claimsByKey, s.claimsByOwner, s.claimsByGroup, s.usage = prev.Claims, prev.claimsByKey, prev.claimsByOwner, prev.claimsByGroup, prev.usage
		s.unreservedSince = prev.unreservedSince
	} else {
		s.unreservedSince = maps.Clone(ix.unreservedSince)
		if prev != nil && fewChanged(len(changedClaims), len(prev.Claims)) {
			changed := current(changedClaims, ix.claims)
			builds = append(builds, func() { usageChanged = s.patchClaims(prev, changed) })
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
	s.link(prev, Change{Devices: !devices, Nodes: !nodes, Claims: !claims, Allocated: usageChanged})
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
	s.poolNodes = map[PoolKey]map[string]bool{}
	for _, d := range s.Devices {
		s.deviceByKey[d.Key] = d
		pk := PoolKey{d.Key.Driver, d.Key.Pool}
		if s.poolNodes[pk] == nil {
			s.poolNodes[pk] = map[string]bool{}
		}
		s.poolNodes[pk][d.Node] = true
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
	s.usage = map[DeviceKey]*DeviceUsage{}
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
				u = &DeviceUsage{}
				s.usage[r.Device] = u
			}
			u.add(c, r)
		}
	}
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
