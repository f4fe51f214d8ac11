package engine

// The row store: every row collector's series kept as rendered rows, one
// row per object, between scrapes. A row is keyed on its object: an index
// record (a claim, a device, a pod: an update replaces the record, so the
// same record is the same object as it was) or a value a memo hands out
// for what it derived from the snapshot (a verdict, a leak, a capacity
// count: the same value while it holds). A row whose key was in the last
// pass, and whose linked objects (Link, the fan-out table) are the same
// records, has the same series: only the rows of changed objects are
// rendered, and each family's lines are the kept ones with the dropped
// rows' taken out and the new ones merged in (lines.go). A scrape reads the
// rows of one snapshot: a pass brings a collector's rows to one snapshot
// whole, and is not kept when it fails.

import (
	"bytes"
	"cmp"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// RowCollector is a collector whose series come in rows, one per object.
// Update must emit what EachRow emits into one emitter (UpdateRows).
type RowCollector interface {
	Collector
	// EachRow calls rows.Row once per row of s with the row's key, and
	// writes the row's series to the emitter it returns (nil: the row is
	// kept, its series are those of the last pass). A key is comparable:
	// the object's record, or a value that says everything the row's
	// series show. A row reads its key and the objects its collector's
	// Links name, nothing else of the snapshot; rows of one collector
	// never write the same label set. A key repeated in a pass is one row
	// (its first).
	EachRow(s *index.Snapshot, now time.Time, rows *Rows)
}

// UpdateRows is Update for a row collector: every row into one emitter.
func UpdateRows(c RowCollector, s *index.Snapshot, now time.Time, e *family.Emitter) {
	c.EachRow(s, now, &Rows{all: e, keys: map[any]struct{}{}})
}

// TraceRows runs c's rows over s, each into an emitter of its own, calling
// row with each row's key before the collector renders it: for tests that
// watch what a row reads.
func TraceRows(c RowCollector, s *index.Snapshot, now time.Time, row func(key any)) {
	c.EachRow(s, now, &Rows{trace: row, keys: map[any]struct{}{}})
}

// Rows is one pass of a row collector over a snapshot: into one emitter
// (all), for a trace, or against the collector's rows in the store.
type Rows struct {
	all   *family.Emitter
	trace func(key any)
	keys  map[any]struct{} // the keys seen, without a store

	set *rowSet
	x   *Exporter
	s   *index.Snapshot
	// links are the collector's; linksChanged is set when a kind they
	// read changed since the last pass: a kept row's links are then
	// looked up and compared.
	links        []Link
	linksChanged bool
	scratch      []any
	// keyKinds are the kinds of the record keys found; derived is set
	// when a key is not an index record.
	keyKinds index.Kinds
	derived  bool
	fresh    []freshRow
	// replaced are the rows a fresh one took the place of; seen counts the
	// rows found in the pass.
	replaced []*row
	seen     int
}

type freshRow struct {
	r *row
	e *family.Emitter
}

// Row returns the emitter for the row of key, or nil when the row is kept
// from the last pass (or its key was already found in this one).
func (p *Rows) Row(key any) *family.Emitter {
	if p.set == nil {
		if _, dup := p.keys[key]; dup {
			return nil
		}
		p.keys[key] = struct{}{}
		if p.trace != nil {
			p.trace(key)
			return family.NewEmitter(shard.Shard{})
		}
		return p.all
	}
	if k, ok := index.KindsOfRecord(key); ok {
		p.keyKinds |= k
	} else {
		p.derived = true
	}
	set, pass := p.set, p.set.pass
	old := set.rows[key]
	if old != nil && old.seen == pass {
		return nil // a repeated key: its first row stands
	}
	var links []any
	if old != nil && old.seen == pass-1 {
		if !p.linksChanged {
			old.seen = pass
			p.seen++
			return nil
		}
		p.scratch = p.linksOf(key, p.scratch[:0])
		if slices.Equal(old.links, p.scratch) {
			old.seen = pass
			p.seen++
			return nil
		}
		p.replaced = append(p.replaced, old)
		links = slices.Clone(p.scratch)
	} else if len(p.links) > 0 {
		links = p.linksOf(key, nil)
	}
	r := &row{links: links, seen: pass}
	set.rows[key] = r
	p.seen++
	e := family.NewEmitter(p.x.shard)
	p.fresh = append(p.fresh, freshRow{r, e})
	return e
}

func (p *Rows) linksOf(key any, out []any) []any {
	for _, l := range p.links {
		out = l.Of(p.s, key, out)
	}
	return out
}

// row is one object's lines.
type row struct {
	links []any
	// seen is the pass that last found the row in the snapshot; a row not
	// seen in the current pass is gone, and so are its lines.
	seen uint64
	// buf holds the row's lines, one after the other (the family lines
	// point into it): how its lines are found again when it goes.
	buf []byte
}

// rowSet is one row collector's rows and, per family, its lines sorted as
// the exposition writes them. A family's lines are never written once
// handed out (a scrape may still be writing them): a pass that changes the
// family makes a new lineSeq.
type rowSet struct {
	pass  uint64
	rows  map[any]*row
	lines map[*family.Def]lineSeq
	// version is the snapshot's of the last pass, reads the kinds its rows
	// were keyed on and linked to (AllKinds when a key was no record), and
	// until the time its rows hold to (ClockBound; zero: no deadline).
	version index.Version
	reads   index.Kinds
	until   time.Time
	// keyKinds are the kinds the last full pass's keys were records of
	// (zero when one was no record).
	keyKinds index.Kinds
}

// current reports whether the last pass's rows hold for s at now: nothing
// the rows are keyed on or linked to changed, and no deadline passed.
func (set *rowSet) current(s *index.Snapshot, now time.Time) bool {
	return set.rows != nil && s.Version().Unchanged(set.version, set.reads) && (set.until.IsZero() || !now.After(set.until))
}

// render brings the rows to snapshot s at now. A failure or a panic (in the
// collector or here) leaves the set empty, so that the next pass renders
// every row again.
func (set *rowSet) render(x *Exporter, c RowCollector, s *index.Snapshot, now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError{value: r, stack: debug.Stack()}
		}
		if err != nil {
			*set = rowSet{}
		}
	}()
	if set.current(s, now) {
		return nil
	}
	if pc, ok := c.(Partial); ok {
		if objs, gone, ok := set.changed(s); ok {
			return set.renderSome(x, c, pc, s, now, objs, gone)
		}
		if keys, ok := set.linkedChanged(s, LinksOf(c)); ok {
			return set.renderLinked(x, c, pc, s, now, keys)
		}
	}
	p := &Rows{set: set, x: x, s: s, links: LinksOf(c)}
	var linkKinds index.Kinds
	for _, l := range p.links {
		linkKinds |= l.Kinds
	}
	if set.rows == nil {
		set.rows, set.lines = map[any]*row{}, map[*family.Def]lineSeq{}
	}
	p.linksChanged = !s.Version().Unchanged(set.version, linkKinds)
	set.pass++
	pass := set.pass
	if _, err := x.run(rowsOnly{c, func(s *index.Snapshot, now time.Time) { c.EachRow(s, now, p) }}, s, now); err != nil {
		return err
	}
	set.version, set.reads, set.keyKinds, set.until = s.Version(), p.keyKinds|linkKinds, p.keyKinds, time.Time{}
	if p.derived || p.seen == 0 {
		set.reads, set.keyKinds = index.AllKinds, 0
	}
	if b, ok := c.(ClockBound); ok {
		set.until = b.StableUntil(s, now)
	}
	// Rows not seen are gone; their lines and those of the replaced rows
	// are dropped (found by their labels: the family's lines are sorted),
	// the fresh rows' lines merged in.
	dropped := p.replaced
	if len(set.rows) > p.seen {
		for key, r := range set.rows {
			if r.seen != pass {
				delete(set.rows, key)
				dropped = append(dropped, r)
			}
		}
	}
	return set.apply(c.Defs(), p.fresh, dropped)
}

