package index

// What a snapshot tells its readers of how it was made: the claims and pods
// changed since the snapshot before it (the index's change sets, for the
// row store), and, for tests, the records its lookups hand out.

// Changed returns the claims and the pods written or deleted since the
// snapshot of version since, by key, as that snapshot held them (nil: new
// since), and true, when s was taken right after that one: the index's own
// change sets. false when s cannot tell (another snapshot was taken
// between, or s was built from scratch). What else changed, the versions
// tell (Version.Unchanged). The maps must not be modified.
func (s *Snapshot) Changed(since Version) (claims map[Key]*Claim, pods map[Key]*Pod, ok bool) {
	if since.index == 0 || s.since != since {
		return nil, nil, false
	}
	return s.claimsBefore, s.podsBefore, true
}

// before returns the records prev held under the changed keys.
func before[R any](keys map[Key]struct{}, prev map[Key]*R) map[Key]*R {
	out := make(map[Key]*R, len(keys))
	for k := range keys {
		out[k] = prev[k]
	}
	return out
}

// TraceReads makes the snapshot call read with every record its lookups
// hand out (Class, Device, Claim, Pod, Node, ClassDevices,
// ResolvePodClaims, ClassForExtendedResource, PodEvents, AllocatedTo and
// the claims RemainingCapacity reads), nil to stop: for the tests that
// hold what a row reads to what the fan-out table declares. Only for a
// snapshot no one else reads (SnapshotFromScratch's).
func (s *Snapshot) TraceReads(read func(record any)) { s.trace = read }

// traced hands r to the trace, if any, and returns it.
func traced[R any](s *Snapshot, r *R) *R {
	if s.trace != nil && r != nil {
		s.trace(r)
	}
	return r
}

// tracedAll hands each of rs to the trace, if any, and returns them.
func tracedAll[R any](s *Snapshot, rs []*R) []*R {
	if s.trace != nil {
		for _, r := range rs {
			s.trace(r)
		}
	}
	return rs
}
