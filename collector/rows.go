package collector

// Rows: the families of one object each (a claim's, a device's, a pod's
// series) kept as rendered lines between scrapes. Index records are
// immutable (an update replaces the record), so a row whose inputs are the
// same records and values as last time has the same series: only the rows
// of changed objects are rendered, and a family's text is the merge of the
// kept lines, still in order, with the new ones. This is what makes a
// scrape after a change cost the change, for the families that are most of
// the exposition; the other collectors render whole (textcache.go).

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// rowCollector is a pure collector whose series come in rows, one per
// object. Update must emit exactly what eachRow emits.
type rowCollector interface {
	Collector
	// eachRow calls visit once per row of s with the row's key (unique
	// within the collector; comparable) and its inputs (comparable values:
	// the records and computed values the row's series are a function of;
	// the slice is read during the call only). visit returns nil when the
	// row is unchanged, else the emitter its series go to. Every series
	// of a row carries labels that tell it from any other row's, so two
	// rows never emit the same label set.
	eachRow(s *index.Snapshot, visit func(key any, inputs []any) *emitter)
}

// updateRows is Update for a row collector: every row into one emitter.
func updateRows(c rowCollector, s *index.Snapshot, e *emitter) {
	c.eachRow(s, func(any, []any) *emitter { return e })
}

// row is one object's lines.
type row struct {
	inputs []any
	// seen is the render pass that last found the row in the snapshot; a
	// row not seen in the current pass is gone, and so are its lines.
	seen uint64
}

// line is one series of a row, rendered.
type line struct {
	lvs  []string // label values, in the family's label order
	text []byte   // name{labels} value\n
	row  *row
}

// rowCache is one row collector's rows and, per family, its lines sorted as
// the exposition writes them.
type rowCache struct {
	pass  uint64
	rows  map[any]*row
	lines map[*Def][]line
}

// render brings the cache to snapshot s and returns the text of each
// family with series. A panic in the collector leaves the cache empty, so
// that the next pass renders every row again.
func (rc *rowCache) render(x *Exporter, c rowCollector, s *index.Snapshot, openMetrics bool) (out map[*Def][]byte, err error) {
	defer func() {
		if err != nil {
			*rc = rowCache{}
		}
	}()
	if rc.rows == nil {
		rc.rows, rc.lines = map[any]*row{}, map[*Def][]line{}
	}
	rc.pass++
	pass := rc.pass
	type changed struct {
		r *row
		e *emitter
	}
	var fresh []changed
	_, err = x.run(rowsOnly{c, func(s *index.Snapshot) {
		c.eachRow(s, func(key any, inputs []any) *emitter {
			if r := rc.rows[key]; r != nil && slices.Equal(r.inputs, inputs) && r.seen == pass-1 {
				r.seen = pass
				return nil
			}
			r := &row{inputs: slices.Clone(inputs), seen: pass}
			rc.rows[key] = r
			e := &emitter{shard: x.shard}
			fresh = append(fresh, changed{r, e})
			return e
		})
	}}, s, time.Time{})
	if err != nil {
		return nil, err
	}
	for key, r := range rc.rows {
		if r.seen != pass {
			delete(rc.rows, key)
		}
	}
	added := map[*Def][]line{}
	for _, f := range fresh {
		for _, sm := range f.e.samples {
			added[sm.def] = append(added[sm.def], line{lvs: ordered(sm.def, sm.lvs), text: sm.def.appendLine(nil, sm, openMetrics), row: f.r})
		}
	}
	out = map[*Def][]byte{}
	for _, d := range c.Defs() {
		// The lines of rows still here, in place: their order holds.
		kept := rc.lines[d]
		live := kept[:0]
		for _, l := range kept {
			if l.row.seen == pass {
				live = append(live, l)
			}
		}
		clear(kept[len(live):]) // let the rows that went be collected
		merged := mergeLines(live, sortLines(added[d]))
		if len(merged) == 0 {
			delete(rc.lines, d)
			continue
		}
		text := d.appendHeader(nil, openMetrics)
		size := len(text)
		for _, l := range merged {
			size += len(l.text)
		}
		text = slices.Grow(text, size-len(text))
		for i := range merged {
			start := len(text)
			text = append(text, merged[i].text...)
			// The line now points into the family's text, so the buffer
			// it was rendered into can go.
			merged[i].text = text[start:len(text):len(text)]
		}
		rc.lines[d] = merged
		out[d] = text
	}
	return out, nil
}

// rowsOnly runs a row pass through Exporter.run, for its panic recovery.
type rowsOnly struct {
	rowCollector
	pass func(s *index.Snapshot)
}

func (r rowsOnly) Update(s *index.Snapshot, _ time.Time, _ *emitter) error {
	r.pass(s)
	return nil
}

// ordered returns the label values in the family's label order.
func ordered(d *Def, lvs []string) []string {
	out := make([]string, len(lvs))
	for j, i := range d.labelOrder() {
		out[j] = lvs[i]
	}
	return out
}

func compareLines(a, b line) int {
	for i := range a.lvs {
		if c := strings.Compare(a.lvs[i], b.lvs[i]); c != 0 {
			return c
		}
	}
	return 0
}

// sortLines sorts new lines by label values; a repeated label set (of one
// row: rows never share one) keeps its first series, as Gather does.
func sortLines(ls []line) []line {
	if len(ls) == 0 {
		return nil
	}
	pos := make([]int32, len(ls))
	for i := range pos {
		pos[i] = int32(i)
	}
	slices.SortFunc(pos, func(a, b int32) int {
		if c := compareLines(ls[a], ls[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make([]line, 0, len(ls))
	for k, p := range pos {
		if k > 0 && compareLines(ls[p], ls[pos[k-1]]) == 0 {
			continue
		}
		out = append(out, ls[p])
	}
	return out
}

// mergeLines merges two sorted runs of lines into a new slice.
func mergeLines(a, b []line) []line {
	if len(b) == 0 {
		return a
	}
	out := make([]line, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if compareLines(b[j], a[i]) < 0 {
			out = append(out, b[j])
			j++
		} else {
			out = append(out, a[i])
			i++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
