package index

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind is a kind of object the index holds. The index counts the changes
// of each kind, and a snapshot carries the counts it was taken at, so that
// a reader can tell which kinds changed between two snapshots (and keep
// what it derived from the kinds that did not).
type Kind uint8

// The kinds, by the objects they come from. A device record is derived
// from slices, classes (its class membership) and taint rules.
const (
	KindClass Kind = iota
	KindSlice
	KindClaim
	KindPod
	KindNode
	KindEvent
	KindTaintRule
	// KindPlacement counts the changes of claims and pods in what one
	// object tells about the others: where devices are allocated, whom a
	// claim is reserved for, where a pod runs, its priority, phase and
	// requests. Every claim or pod change is one, except a change of a
	// claim's status.devices (the driver's device status) or of a pod's
	// conditions and container statuses (readiness, restarts, the
	// kubelet's device health): the most frequent writes of a running
	// cluster, which only that claim's and that pod's own series read. A
	// pod in deletion's container statuses do count: whether one still runs
	// decides whether its reservation leaks.
	KindPlacement
	kindCount
)

// Kinds is a set of kinds.
type Kinds uint16

// AllKinds is every kind.
const AllKinds = Kinds(1<<kindCount - 1)

// DeviceKinds are the kinds a device record is derived from.
const DeviceKinds = Kinds(1<<KindSlice | 1<<KindClass | 1<<KindTaintRule)

// KindsOf returns the set of the kinds given.
func KindsOf(ks ...Kind) Kinds {
	var set Kinds
	for _, k := range ks {
		set |= 1 << k
	}
	return set
}

// samePlacement reports whether two claims, or two pods, of the same
// content but for the fields KindPlacement leaves out are the same.
func samePlacement(a, b any) bool {
	switch a := a.(type) {
	case *resourceapi.ResourceClaim:
		b, ok := b.(*resourceapi.ResourceClaim)
		if !ok || b == nil || a == nil {
			return false
		}
		ac, bc := *a, *b
		ac.Status.Devices, bc.Status.Devices = nil, nil
		return sameContent(&ac, &bc)
	case *corev1.Pod:
		b, ok := b.(*corev1.Pod)
		if !ok || b == nil || a == nil {
			return false
		}
		ac, bc := *a, *b
		// A pod in deletion holds its devices while a container runs, and
		// is stuck once none does (leak pod_stuck_terminating): there its
		// container statuses are placement. They change little by then.
		deleting := a.DeletionTimestamp != nil || b.DeletionTimestamp != nil
		for _, p := range []*corev1.Pod{&ac, &bc} {
			p.Status.Conditions = nil
			if !deleting {
				p.Status.ContainerStatuses, p.Status.InitContainerStatuses = nil, nil
			}
		}
		return sameContent(&ac, &bc)
	}
	return false
}

// Version is where an index stood when a snapshot was taken: the changes
// of each kind so far. Versions of different indexes never compare equal.
type Version struct {
	index uint64
	gens  [kindCount]uint64
}

// Unchanged reports whether none of the kinds changed between since and v,
// which must come from the same index (the zero Version matches nothing).
func (v Version) Unchanged(since Version, ks Kinds) bool {
	if v.index == 0 || v.index != since.index {
		return false
	}
	for k := range kindCount {
		if ks&(1<<k) != 0 && v.gens[k] != since.gens[k] {
			return false
		}
	}
	return true
}

// indexIDs numbers the indexes of the process, from 1.
var indexIDs atomic.Uint64

// touch records a change of kind k.
func (ix *Index) touch(k Kind) {
	ix.version.gens[k]++
}

// Version returns where the index stood when the snapshot was taken.
func (s *Snapshot) Version() Version { return s.version }

// sameContent reports whether two objects differ in nothing but their
// resourceVersion: a write to a field the trimmer dropped (an annotation,
// managed fields), or the same object again after a relist. The index then
// keeps the record it has and counts no change.
func sameContent[T any, P interface {
	*T
	metav1.Object
}](a, b P) bool {
	if a == nil || b == nil {
		return false
	}
	ac, bc := *a, *b
	P(&ac).SetResourceVersion("")
	P(&bc).SetResourceVersion("")
	return equality.Semantic.DeepEqual(&ac, &bc)
}

// KindsOfRecord returns the kinds a record of the index is derived from
// (an update replaces the record: the same record is the same object as
// it was), and false for a value that is no record of the index.
func KindsOfRecord(r any) (Kinds, bool) {
	switch r.(type) {
	case *Claim:
		return KindsOf(KindClaim), true
	case *Pod:
		return KindsOf(KindPod), true
	case *Device:
		return DeviceKinds, true
	case *Class:
		return KindsOf(KindClass), true
	case *Node:
		return KindsOf(KindNode), true
	case *Event:
		return KindsOf(KindEvent), true
	}
	return 0, false
}
