package index

import "maps"

// poisonOnPanic, deferred by the writers after they lock, marks the index
// poisoned when the write panics and lets the panic go on: a write that
// stops half-way leaves maps that disagree (a claim in claims but not in
// claimsByReservedPod, a change not counted in the version). From then on
// Snapshot hands out the last snapshot taken before, until Rebuild.
func (ix *Index) poisonOnPanic() {
	if r := recover(); r != nil {
		ix.poisoned = true
		panic(r)
	}
}

// Consistent reports whether no write has panicked since the index was
// created or last rebuilt.
func (ix *Index) Consistent() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return !ix.poisoned
}

// Rebuild replaces the index's contents with the objects fill hands to
// add, as an initial list would deliver them: they are added to a new,
// empty index off to the side, which then replaces this one's contents at
// once, so that readers see the old contents or the new, never a part. If
// fill returns an error, nothing is replaced and the error is returned.
//
// Writers must not run meanwhile (the caller serialises them). The latency
// tracker is kept, not rebuilt (an initial list would mark what it waits
// for as done), and so are the times since when allocated claims have
// reserved nobody, for the claims still there: a rebuilt index must not
// report a fresh unreservation as a leak because it lost when it began.
func (ix *Index) Rebuild(fill func(add func(obj any) error) error) error {
	cfg := ix.cfg
	cfg.Observer = nil
	fresh := New(cfg)
	if err := fill(func(obj any) error { return fresh.Upsert(obj, false) }); err != nil {
		return err
	}
	ix.snapMu.Lock()
	defer ix.snapMu.Unlock()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for uid, since := range ix.unreservedSince {
		if _, ok := fresh.unreservedSince[uid]; ok {
			fresh.unreservedSince[uid] = since
		}
	}
	ix.matcher, ix.kept = fresh.matcher, fresh.kept
	ix.classes, ix.sliceToPool, ix.pools, ix.devices = fresh.classes, fresh.sliceToPool, fresh.pools, fresh.devices
	ix.claims, ix.pods, ix.nodes, ix.events, ix.taintRules = fresh.claims, fresh.pods, fresh.nodes, fresh.events, fresh.taintRules
	ix.claimsByReservedPod, ix.claimsByOwner, ix.unreservedSince = fresh.claimsByReservedPod, fresh.claimsByOwner, fresh.unreservedSince
	ix.changedClaims, ix.changedPods = maps.Clone(fresh.changedClaims), maps.Clone(fresh.changedPods)
	// Every kind changed, and the next snapshot is built whole: the kept
	// one's joins are of the old contents.
	for k := range kindCount {
		ix.touch(k)
	}
	ix.snap = nil
	ix.poisoned = false
	return nil
}
