package index

// What another package derives from snapshots and keeps beside the index:
// the allocator model (internal/allocator), which the index does not know.
// A snapshot holds one derived value, built once; the index holds one
// value that outlives its snapshots (the allocator's CEL results).

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"

	resourceapi "k8s.io/api/resource/v1"
)

// Change says how a snapshot differs from the one taken just before it.
type Change struct {
	// Devices is set when the devices, classes or taint rules changed;
	// Nodes and Claims when the nodes or the claims did.
	Devices, Nodes, Claims bool
	// Allocated are the devices whose allocations changed, when the claims
	// changed and were patched; nil when not known (or none changed).
	Allocated map[DeviceKey]struct{}
}

// derived is a snapshot's derived value, built once. prev is the value
// derived from the snapshot just before, when it was built by the time
// this snapshot was taken; it is dropped once this one is built, so that
// no chain of snapshots stays reachable.
type derived struct {
	once   sync.Once
	built  atomic.Bool
	v      any
	prev   any
	change Change
}

// kept is the index's value that outlives its snapshots.
type kept struct {
	once sync.Once
	v    any
}

// Derive returns the value build makes of the snapshot, made once per
// snapshot. build is handed the value made of the snapshot taken just
// before this one (nil when none was made by then) and how the two differ.
func (s *Snapshot) Derive(build func(prev any, ch Change) any) any {
	d := s.derived
	d.once.Do(func() {
		d.v = build(d.prev, d.change)
		d.prev = nil
		d.built.Store(true)
	})
	return d.v
}

// Kept returns the index's value that outlives its snapshots, made by
// make on first use. An index rebuilt after a failed write starts a new
// one.
func (s *Snapshot) Kept(make func() any) any {
	s.kept.once.Do(func() { s.kept.v = make() })
	return s.kept.v
}

// link hands s the value derived from prev, if built, and how s differs.
func (s *Snapshot) link(prev *Snapshot, ch Change) {
	s.derived = &derived{change: ch}
	if prev != nil && prev.derived.built.Load() {
		s.derived.prev = prev.derived.v
	}
}

// Raw is a snapshot's joins read without the record TraceReads keeps: for
// the allocator model, whose reads a row's collector declares by what it
// asks of the model. Read-only, like the snapshot.
type Raw struct{ s *Snapshot }

// Raw returns the snapshot's untraced joins.
func (s *Snapshot) Raw() Raw { return Raw{s} }

// ClassDevices returns the devices a class selects.
func (r Raw) ClassDevices(class string) []*Device { return r.s.classDevices[class] }

// ClassErrors returns the devices a class's selectors failed on.
func (r Raw) ClassErrors(class string) []*Device { return r.s.classErrors[class] }

// Device returns a device by key, nil when gone.
func (r Raw) Device(k DeviceKey) *Device { return r.s.deviceByKey[k] }

// Node returns a node by name, nil when gone.
func (r Raw) Node(name string) *Node { return r.s.nodesByName[name] }

// HasNodes reports whether the snapshot holds any Node (a file may hold
// none: it then says nothing about nodes).
func (r Raw) HasNodes() bool { return len(r.s.nodesByName) > 0 }

// Usage returns what the allocations of a device hold of it, nil when
// none does.
func (r Raw) Usage(k DeviceKey) *DeviceUsage { return r.s.usage[k] }

// Allocated calls f with every allocated device's key.
func (r Raw) Allocated(f func(DeviceKey)) {
	for k := range r.s.usage {
		f(k)
	}
}

// PoolCounters returns each pool's shared counters, by counter set.
func (r Raw) PoolCounters() map[PoolKey]map[string]map[string]resource.Quantity {
	return r.s.poolCounters
}

// DrawsCounters reports whether any device consumes shared counters.
func (r Raw) DrawsCounters() bool { return r.s.drawsCounters }

// PoolNodes returns the nodes a pool's devices are on ("":
// network-attached).
func (r Raw) PoolNodes(pk PoolKey) map[string]bool { return r.s.poolNodes[pk] }

// DevicePluginResources returns the resource names of the device-plugin
// lane.
func (r Raw) DevicePluginResources() []string { return r.s.devicePlugin }

// DeviceUsage is what the allocations of one device hold of it.
type DeviceUsage struct {
	// Claims are the claims it is allocated to (admin access excluded).
	Claims []*Claim
	// Exclusive is set when an allocation without a shareID holds the
	// device: the scheduler then gives it to nobody else.
	Exclusive bool
	// Consumed sums the consumedCapacity of the shared allocations.
	Consumed map[resourceapi.QualifiedName]resource.Quantity
}

func (u *DeviceUsage) add(c *Claim, r Result) {
	u.Claims = append(u.Claims, c)
	if !r.Shared {
		u.Exclusive = true
		return
	}
	for name, q := range r.ConsumedCapacity {
		if u.Consumed == nil {
			u.Consumed = map[resourceapi.QualifiedName]resource.Quantity{}
		}
		sum := u.Consumed[name]
		sum.Add(q)
		u.Consumed[name] = sum
	}
}
