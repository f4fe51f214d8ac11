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
// allocated, unreserved claim passes its grace period, or a pod in deletion
// passes its deadline by it.
func (c leakCollector) stableUntil(s *index.Snapshot, now time.Time) time.Time {
	return classify.LeaksChangeAt(s, now, c.grace)
}

// reader is a pure collector that reads only some kinds of objects: its
// series stay the same while those kinds do not change, whatever else does
// (the claim collector does not read events). A pure collector that does
// not say reads everything.
type reader interface {
	reads() index.Kinds
}

func (claimCollector) reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindClaim)
}
func (conflictCollector) reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindPlacement)
}
func (*deviceCollector) reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindPlacement) // remaining capacity
}
func (deviceClassCollector) reads() index.Kinds {
	return capacityReads // free devices on unusable nodes
}
func (heldCollector) reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindClaim, index.KindPod)
}
func (laneCollector) reads() index.Kinds { return capacityReads }
func (*podCollector) reads() index.Kinds { return index.KindsOf(index.KindPod, index.KindClass) }
func (leakCollector) reads() index.Kinds {
	// a device's node; a deleted pod's containers stopping is a placement
	// change (index.KindPlacement)
	return index.DeviceKinds | index.KindsOf(index.KindPlacement)
}

// capacityReads are what the capacity families read: devices, nodes, and
// where claims and pods hold devices, not a pod's readiness or a driver's
// device status (index.KindPlacement).
const capacityReads = index.DeviceKinds | 1<<index.KindNode | 1<<index.KindPlacement

// reads returns the kinds collector c's series are derived from.
func reads(c Collector) index.Kinds {
	if r, ok := c.(reader); ok {
		return r.reads()
	}
	return index.AllKinds
}

// textCache is what TextFamilies rendered in the last scrapes, in the last
// format. A collector's families are written again, without running it,
// while none of the kinds of objects it reads changed since the snapshot
// it last ran over (an unchanged cluster hands out the same snapshot; a
// new Warning event re-renders only the collectors that read events). The
// leak collector's families are kept until a claim's grace period ends
// (clockBound); the timing families are rendered on every scrape.
type textCache struct {
	mu sync.Mutex
	// done holds the collectors whose last run succeeded and whose
	// families are all in text: the version of the snapshot it read and
	// the time until which it holds (zero: while the kinds it reads do not
	// change).
	done map[int]keptRun
	// text is the exposition of each family whose series all came from
	// such a run.
	text map[*Def][]byte
	// owner is, per family, the one collector that lists it (nil where two
	// do): only a family with a single owner is cached.
	owner map[*Def]int
	// rows are the row collectors' rendered rows (rows.go), and lines the
	// series of their families, whose text holds the HELP and TYPE only.
	rows  map[int]*rowCache
	lines map[*Def]lineSeq
}

// rowCache returns row collector i's rows, made the first time.
func (c *textCache) rowCache(i int) *rowCache {
	rc := c.rows[i]
	if rc == nil {
		rc = &rowCache{}
		c.rows[i] = rc
	}
	return rc
}

// keepRows keeps the lines row collector i rendered over s as its
// families' text, as a kept run.
func (c *textCache) keepRows(i int, lines map[*Def]lineSeq, s *index.Snapshot) {
	for d, ls := range lines {
		c.text[d] = d.appendHeader(nil)
		c.lines[d] = ls
	}
	c.done[i] = keptRun{version: s.Version()}
}

type keptRun struct {
	version index.Version
	until   time.Time
}

// reset makes the cache ready for its first use. It holds the text
// format: OpenMetrics is converted as it is written (Family), so that
// scrapes in both formats share it.
func (c *textCache) reset(x *Exporter) {
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
	if c.done != nil {
		return
	}
	c.done = map[int]keptRun{}
	c.text = map[*Def][]byte{}
	c.rows = map[int]*rowCache{}
	c.lines = map[*Def]lineSeq{}
}

// reusable reports whether collector i's families from its last run still
// hold for snapshot s at now. A collector that is not reusable runs, and
// its families are forgotten until that run is kept.
func (c *textCache) reusable(x *Exporter, i int, s *index.Snapshot, now time.Time) bool {
	r, ok := c.done[i]
	if ok && (r.until.IsZero() || !now.After(r.until)) && s.Version().Unchanged(r.version, reads(x.collectors[i])) {
		return true
	}
	delete(c.done, i)
	for _, d := range x.collectors[i].Defs() {
		if c.owner[d] == i {
			// A family the run leaves empty must not come back.
			delete(c.text, d)
			delete(c.lines, d)
		}
	}
	return false
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

// keep records collector i's successful run over s: its families' text,
// once rendered, may be written again while what it reads holds. A run
// that emitted a family it does not list is not kept.
func (c *textCache) keep(x *Exporter, i int, samples []sample, s *index.Snapshot, now time.Time) bool {
	for _, sm := range samples {
		if o, ok := c.owner[sm.def]; !ok || o != i {
			return false
		}
	}
	var until time.Time
	if b, ok := x.collectors[i].(clockBound); ok {
		until = b.stableUntil(s, now)
	}
	c.done[i] = keptRun{version: s.Version(), until: until}
	return true
}

// store keeps a family's rendered text, clipped so that a caller appending
// to it cannot write into the cached bytes.
func (c *textCache) store(d *Def, text []byte) {
	c.text[d] = slices.Clip(text)
}
