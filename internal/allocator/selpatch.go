package allocator

// Keeping the last snapshot's selections across a change of placement: what
// a request's selectors keep depends on the devices, the classes and the
// request only, and what is free on a node only on that node's devices and
// their pool; a claim allocated or released changes the counts of the nodes
// that reach its devices' pools and of no other.

import (
	"maps"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// keepSelections lets m patch prev's selections instead of evaluating them
// again over every device of the class: called with the devices whose
// allocations changed since prev's snapshot (nil: none), when its classes,
// devices, taint rules and nodes are m's own.
func (m *Model) keepSelections(prev *Model, changed map[index.DeviceKey]struct{}) {
	prev.mu.Lock()
	m.prevSelections = maps.Clone(prev.selections)
	prev.mu.Unlock()
	if len(m.prevSelections) == 0 {
		m.prevSelections = nil
	}
	// A device's pool is what its counters, and whether they are overdrawn,
	// are shared within: every node that reaches a device of a changed
	// device's pool is counted again.
	m.recount = map[string]bool{}
	for k := range changed {
		for node := range m.raw.PoolNodes(k.PoolKey()) {
			m.recount[node] = true
		}
	}
	m.keepCapacity(prev)
}

// patchSelection is prev, a selection of the same request over the same
// devices in the snapshot before, with the nodes whose allocations changed
// counted again.
func (m *Model) patchSelection(prev *Selection, dm Demand) *Selection {
	res := &Selection{
		Devices: prev.Devices, Errors: prev.Errors, ClassErrors: prev.ClassErrors, ErrorSample: prev.ErrorSample,
		ErrorNodes: prev.ErrorNodes, TooSmall: prev.TooSmall,
		onNode: prev.onNode, errNodes: prev.errNodes, errNetwork: prev.errNetwork,
	}
	res.counts = maps.Clone(prev.counts)
	for node := range m.recount {
		if devices, ok := res.onNode[node]; ok {
			res.counts[node] = m.countNode(devices, dm)
		}
	}
	res.tally()
	return res
}
