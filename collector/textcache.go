package collector

import (
	"slices"
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// snapshotPure marks a collector whose series are a function of the
// snapshot alone (it ignores the scrape time and keeps no state between
// runs): over the same snapshot it emits the same series, so the text it
// rendered last time can be written again without running it.
type snapshotPure interface {
	snapshotPure()
}

func (blockedCollector) snapshotPure()     {}
func (claimCollector) snapshotPure()       {}
func (conflictCollector) snapshotPure()    {}
func (*deviceCollector) snapshotPure()     {}
func (deviceClassCollector) snapshotPure() {}
func (heldCollector) snapshotPure()        {}
func (laneCollector) snapshotPure()        {}
func (*podCollector) snapshotPure()        {}

// clockBound is a collector whose series depend on the snapshot and on the
// clock only through deadlines: over the same snapshot its series stay the
// same until stableUntil (the zero time: until the snapshot changes).
type clockBound interface {
	stableUntil(s *index.Snapshot, now time.Time) time.Time
}

// The leak collector's answer changes with the clock only when an
// allocated, unreserved claim passes its grace period.
func (c leakCollector) stableUntil(s *index.Snapshot, now time.Time) time.Time {
	return classify.LeaksChangeAt(s, now, c.grace)
}

// textCache is what TextFamilies rendered from the last snapshot, in the
// last format. The index hands out the same snapshot while nothing changed
// (no informer event), so a scrape of an unchanged cluster writes the
// families of pure collectors from here; any change makes a new snapshot
// and everything is rendered again. The leak collector's families are kept
// until a claim's grace period ends (clockBound); the timing families are
// rendered on every scrape.
type textCache struct {
	mu   sync.Mutex
	snap *index.Snapshot
	om   bool
	// done holds the collectors whose last run over snap succeeded and
	// whose families are all in text, each with the time until which that
	// run holds (zero: while the snapshot does).
	done map[int]time.Time
	// text is the exposition of each family whose series all came from
	// such a run.
	text map[*Def][]byte
	// owner is, per family, the one collector that lists it (nil where two
	// do): only a family with a single owner is cached.
	owner map[*Def]int
}

// reset empties the cache unless it was filled from s in the same format.
func (c *textCache) reset(x *Exporter, s *index.Snapshot, openMetrics bool) {
	if c.owner == nil {
		c.owner = map[*Def]int{}
		shared := map[*Def]bool{}
		for i, col := range x.collectors {
			for _, d := range col.Defs() {
				if _, seen := c.owner[d]; seen {
					shared[d] = true
				}
				c.owner[d] = i
			}
		}
		for d := range shared {
			delete(c.owner, d)
		}
	}
	if c.snap == s && c.om == openMetrics && c.done != nil {
		return
	}
	c.snap, c.om = s, openMetrics
	c.done = map[int]time.Time{}
	c.text = map[*Def][]byte{}
}

// reusable reports whether collector i's families from the last run over
// the snapshot still hold at now.
func (c *textCache) reusable(i int, now time.Time) bool {
	until, ok := c.done[i]
	return ok && (until.IsZero() || !now.After(until))
}

// cacheable reports whether collector i's families may be kept: it is pure
// (or clock-bound) and owns every family it lists.
func (c *textCache) cacheable(x *Exporter, i int) bool {
	col := x.collectors[i]
	_, pure := col.(snapshotPure)
	_, bound := col.(clockBound)
	if !pure && !bound {
		return false
	}
	for _, d := range col.Defs() {
		if o, ok := c.owner[d]; !ok || o != i {
			return false
		}
	}
	return true
}

// keep records collector i's successful run: its families' text, once
// rendered, may be written again while the snapshot holds. A run that
// emitted a family it does not list is not kept.
func (c *textCache) keep(x *Exporter, i int, samples []sample, now time.Time) bool {
	for _, s := range samples {
		if o, ok := c.owner[s.def]; !ok || o != i {
			return false
		}
	}
	var until time.Time
	if b, ok := x.collectors[i].(clockBound); ok {
		until = b.stableUntil(c.snap, now)
	}
	c.done[i] = until
	return true
}

// store keeps a family's rendered text, clipped so that a caller appending
// to it cannot write into the cached bytes.
func (c *textCache) store(d *Def, text []byte) {
	c.text[d] = slices.Clip(text)
}