// apply renders the fresh rows and takes the dropped rows' lines out of
// the families.
func (set *rowSet) apply(defs []*family.Def, fresh []freshRow, dropped []*row) error {
	added, err := renderRows(fresh, defs)
	if err != nil {
		return err
	}
	drops := set.dropPositions(defs, dropped)
	for _, d := range defs {
		if len(added[d]) == 0 && len(drops[d]) == 0 {
			continue // nothing changed: the same lines
		}
		if merged := set.lines[d].update(drops[d], sortLines(d, added[d])); merged.Len() > 0 {
			set.lines[d] = merged
		} else {
			delete(set.lines, d)
		}
	}
	return nil
}

// renderRows renders the fresh rows' series: each row's lines in one
// buffer of its own, and per family the new lines with their label values.
// A series of a family the collector does not list fails the pass.
func renderRows(fresh []freshRow, defs []*family.Def) (map[*family.Def][]newLine, error) {
	count := map[*family.Def]int{}
	for _, f := range fresh {
		for _, sm := range f.e.Samples() {
			count[sm.Def]++
		}
	}
	added := make(map[*family.Def][]newLine, len(count))
	for d, n := range count {
		if !slices.Contains(defs, d) {
			return nil, fmt.Errorf("emitted %s, a family the collector does not list", d.Name)
		}
		added[d] = make([]newLine, 0, n)
	}
	var ends []int
	var scratch []byte
	for _, f := range fresh {
		// Rendered into scratch, then kept at its size: a row holds its
		// bytes for as long as it lives.
		scratch, ends = scratch[:0], ends[:0]
		for _, sm := range f.e.Samples() {
			scratch = sm.Def.AppendLine(scratch, sm)
			ends = append(ends, len(scratch))
		}
		buf := bytes.Clone(scratch)
		f.r.buf = buf
		start := 0
		for k, sm := range f.e.Samples() {
			added[sm.Def] = append(added[sm.Def], newLine{line{text: buf[start:ends[k]:ends[k]]}, sm.LabelValues})
			start = ends[k]
		}
	}
	return added, nil
}

