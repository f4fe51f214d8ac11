package engine

// Rows: the families of one object each (a claim's, a device's, a pod's
// series) kept as rendered lines between scrapes. Index records are
// immutable (an update replaces the record), so a row whose inputs are the
// same records and values as last time has the same series: only the rows
// of changed objects are rendered, and a family's text is the merge of the
// kept lines, still in order, with the new ones. This is what makes a
// scrape after a change cost the change, for the families that are most of
// the exposition; the other collectors render whole (textcache.go).

import (
	"bytes"
	"cmp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// RowCollector is a pure collector whose series come in rows, one per
// object. Update must emit exactly what EachRow emits.
type RowCollector interface {
	Collector
	// EachRow calls rows.Visit once per row of s with the row's key
	// (unique within the collector and comparable: the object's record,
	// which an update replaces) and its other inputs (comparable values:
	// the other records and computed values the row's series are a
	// function of; the slice is read during the call only). Visit returns
	// nil when the row is unchanged, else the emitter its series go to.
	// Before it computes a row's inputs, EachRow may ask rows.Kept(key),
	// which is true when the row is known unchanged from its key alone:
	// it then skips the row. Every series of a row carries labels that
	// tell it from any other row's, so two rows never emit the same label
	// set.
	EachRow(s *index.Snapshot, rows *RowPass)
	// InputKinds are the kinds of objects the rows' inputs derive from:
	// while none of them changed, a row with the same key has the same
	// inputs.
	InputKinds() index.Kinds
}

// UpdateRows is Update for a row collector: every row into one emitter.
func UpdateRows(c RowCollector, s *index.Snapshot, e *family.Emitter) {
	c.EachRow(s, &RowPass{all: e})
}

// RowPass is one pass of a row collector over a snapshot: into one
// emitter (all), or against a row cache.
type RowPass struct {
	all *family.Emitter

	rc *rowCache
	x  *Exporter
	// keyOnly is set when the inputs' kinds did not change since the
	// last pass: a row whose key is there is unchanged.
	keyOnly bool
	fresh   []freshRow
	// replaced are the rows a fresh one took the place of; seen counts the
	// rows found in the pass.
	replaced []*row
	seen     int
}

type freshRow struct {
	r *row
	e *family.Emitter
}

// Kept reports whether the row of that key is unchanged without looking at
// its inputs, and counts it as seen.
func (p *RowPass) Kept(key any) bool {
	if !p.keyOnly {
		return false
	}
	r := p.rc.rows[key]
	if r == nil || r.seen != p.rc.pass-1 {
		return false
	}
	r.seen = p.rc.pass
	p.seen++
	return true
}

// Visit returns nil when the row is unchanged (the same key, the same
// inputs), else the emitter for its series.
func (p *RowPass) Visit(key any, inputs []any) *family.Emitter {
	if p.all != nil {
		return p.all
	}
	pass := p.rc.pass
	if r := p.rc.rows[key]; r != nil && r.seen == pass-1 && slices.Equal(r.inputs, inputs) {
		r.seen = pass
		p.seen++
		return nil
	}
	if old := p.rc.rows[key]; old != nil {
		p.replaced = append(p.replaced, old)
	}
	r := &row{inputs: slices.Clone(inputs), seen: pass}
	p.rc.rows[key] = r
	p.seen++
	e := family.NewEmitter(p.x.shard)
	p.fresh = append(p.fresh, freshRow{r, e})
	return e
}

// row is one object's lines.
type row struct {
	inputs []any
	// seen is the render pass that last found the row in the snapshot; a
	// row not seen in the current pass is gone, and so are its lines.
	seen uint64
	// buf holds the row's lines, one after the other (the family lines
	// point into it): how its lines are found again when it goes.
	buf []byte
}

// line is one series of a row, rendered: name{labels} value\n. The lines of
// one row share a buffer, which goes when the row is replaced.
type line struct {
	text []byte
}

// rowCache is one row collector's rows and, per family, its lines sorted as
// the exposition writes them. A family's line slice is never written once
// handed out (a scrape may still be writing it): a pass that changes the
// family makes a new one.
type rowCache struct {
	pass  uint64
	rows  map[any]*row
	lines map[*family.Def]lineSeq
	// version is the snapshot's of the last pass.
	version index.Version
}

// render brings the cache to snapshot s and returns the lines of each
// family with series. A failure or a panic (in the collector or here)
// leaves the cache empty, so that the next pass renders every row again.
func (rc *rowCache) render(x *Exporter, c RowCollector, s *index.Snapshot) (_ map[*family.Def]lineSeq, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicError{value: r, stack: debug.Stack()}
		}
		if err != nil {
			*rc = rowCache{}
		}
	}()
	p := &RowPass{rc: rc, x: x}
	if rc.rows == nil {
		rc.rows, rc.lines = map[any]*row{}, map[*family.Def]lineSeq{}
	} else {
		p.keyOnly = s.Version().Unchanged(rc.version, c.InputKinds())
	}
	rc.pass++
	pass := rc.pass
	_, err = x.run(rowsOnly{c, func(s *index.Snapshot) { c.EachRow(s, p) }}, s, time.Time{})
	if err != nil {
		return nil, err
	}
	rc.version = s.Version()
	fresh := p.fresh
	// Rows not seen are gone; their lines and those of the replaced rows
	// are dropped (found by their labels: the family's lines are sorted),
	// the fresh rows' lines merged in.
	dropped := p.replaced
	if len(rc.rows) > p.seen {
		for key, r := range rc.rows {
			if r.seen != pass {
				delete(rc.rows, key)
				dropped = append(dropped, r)
			}
		}
	}
	count := map[*family.Def]int{}
	for _, f := range fresh {
		for _, sm := range f.e.Samples() {
			count[sm.Def]++
		}
	}
	added := make(map[*family.Def][]newLine, len(count))
	for d, n := range count {
		added[d] = make([]newLine, 0, n)
	}
	var ends []int
	var scratch []byte
	for _, f := range fresh {
		// Rendered into scratch, then kept at its size: a row holds
		// its bytes for as long as it lives.
		scratch = scratch[:0]
		ends = ends[:0]
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
	drops := rc.dropPositions(c, dropped)
	for _, d := range c.Defs() {
		if len(added[d]) == 0 && len(drops[d]) == 0 {
			continue // nothing changed: the same slice
		}
		if merged := rc.lines[d].update(drops[d], sortLines(d, added[d])); merged.Len() > 0 {
			rc.lines[d] = merged
		} else {
			delete(rc.lines, d)
		}
	}
	return rc.lines, nil
}

