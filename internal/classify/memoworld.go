package classify

import (
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// The memo's snapshot-wide answers: the leaks, the double allocations and
// the capacity per class and per lane. Each reads the world (devices,
// classes, nodes, and where claims and pods hold devices) and nothing of a
// pod's or a claim's own that is not placement: it is kept while the
// world is the same, whatever pods' readiness, drivers' device status or
// events did. Each is kept for the snapshot it was last asked for (the
// verdict families may read a held snapshot while the capacity families
// read the current one).

// wide is one snapshot-wide answer and the snapshot version it holds for.
type wide[T any] struct {
	mu      sync.Mutex
	valid   bool
	version index.Version
	// until is when the answer stops holding with the clock (zero: it
	// does not depend on it), and grace what it was computed with.
	until time.Time
	grace time.Duration
	out   T
}

// get returns the kept answer when it holds for s at now, else the one
// compute gives (with the time it holds to).
func (w *wide[T]) get(s *index.Snapshot, now time.Time, grace time.Duration, compute func() (T, time.Time)) (T, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.valid || w.grace != grace || !s.Version().Unchanged(w.version, world) || !w.until.IsZero() && now.After(w.until) {
		w.out, w.until = compute()
		w.valid, w.version, w.grace = true, s.Version(), grace
	}
	return w.out, w.until
}

// Leaks is Leaks(s, now, grace), kept while the world is the same and no
// grace period or deletion deadline passed (LeaksChangeAt), and asked again
// only of the claims that changed or name a pod that did when only claims
// and pods changed (leakmemo.go).
func (m *Memo) Leaks(s *index.Snapshot, now time.Time, grace time.Duration) []Leak {
	out, _ := m.leaks.get(s, now, grace)
	return out
}

// LeaksStableUntil is when Leaks's answer for s stops holding with the
// clock (the zero time: until the snapshot changes).
func (m *Memo) LeaksStableUntil(s *index.Snapshot, now time.Time, grace time.Duration) time.Time {
	_, until := m.leaks.get(s, now, grace)
	return until
}

// DoubleAllocations is DoubleAllocations(s), kept while the world is the
// same.
func (m *Memo) DoubleAllocations(s *index.Snapshot) []Conflict {
	out, _ := m.conflicts.get(s, time.Time{}, 0, func() ([]Conflict, time.Time) { return DoubleAllocations(s), time.Time{} })
	return out
}

// ClassCapacity is the allocator model's, kept while the world is the same.
func (m *Memo) ClassCapacity(s *index.Snapshot) []allocator.Capacity {
	out, _ := m.classCapacity.get(s, time.Time{}, 0, func() ([]allocator.Capacity, time.Time) { return allocator.Of(s).ClassCapacity(), time.Time{} })
	return out
}

// LaneCapacity is the allocator model's, kept while the world is the same.
func (m *Memo) LaneCapacity(s *index.Snapshot) []allocator.Capacity {
	out, _ := m.laneCapacity.get(s, time.Time{}, 0, func() ([]allocator.Capacity, time.Time) { return allocator.Of(s).LaneCapacity(), time.Time{} })
	return out
}
