package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func seqLine(k int) line {
	return line{text: fmt.Appendf(nil, "m{a=\"k%06d\"} 1\n", k)}
}

func flatten(s lineSeq) []string {
	var out []string
	for _, c := range s.chunks {
		if len(c) == 0 {
			out = append(out, "<empty chunk>")
		}
		for _, l := range c {
			out = append(out, string(l.text))
		}
	}
	return out
}

// A lineSeq changed many times, by drops and adds spread over its chunks,
// holds the same lines in the same order as a plain sorted list would;
// chunks stay bounded and never empty, and an earlier sequence (a scrape
// still writing it) does not change.
func TestLineSeqMatchesASortedList(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	present := map[int]bool{}
	var seq lineSeq
	for round := range 300 {
		var drop []linePos
		var add []line
		dropped := map[int]bool{}
		// Drops: a few present keys, found as rows.go finds them.
		for k := range present {
			if rng.IntN(50) == 0 || (round%60 == 59 && rng.IntN(2) == 0) {
				p, ok := seq.find(seqLine(k))
				if !ok {
					t.Fatalf("round %d: present line %d not found", round, k)
				}
				drop = append(drop, p)
				dropped[k] = true
			}
		}
		slices.SortFunc(drop, func(a, b linePos) int {
			if a.chunk != b.chunk {
				return a.chunk - b.chunk
			}
			return a.i - b.i
		})
		// Adds: absent keys, anywhere (a burst in the first rounds).
		n := 40
		if round < 3 {
			n = 2000
		}
		for range n {
			k := rng.IntN(20000)
			if !present[k] && !slices.ContainsFunc(add, func(l line) bool { return string(l.text) == string(seqLine(k).text) }) {
				add = append(add, seqLine(k))
			}
		}
		slices.SortFunc(add, compareLines)

		before := flatten(seq)
		next := seq.update(drop, add)
		if got := flatten(seq); !slices.Equal(got, before) {
			t.Fatalf("round %d: update wrote the sequence it was given", round)
		}
		for k := range dropped {
			delete(present, k)
		}
		for _, l := range add {
			var k int
			fmt.Sscanf(string(l.text), "m{a=\"k%06d\"}", &k)
			present[k] = true
		}
		var want []string
		for _, k := range slices.Sorted(func(yield func(int) bool) {
			for k := range present {
				if !yield(k) {
					return
				}
			}
		}) {
			want = append(want, string(seqLine(k).text))
		}
		if got := flatten(next); !slices.Equal(got, want) {
			t.Fatalf("round %d: %d lines, want %d", round, len(got), len(want))
		}
		if next.Len() != len(want) {
			t.Fatalf("round %d: Len %d, want %d", round, next.Len(), len(want))
		}
		for _, c := range next.chunks {
			if len(c) > 2*chunkLines {
				t.Fatalf("round %d: a chunk of %d lines", round, len(c))
			}
		}
		seq = next
	}
	if len(seq.chunks) < 4 {
		t.Fatalf("%d chunks at the end: the test did not exercise chunking", len(seq.chunks))
	}
}

// A change of one line copies one chunk, not the family.
func TestLineSeqSharesUntouchedChunks(t *testing.T) {
	var lines []line
	for k := range 10 * chunkLines {
		lines = append(lines, seqLine(2*k))
	}
	seq := lineSeq{}.update(nil, lines)
	next := seq.update(nil, []line{seqLine(1)})
	shared := 0
	for c := range next.chunks {
		if c < len(seq.chunks) && &next.chunks[c][0] == &seq.chunks[c][0] {
			shared++
		}
	}
	if shared != len(seq.chunks)-1 {
		t.Errorf("%d of %d chunks shared after a one-line change", shared, len(seq.chunks))
	}
}
