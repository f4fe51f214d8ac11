// Package allocator is the exporter's model of the scheduler's DRA
// allocator over one index snapshot: what a request's selectors keep of a
// class (selection.go, with CEL results kept across snapshots:
// matchcache.go), whether a device could go to a new claim (allocation,
// taints, nodes, shared counters: availability.go; consumable capacity:
// consumable.go) and the capacity per class and per lane (capacity.go).
// The decision tree (internal/classify) and the capacity collectors ask it;
// it reads the index's joins and writes nothing back.
//
// A model is built once per snapshot (Of). One taken after a change of
// placement only (claims allocated or released; the same devices, classes,
// taint rules and nodes) patches the last model's selections and capacity
// rows, counting again only the nodes that reach the changed devices'
// pools (selpatch.go, cappatch.go).
package allocator

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Model is the allocator's view of one snapshot. Safe for concurrent use;
// what it hands out must not be modified.
type Model struct {
	// s is the snapshot as handed in, whose lookups TraceReads may record
	// (the reads a row's collector makes through the model: a device's
	// claims, a selection's holders); raw its joins read unrecorded.
	s   *index.Snapshot
	raw index.Raw
	*kept

	// remaining are the pools' shared counters less what the allocated
	// devices consume; overdrawn pools have a counter below zero (the
	// allocator then gives out none of their counter-consuming devices);
	// counterUsers are the allocated devices drawing on each counter set.
	remaining    map[index.PoolKey]map[string]map[string]resource.Quantity
	overdrawn    map[index.PoolKey]bool
	counterUsers map[counterSetKey][]index.DeviceKey

	mu         sync.Mutex
	selections map[string]*Selection
	// prevSelections are the last model's selections, which Select patches
	// (selpatch.go), counting again the nodes in recount.
	prevSelections map[string]*Selection
	recount        map[string]bool

	dpOnce sync.Once
	dpUsed map[nodeResource]int64

	// The capacity rows, computed once; prevClassCap and prevLaneCap are
	// the last model's, which these patch over the nodes in recount, and
	// byNode each class's devices by node (cappatch.go).
	classCap, laneCap         capacityRows
	prevClassCap, prevLaneCap *[]Capacity
	byNode                    atomic.Pointer[map[string]map[string][]*index.Device]
}

// kept is what outlives a snapshot, one per index: the CEL results of
// request selectors by device record, and the matcher that compiles them.
type kept struct {
	matcher *celmatch.Matcher
	matches *matchCache
}

// Of returns the model of the snapshot, built on first use.
func Of(s *index.Snapshot) *Model {
	return s.Derive(func(prev any, ch index.Change) any {
		p, _ := prev.(*Model)
		return build(s, p, ch)
	}).(*Model)
}

// Snapshot returns the snapshot the model is of.
func (m *Model) Snapshot() *index.Snapshot { return m.s }

func build(s *index.Snapshot, prev *Model, ch index.Change) *Model {
	k := s.Kept(func() any { return &kept{matcher: celmatch.New(), matches: newMatchCache()} }).(*kept)
	m := &Model{s: s, raw: s.Raw(), kept: k, selections: map[string]*Selection{}}
	if prev == nil || ch.Devices {
		k.matches.retain(s.Devices) // the results of records gone are dropped
	}
	if prev != nil && !ch.Devices && !ch.Claims {
		m.remaining, m.overdrawn, m.counterUsers = prev.remaining, prev.overdrawn, prev.counterUsers
	} else {
		m.computeRemainingCounters()
	}
	// What a request can get changes with the devices, classes, taint
	// rules and nodes, and, on the nodes of their pools, with the devices
	// whose allocations changed: known when the claims were patched.
	if prev != nil && !ch.Devices && !ch.Nodes && (!ch.Claims || ch.Allocated != nil) {
		m.keepSelections(prev, ch.Allocated)
	}
	return m
}
