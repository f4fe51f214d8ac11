package collector

import (
	"slices"
	"sync"

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

// textCache is what TextFamilies rendered from the last snapshot, in the
// last format. The index hands out the same snapshot while nothing changed
// (no informer event), so a scrape of an unchanged cluster writes the
// families of pure collectors from here; any change makes a new snapshot
// and everything is rendered again. The leak collector (it reads the
// clock) and the timing families are rendered on every scrape.
type textCache struct {
	mu   sync.Mutex
	snap *index.Snapshot
	om   bool
	// done holds the collectors whose last run over snap succeeded and
	// whose families are all in text.
	done map[int]bool
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
	c.done = map[int]bool{}
	c.text = map[*Def][]byte{}
}

// cacheable reports whether collector i's families may be kept: it is pure
// and owns every family it lists.
func (c *textCache) cacheable(x *Exporter, i int) bool {
	col := x.collectors[i]
	if _, ok := col.(snapshotPure); !ok {
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
func (c *textCache) keep(x *Exporter, i int, samples []sample) bool {
	for _, s := range samples {
		if o, ok := c.owner[s.def]; !ok || o != i {
			return false
		}
	}
	c.done[i] = true
	return true
}

// store keeps a family's rendered text, clipped so that a caller appending
// to it cannot write into the cached bytes.
func (c *textCache) store(d *Def, text []byte) {
	c.text[d] = slices.Clip(text)
}
