package engine

// The store's families: each family's lines kept sorted as the exposition
// writes them (as client_golang's Gather sorts series), so that a pass that
// changes a few rows copies a few chunks, not the family.

import (
	"bytes"
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/family"
)

// line is one series of a row, rendered: name{labels} value\n. The lines of
// one row share a buffer, which goes when the row is replaced.
type line struct {
	text []byte
}

// lineSeq is one family's series lines, sorted (compareLines), in chunks.
// A family's lines are never written once handed out (a scrape may still
// be writing them): a change makes a new lineSeq that shares every chunk it
// did not touch. A change of a few rows then copies a few chunks and the
// list of chunks, not every line of the family (at 100k claims a family's
// line list is 2.4 MB, and a claim's change touches six families, each
// dropped from and merged into).
type lineSeq struct {
	chunks [][]line
	// protos are the chunks' series in protobuf (proto.go), protos[c]
	// chunks[c]'s: encoded by the first protobuf scrape that writes the
	// chunk and shared by every scrape after it, concurrent ones included,
	// while the chunk is kept.
	protos []*chunkProto
	n      int
}

// newSeq makes a sequence of new chunks.
func newSeq(chunks [][]line, n int) lineSeq {
	s := lineSeq{chunks: chunks, n: n, protos: make([]*chunkProto, len(chunks))}
	for c := range s.protos {
		s.protos[c] = new(chunkProto)
	}
	return s
}

// chunkLines is the size of a chunk as a pass makes them; a chunk that
// grows past twice that is split, one left empty is dropped.
const chunkLines = 512

// linePos is a line's position: its chunk and its index in the chunk.
type linePos struct{ chunk, i int }

// all yields the lines in order.
func (s lineSeq) all(yield func(line) bool) {
	for _, chunk := range s.chunks {
		for _, l := range chunk {
			if !yield(l) {
				return
			}
		}
	}
}

// Len returns the number of lines.
func (s lineSeq) Len() int { return s.n }

// find returns the position of the line that compares equal to l.
func (s lineSeq) find(l line) (linePos, bool) {
	c := s.chunkFor(l)
	if c == len(s.chunks) {
		return linePos{}, false
	}
	i, ok := slices.BinarySearchFunc(s.chunks[c], l, compareLines)
	return linePos{c, i}, ok
}

// chunkFor returns the first chunk whose last line is not before l
// (len(s.chunks) when l is after every line).
func (s lineSeq) chunkFor(l line) int {
	return sort.Search(len(s.chunks), func(c int) bool {
		chunk := s.chunks[c]
		return compareLines(chunk[len(chunk)-1], l) >= 0
	})
}

// update returns the sequence without the lines at drop (sorted, each a
// line of s) and with add (sorted, no line comparing equal to one of s
// that stays) merged in. s is not written.
func (s lineSeq) update(drop []linePos, add []line) lineSeq {
	if len(drop) == 0 && len(add) == 0 {
		return s
	}
	if len(s.chunks) == 0 {
		return newSeq(split(add), len(add))
	}
	// The lines each touched chunk loses and gains. A line after every
	// line goes to the last chunk.
	drops := map[int][]int{}
	for _, p := range drop {
		drops[p.chunk] = append(drops[p.chunk], p.i)
	}
	adds := map[int][]line{}
	for _, l := range add {
		c := min(s.chunkFor(l), len(s.chunks)-1)
		adds[c] = append(adds[c], l)
	}
	size := len(s.chunks) + len(add)/chunkLines + 1
	out := lineSeq{chunks: make([][]line, 0, size), protos: make([]*chunkProto, 0, size), n: s.n - len(drop) + len(add)}
	for c, chunk := range s.chunks {
		d, a := drops[c], adds[c]
		if len(d) == 0 && len(a) == 0 {
			out.chunks = append(out.chunks, chunk)
			out.protos = append(out.protos, s.protos[c])
			continue
		}
		// A new slice: without copies when d has lines, mergeLines
		// when both runs have lines, and a alone is this pass's.
		next := mergeLines(without(chunk, d), a)
		var made [][]line
		if len(next) > 2*chunkLines {
			made = split(next)
		} else if len(next) > 0 {
			made = [][]line{next}
		}
		for _, m := range made {
			out.chunks = append(out.chunks, m)
			out.protos = append(out.protos, new(chunkProto))
		}
	}
	return out
}

// split cuts sorted lines into chunks of chunkLines, sharing their array.
func split(lines []line) [][]line {
	var out [][]line
	for len(lines) > 0 {
		n := min(chunkLines, len(lines))
		out = append(out, lines[:n:n])
		lines = lines[n:]
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
