package engine

import (
	"slices"
	"sort"
)

// lineSeq is one family's series lines, sorted (compareLines), in chunks.
// A family's lines are never written once handed out (a scrape may still
// be writing them): a change makes a new lineSeq that shares every chunk it
// did not touch. A change of a few rows then copies a few chunks and the
// list of chunks, not every line of the family (at 100k claims a family's
// line list is 2.4 MB, and a claim's change touches six families, each
// dropped from and merged into).
type lineSeq struct {
	chunks [][]line
	n      int
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
		return lineSeq{chunks: split(add), n: len(add)}
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
	out := lineSeq{chunks: make([][]line, 0, len(s.chunks)+len(add)/chunkLines+1), n: s.n - len(drop) + len(add)}
	for c, chunk := range s.chunks {
		d, a := drops[c], adds[c]
		if len(d) == 0 && len(a) == 0 {
			out.chunks = append(out.chunks, chunk)
			continue
		}
		// A new slice: without copies when d has lines, mergeLines
		// when both runs have lines, and a alone is this pass's.
		next := mergeLines(without(chunk, d), a)
		if len(next) > 2*chunkLines {
			out.chunks = append(out.chunks, split(next)...)
		} else if len(next) > 0 {
			out.chunks = append(out.chunks, next)
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