// dropPositions finds the lines of the dropped rows in their families:
// the positions of each family, sorted. A row's buffer may hold a line its
// family does not (a repeated label set, which the family writes once):
// only a line that is the row's own (the same bytes) is dropped.
func (rc *rowCache) dropPositions(c RowCollector, dropped []*row) map[*family.Def][]linePos {
	if len(dropped) == 0 {
		return nil
	}
	byName := map[string]*family.Def{}
	for _, d := range c.Defs() {
		byName[d.Name] = d
	}
	out := map[*family.Def][]linePos{}
	for _, r := range dropped {
		for text := r.buf; len(text) > 0; {
			n := bytes.IndexByte(text, '\n') + 1
			l := text[:n:n]
			text = text[n:]
			d := byName[string(l[:bytes.IndexAny(l, "{ ")])]
			lines := rc.lines[d]
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

// without returns a copy of lines without the positions drop (sorted), or
// lines itself when there are none.
func without(lines []line, drop []int) []line {
	if len(drop) == 0 {
		return lines
	}
	out := make([]line, 0, len(lines)-len(drop))
	start := 0
	for _, i := range drop {
		out = append(out, lines[start:i]...)
		start = i + 1
	}
	return append(out, lines[start:]...)
}

// rowsOnly runs a row pass through Exporter.run, for its panic recovery.
type rowsOnly struct {
	RowCollector
	pass func(s *index.Snapshot)
}

func (r rowsOnly) Update(s *index.Snapshot, _ time.Time, _ *family.Emitter) error {
	r.pass(s)
	return nil
}

// compareLines orders two lines of one family by their label values in
// the family's label order (the order the line is written in), as Gather
// sorts series: the values are read back from the text, unescaped.
func compareLines(a, b line) int {
	x, y := a.text, b.text
	i := bytes.IndexByte(x, '{')
	if i < 0 {
		return 0 // no labels: one series
	}
	j := i
	for {
		// At a label's name, the same in both: skip to its value.
		i += bytes.Index(x[i:], []byte(`="`)) + 2
		j += bytes.Index(y[j:], []byte(`="`)) + 2
		for {
			cx, nx, endx := valueByte(x, i)
			cy, ny, endy := valueByte(y, j)
			switch {
			case endx && endy:
			case endx:
				return -1
			case endy:
				return 1
			case cx != cy:
				return cmp.Compare(cx, cy)
			default:
				i, j = nx, ny
				continue
			}
			i, j = nx, ny
			break
		}
		// After the closing quote: a comma and the next label, or the end.
		if x[i] != ',' {
			return 0
		}
		i++
		j++
	}
}

// valueByte reads one unescaped byte of a label value at text[i]: the byte,
// the position after it, and whether the value ended there (its closing
// quote; the position is then after the quote).
func valueByte(text []byte, i int) (byte, int, bool) {
	switch c := text[i]; c {
	case '"':
		return 0, i + 1, true
	case '\\':
		if text[i+1] == 'n' {
			return '\n', i + 2, false
		}
		return text[i+1], i + 2, false
	default:
		return c, i + 1, false
	}
}

// newLine is a line rendered in this pass, with its label values.
type newLine struct {
	line
	lvs []string
}

// sortLines sorts new lines by label values; a repeated label set (of one
// row: rows never share one) keeps its first series, as Gather does.
func sortLines(d *family.Def, ls []newLine) []line {
	if len(ls) == 0 {
		return nil
	}
	order := d.LabelOrder()
	compare := func(a, b []string) int {
		for _, i := range order {
			if c := strings.Compare(a[i], b[i]); c != 0 {
				return c
			}
		}
		return 0
	}
	// Positions sorted with the first label's value beside them: most
	// comparisons end there, without reaching into the lines.
	type keyed struct {
		first string
		pos   int32
	}
	keys := make([]keyed, len(ls))
	for i := range keys {
		keys[i].pos = int32(i)
		if len(order) > 0 {
			keys[i].first = ls[i].lvs[order[0]]
		}
	}
	slices.SortFunc(keys, func(a, b keyed) int {
		if c := strings.Compare(a.first, b.first); c != 0 {
			return c
		}
		if c := compare(ls[a.pos].lvs, ls[b.pos].lvs); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	out := make([]line, 0, len(ls))
	for k, key := range keys {
		if k > 0 && key.first == keys[k-1].first && compare(ls[key.pos].lvs, ls[keys[k-1].pos].lvs) == 0 {
			continue
		}
		out = append(out, ls[key.pos].line)
	}
	return out
}

// mergeLines merges two sorted runs of lines; a is not written. Each line
// of b (the few that changed) finds its place in a by binary search, and
// the runs of a between are copied whole.
func mergeLines(a, b []line) []line {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]line, 0, len(a)+len(b))
	for _, l := range b {
		// The first line of a after l (rows never share a label set).
		n, _ := slices.BinarySearchFunc(a, l, compareLines)
		out = append(out, a[:n]...)
		out = append(out, l)
		a = a[n:]
	}
	return append(out, a...)
}
