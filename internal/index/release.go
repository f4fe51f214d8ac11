package index

// Release latency: from a claim's pod ending to its allocation cleared.

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func (t *latencyTracker) releaseOnClaimChange(old, c *Claim, now time.Time, arr arrival) {
	if arr == arrivedLate {
		// Let go while the exporter was not watching: the API records
		// no time for it.
		t.forgetRelease(old, c)
		return
	}
	var removed []types.UID
	for _, r := range old.Obj.Status.ReservedFor {
		if c == nil || !c.ReservedFor(r.UID) {
			removed = append(removed, r.UID)
		}
	}
	deallocated := old.Allocated() && (c == nil || !c.Allocated())
	if len(removed) == 0 && !deallocated {
		return
	}
	rel := t.release(old, now)
	for _, uid := range removed {
		if _, ok := rel.unreserved[uid]; !ok {
			rel.unreserved[uid] = now
		}
	}
	if len(removed) > 0 && (c == nil || len(c.Obj.Status.ReservedFor) == 0) {
		rel.lastPods = removed
	}
	if deallocated {
		rel.deallocated = now
	}
	t.pairRelease(old.UID, rel)
}

// forgetRelease drops what was waiting to be paired for a claim that let
// go of pods, or was deallocated, while the exporter was not watching.
func (t *latencyTracker) forgetRelease(old, c *Claim) {
	if c == nil || !c.Allocated() || len(c.Obj.Status.ReservedFor) == 0 {
		delete(t.releases, old.UID)
	}
}

func (t *latencyTracker) release(c *Claim, now time.Time) *claimRelease {
	rel := t.releases[c.UID]
	if rel == nil {
		rel = &claimRelease{
			classes:    c.Classes(),
			podEnds:    map[types.UID]time.Time{},
			unreserved: map[types.UID]time.Time{},
		}
		t.releases[c.UID] = rel
	}
	rel.touched = now
	return rel
}

// podEnded records the end of a pod for every claim reserved for it.
func (t *latencyTracker) podEnded(ix *Index, uid types.UID, now time.Time) {
	for _, key := range ix.claimsByReservedPod[uid] {
		if c := ix.claims[key]; c != nil {
			rel := t.release(c, now)
			if _, ok := rel.podEnds[uid]; !ok {
				rel.podEnds[uid] = now
			}
			t.pairRelease(c.UID, rel)
		}
	}
	// The claim may have let go of the pod before the pod's own end
	// reached us (two watch streams): the release took no time.
	for claimUID, rel := range t.releases {
		if _, waiting := rel.unreserved[uid]; waiting {
			if _, ok := rel.podEnds[uid]; !ok {
				rel.podEnds[uid] = now
				rel.touched = now
				t.pairRelease(claimUID, rel)
			}
		}
	}
}

// pairRelease observes every release whose two halves are known.
func (t *latencyTracker) pairRelease(claimUID types.UID, rel *claimRelease) {
	for uid, unreservedAt := range rel.unreserved {
		end, ok := rel.podEnds[uid]
		if !ok {
			continue
		}
		for _, class := range rel.classes {
			t.obs.ObserveRelease(class, StageUnreserved, max(unreservedAt.Sub(end), 0))
		}
		delete(rel.unreserved, uid)
		if !slices.Contains(rel.lastPods, uid) {
			delete(rel.podEnds, uid) // deallocation is not timed from this pod
		}
	}
	if !rel.deallocated.IsZero() {
		if len(rel.lastPods) == 0 {
			// Deallocated without a pod ending (never reserved):
			// nothing to time.
			rel.deallocated = time.Time{}
		} else if end, ok := latestEnd(rel); ok {
			for _, class := range rel.classes {
				t.obs.ObserveRelease(class, StageDeallocated, max(rel.deallocated.Sub(end), 0))
			}
			rel.deallocated = time.Time{}
			for _, uid := range rel.lastPods {
				delete(rel.podEnds, uid)
			}
			rel.lastPods = nil
		}
	}
	// Done when no half waits for its other half.
	if len(rel.unreserved) == 0 && len(rel.podEnds) == 0 && rel.deallocated.IsZero() && len(rel.lastPods) == 0 {
		delete(t.releases, claimUID)
	}
}

func latestEnd(rel *claimRelease) (time.Time, bool) {
	var latest time.Time
	for _, uid := range rel.lastPods {
		end, ok := rel.podEnds[uid]
		if !ok {
			return time.Time{}, false
		}
		if end.After(latest) {
			latest = end
		}
	}
	return latest, true
}
