package engine

// What a row collector tells the store beyond its rows: the other objects
// its rows read (its entries of the fan-out table), whether it can render
// the rows of some objects alone, and the deadlines its rows hold to.

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Linked is a row collector whose rows read other objects than their key:
// Links are its entries of the fan-out table. A row collector that is not
// Linked has rows that read their key alone.
type Linked interface {
	Links() []Link
}

// LinksOf returns a row collector's links (none when it is not Linked).
func LinksOf(c Collector) []Link {
	if l, ok := c.(Linked); ok {
		return l.Links()
	}
	return nil
}

// Link is an entry of the fan-out table: the records a row of its
// collector reads beyond its key. A change of one of them (a new record)
// renders the row again.
type Link struct {
	// Name says which objects' change fans out to which rows, as "a
	// device's claims".
	Name string
	// Kinds are the kinds the linked records are of: while none of them
	// changed, the links of a kept row are not looked up again.
	Kinds index.Kinds
	// Of appends the records (or comparable values derived from them)
	// the row of key reads through the link; nil stands for a record
	// looked for and missing.
	Of func(s *index.Snapshot, key any, out []any) []any
	// Back, where the linked records are claims or pods, is Of turned
	// around: it appends the keys of the rows that read a claim or pod
	// record (old or new) through the link. With it, a change of claims
	// or pods alone renders those rows alone instead of looking up every
	// row's links (TestLinkBacksTurnOfAround holds it to Of).
	Back func(s *index.Snapshot, changed any, out []any) []any
}

// Partial is a row collector that can render the rows of some objects:
// RowsOf is EachRow over objs (records of s) alone. Its rows are one per
// claim, or one per pod, or read claims or pods only through links that
// turn around (Link.Back: RowsOf is then handed the keys Back names).
// While only such objects changed of what its rows read, the store takes
// them from the index's change sets (index.Snapshot.Changed) and hands it
// those alone, instead of a pass over every object.
type Partial interface {
	RowsOf(s *index.Snapshot, now time.Time, objs []any, rows *Rows)
}

// ClockBound is a row collector whose rows depend on the clock only
// through deadlines: over the same snapshot they stay the same until
// StableUntil (the zero time: until the snapshot changes).
type ClockBound interface {
	StableUntil(s *index.Snapshot, now time.Time) time.Time
}
