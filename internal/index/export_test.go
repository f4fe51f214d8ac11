package index

// CachedMatchDevices returns how many device records have selector results
// kept across snapshots.
func (ix *Index) CachedMatchDevices() int {
	ix.matches.mu.Lock()
	defer ix.matches.mu.Unlock()
	return len(ix.matches.m)
}

// KeptSelections returns how many of the last snapshot's selections this
// snapshot patches instead of evaluating again.
func (s *Snapshot) KeptSelections() int { return len(s.kept) }

// KeptCapacity reports whether this snapshot patches the last snapshot's
// class and lane capacity rows instead of counting every device again.
func (s *Snapshot) KeptCapacity() bool { return s.keptClassCap != nil && s.keptLaneCap != nil }
