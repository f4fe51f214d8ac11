package engine

// The partial passes of the row store: a collector whose rows read only
// claims or pods that changed is handed those alone (Partial), and the rows
// a changed claim or pod fans out to are found by the links turned around
// (Link.Back), instead of a pass over every object.

import (
	"slices"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// changed returns, when the rows are keyed on claims alone or on pods
// alone and nothing else they read changed since the last pass, the
// records of those written since (objs) and the records they replaced or
// that were deleted (gone), from the index's change sets; false when the
// rows must be brought to s by a whole pass.
func (set *rowSet) changed(s *index.Snapshot) (objs, gone []any, ok bool) {
	if set.rows == nil || !s.Version().Unchanged(set.version, set.reads&^set.keyKinds) {
		return nil, nil, false
	}
	claims, pods, ok := s.Changed(set.version)
	if !ok {
		return nil, nil, false
	}
	switch set.keyKinds {
	case index.KindsOf(index.KindClaim):
		for k, old := range claims {
			objs, gone = changedRecord(objs, gone, old, s.Claim(k))
		}
	case index.KindsOf(index.KindPod):
		for k, old := range pods {
			objs, gone = changedRecord(objs, gone, old, s.Pod(k))
		}
	default:
		return nil, nil, false
	}
	return objs, gone, true
}

// linkedChanged returns, when of what the rows read only claims or pods
// changed since the last pass, and only through links that can be turned
// around (Link.Back), the keys of the rows that read a changed record;
// false when the rows must be brought to s by a whole pass.
func (set *rowSet) linkedChanged(s *index.Snapshot, links []Link) (keys []any, ok bool) {
	const claimsAndPods = index.Kinds(1<<index.KindClaim | 1<<index.KindPod)
	if set.rows == nil || len(links) == 0 || set.keyKinds&claimsAndPods != 0 ||
		!s.Version().Unchanged(set.version, set.reads&^claimsAndPods) {
		return nil, false
	}
	for _, l := range links {
		if l.Kinds&^claimsAndPods != 0 || l.Back == nil {
			return nil, false
		}
	}
	claims, pods, ok := s.Changed(set.version)
	if !ok {
		return nil, false
	}
	// A changed object's new and old records, both: Back names the rows
	// that read either.
	var claimRecs, oldClaims, podRecs, oldPods []any
	for k, old := range claims {
		claimRecs, oldClaims = changedRecord(claimRecs, oldClaims, old, s.Claim(k))
	}
	for k, old := range pods {
		podRecs, oldPods = changedRecord(podRecs, oldPods, old, s.Pod(k))
	}
	claimRecs, podRecs = append(claimRecs, oldClaims...), append(podRecs, oldPods...)
	seen := map[any]bool{}
	for _, l := range links {
		var changed []any
		if l.Kinds&index.KindsOf(index.KindClaim) != 0 {
			changed = append(changed, claimRecs...)
		}
		if l.Kinds&index.KindsOf(index.KindPod) != 0 {
			changed = append(changed, podRecs...)
		}
		for _, rec := range changed {
			for _, key := range l.Back(s, rec, nil) {
				if seen[key] {
					continue
				}
				if set.rows[key] == nil {
					return nil, false // a key without a row: its collector decides anew
				}
				seen[key] = true
				keys = append(keys, key)
			}
		}
	}
	return keys, true
}

// renderLinked brings the rows to s by rendering again the rows of keys
// whose links changed: the rest are as they were.
func (set *rowSet) renderLinked(x *Exporter, c RowCollector, pc Partial, s *index.Snapshot, now time.Time, keys []any) error {
	p := &Rows{set: set, x: x, s: s, links: LinksOf(c)}
	var objs []any
	var dropped []*row
	for _, key := range keys {
		r := set.rows[key]
		if p.scratch = p.linksOf(key, p.scratch[:0]); slices.Equal(r.links, p.scratch) {
			continue
		}
		delete(set.rows, key)
		dropped = append(dropped, r)
		objs = append(objs, key)
	}
	if len(objs) > 0 {
		if _, err := x.run(rowsOnly{c, func(s *index.Snapshot, now time.Time) { pc.RowsOf(s, now, objs, p) }}, s, now); err != nil {
			return err
		}
	}
	set.version = s.Version()
	return set.apply(c.Defs(), p.fresh, append(p.replaced, dropped...))
}

// changedRecord adds a changed object's current record (nil: deleted) to
// objs and its old one (nil: new) to gone, unless they are the same.
func changedRecord[R any](objs, gone []any, old, cur *R) ([]any, []any) {
	if old == cur {
		return objs, gone
	}
	if old != nil {
		gone = append(gone, old)
	}
	if cur != nil {
		objs = append(objs, cur)
	}
	return objs, gone
}

// renderSome brings the rows to s by rendering the rows of objs alone and
// dropping those keyed on gone: the rest are as they were.
func (set *rowSet) renderSome(x *Exporter, c RowCollector, pc Partial, s *index.Snapshot, now time.Time, objs, gone []any) error {
	var dropped []*row
	for _, key := range gone {
		if r := set.rows[key]; r != nil {
			delete(set.rows, key)
			dropped = append(dropped, r)
		}
	}
	// The same pass: a fresh row is seen in it, as the kept ones were.
	p := &Rows{set: set, x: x, s: s, links: LinksOf(c)}
	if _, err := x.run(rowsOnly{c, func(s *index.Snapshot, now time.Time) { pc.RowsOf(s, now, objs, p) }}, s, now); err != nil {
		return err
	}
	set.version = s.Version()
	return set.apply(c.Defs(), p.fresh, append(p.replaced, dropped...))
}