// dropPositions finds the lines of the dropped rows in their families:
// the positions of each family, sorted. A row's buffer may hold a line its
// family does not (a repeated label set, which the family writes once):
// only a line that is the row's own (the same bytes) is dropped.
func (set *rowSet) dropPositions(defs []*family.Def, dropped []*row) map[*family.Def][]linePos {
	if len(dropped) == 0 {
		return nil
	}
	byName := map[string]*family.Def{}
	for _, d := range defs {
		byName[d.Name] = d
	}
	out := map[*family.Def][]linePos{}
	for _, r := range dropped {
		for text := r.buf; len(text) > 0; {
			n := bytes.IndexByte(text, '\n') + 1
			l := text[:n:n]
			text = text[n:]
			d := byName[string(l[:bytes.IndexAny(l, "{ ")])]
			lines := set.lines[d]
			if p, ok := lines.find(line{l}); ok && &lines.chunks[p.chunk][p.i].text[0] == &l[0] {
				out[d] = append(out[d], p)
			}
		}
	}
	for _, pos := range out {
		slices.SortFunc(pos, func(a, b linePos) int {
			if c := cmp.Compare(a.chunk, b.chunk); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
	}
	return out
}

// rowsOnly runs a row pass through Exporter.run, for its panic recovery.
type rowsOnly struct {
	RowCollector
	pass func(s *index.Snapshot, now time.Time)
}

func (r rowsOnly) Update(s *index.Snapshot, now time.Time, _ *family.Emitter) error {
	r.pass(s, now)
	return nil
}
