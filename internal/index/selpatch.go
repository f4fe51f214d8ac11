package index

// Keeping the last snapshot's selections across a change of placement: what
// a request's selectors keep depends on the devices, the classes and the
// request only, and what is free on a node only on that node's devices and
// their pool; a claim allocated or released changes the counts of the nodes
// that reach its devices' pools and of no other.

import "maps"

// keepSelections lets s patch prev's selections instead of evaluating them
// again over every device of the class: called with the devices whose
// allocations changed since prev (nil: none), when prev's classes, devices,
// taint rules and nodes are s's own.
func (s *Snapshot) keepSelections(prev *Snapshot, changed map[DeviceKey]struct{}) {
	prev.memoMu.Lock()
	s.kept = maps.Clone(prev.selectorMemo)
	prev.memoMu.Unlock()
	if len(s.kept) == 0 {
		s.kept = nil
	}
	// A device's pool is what its counters, and whether they are overdrawn,
	// are shared within: every node that reaches a device of a changed
	// device's pool is counted again.
	s.recount = map[string]bool{}
	for k := range changed {
		for node := range s.poolNodes[PoolKey{k.Driver, k.Pool}] {
			s.recount[node] = true
		}
	}
	s.keepCapacity(prev)
}

// patchSelection is prev, a selection of the same request over the same
// devices in the snapshot before, with the nodes whose allocations changed
// counted again.
func (s *Snapshot) patchSelection(prev *Selection, dm Demand) *Selection {
	res := &Selection{
		Devices: prev.Devices, Errors: prev.Errors, ClassErrors: prev.ClassErrors, ErrorSample: prev.ErrorSample,
		ErrorNodes: prev.ErrorNodes, TooSmall: prev.TooSmall,
		onNode: prev.onNode, errNodes: prev.errNodes, errNetwork: prev.errNetwork,
	}
	res.counts = maps.Clone(prev.counts)
	for node := range s.recount {
		if devices, ok := res.onNode[node]; ok {
			res.counts[node] = s.countNode(devices, dm)
		}
	}
	res.tally()
	return res
}
