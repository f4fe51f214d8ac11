package allocator

import "github.com/dra-exporter/dra-exporter/internal/index"

// CachedMatchDevices returns how many device records have selector results
// kept across the index's snapshots.
func CachedMatchDevices(s *index.Snapshot) int {
	m := Of(s)
	m.matches.mu.Lock()
	defer m.matches.mu.Unlock()
	return len(m.matches.m)
}

// KeptSelections returns how many of the last model's selections this one
// patches instead of evaluating them again.
func (m *Model) KeptSelections() int { return len(m.prevSelections) }

// KeptCapacity reports whether this model patches the last one's class and
// lane capacity rows instead of counting every device again.
func (m *Model) KeptCapacity() bool { return m.prevClassCap != nil && m.prevLaneCap != nil }
