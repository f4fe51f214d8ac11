package index

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Observer receives durations of lifecycle transitions the index saw happen
// live. It never receives a transition that happened before the index first
// saw the object, so a restart does not observe old objects again.
type Observer interface {
	// ObserveAllocation: claim created -> claim allocated.
	ObserveAllocation(deviceClass string, d time.Duration)
	// ObserveRelease: the end of a pod the claim was reserved for -> the
	// claim stops reserving it (stage "unreserved"), or -> the claim is
	// deallocated or deleted after its last pod ended ("deallocated").
	ObserveRelease(deviceClass, stage string, d time.Duration)
	// ObservePodStartup: pod created -> the stage.
	ObservePodStartup(lane, stage string, d time.Duration)
}

// Release stages.
const (
	StageUnreserved  = "unreserved"
	StageDeallocated = "deallocated"
)

// Pod startup stages, in the order a pod normally passes them.
const (
	StageClaimCreated = "claim_created"
	StageAllocated    = "allocated"
	StageBound        = "bound"
	StageStarted      = "started"
	StageReady        = "ready"
)

// StartupStages lists the startup stages in order.
var StartupStages = []string{StageClaimCreated, StageAllocated, StageBound, StageStarted, StageReady}

// pendingTTL bounds how long the tracker waits for the second half of a
// transition (a pod end whose claim never lets go is a leak, reported
// elsewhere, not a latency).
const pendingTTL = 15 * time.Minute

type latencyTracker struct {
	obs Observer
	// unallocatedSince: claims seen unallocated, with their start time.
	unallocatedSince map[types.UID]time.Time
	// startups: pods seen before they were ready.
	startups map[types.UID]*podStartup
	// releases: claims with a pod end or an unreservation not yet paired.
	releases  map[types.UID]*claimRelease
	lastSweep time.Time
}

type podStartup struct {
	key   Key
	start time.Time
	done  map[string]bool
}

type claimRelease struct {
	classes    []string
	podEnds    map[types.UID]time.Time
	unreserved map[types.UID]time.Time
	// lastPods are the pods the claim was reserved for when it became
	// unreserved; deallocation is timed from the latest of their ends.
	lastPods    []types.UID
	deallocated time.Time
	touched     time.Time
}

func newLatencyTracker(obs Observer) *latencyTracker {
	return &latencyTracker{
		obs:              obs,
		unallocatedSince: map[types.UID]time.Time{},
		startups:         map[types.UID]*podStartup{},
		releases:         map[types.UID]*claimRelease{},
	}
}

// claimChanged handles a claim added (old nil), updated, or deleted (c nil).
func (t *latencyTracker) claimChanged(ix *Index, old, c *Claim, now time.Time, live bool) {
	if t.obs == nil {
		return
	}
	t.sweep(now)
	switch {
	case c == nil:
		delete(t.unallocatedSince, old.UID)
	case !c.Allocated():
		if _, seen := t.unallocatedSince[c.UID]; !seen {
			t.unallocatedSince[c.UID] = startTime(c.Obj.CreationTimestamp.Time, now, live && old == nil)
		}
	default:
		if start, seen := t.unallocatedSince[c.UID]; seen {
			delete(t.unallocatedSince, c.UID)
			d := boundedDuration(now.Sub(start), c.AllocatedAt.Sub(c.Obj.CreationTimestamp.Time), !c.AllocatedAt.IsZero())
			for _, class := range c.AllocatedClasses() {
				t.obs.ObserveAllocation(class, d)
			}
		}
	}
	if old != nil {
		t.releaseOnClaimChange(old, c, now)
	}
	t.claimStartupStages(ix, c, now, live)
}

// startTime is when an object was created: the moment its creation reached
// us when that was live and prompt (millisecond precision), else its
// creationTimestamp (second precision). An add seen late (a relist after a
// watch outage) is not prompt.
func startTime(created, now time.Time, liveAdd bool) time.Time {
	if liveAdd && now.Sub(created) < 2*time.Second {
		return now
	}
	return created
}

// boundedDuration returns the observed duration, kept within the second
// of the API's own timestamps (which have second resolution) when the
// exporter saw the transition late.
func boundedDuration(observed, fromTimestamps time.Duration, haveTimestamps bool) time.Duration {
	if haveTimestamps {
		lo, hi := fromTimestamps-time.Second, fromTimestamps+time.Second
		observed = min(max(observed, lo), hi)
	}
	return max(observed, 0)
}

func (t *latencyTracker) releaseOnClaimChange(old, c *Claim, now time.Time) {
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

func (t *latencyTracker) sweep(now time.Time) {
	if now.Sub(t.lastSweep) < time.Minute {
		return
	}
	t.lastSweep = now
	for uid, rel := range t.releases {
		if now.Sub(rel.touched) > pendingTTL {
			delete(t.releases, uid)
		}
	}
}

// podChanged handles a pod added (old nil), updated, or deleted (p nil).
func (t *latencyTracker) podChanged(ix *Index, old, p *Pod, now time.Time, live bool) {
	if t.obs == nil {
		return
	}
	t.sweep(now)
	switch {
	case p == nil:
		delete(t.startups, old.UID)
		if !old.Terminal() {
			t.podEnded(ix, old.UID, now)
		}
		return
	case p.Terminal():
		delete(t.startups, p.UID)
		if live && (old == nil || !old.Terminal()) {
			t.podEnded(ix, p.UID, now)
		}
		return
	}
	st := t.startups[p.UID]
	if st == nil {
		if old != nil || p.Ready() || p.Obj.DeletionTimestamp != nil {
			return // only a pod's first start is timed
		}
		st = &podStartup{key: p.Key, start: startTime(p.Obj.CreationTimestamp.Time, now, live), done: map[string]bool{}}
		if !live {
			// Stages reached before we saw the pod are not observed.
			for _, stage := range ix.reachedStages(p) {
				st.done[stage] = true
			}
		}
		t.startups[p.UID] = st
	}
	t.observeStages(ix, p, st, now, live)
}

// claimStartupStages re-evaluates the pods a claim may belong to. A claim
// from an informer's initial list completes stages that were reached
// before we saw them: they are marked, not observed.
func (t *latencyTracker) claimStartupStages(ix *Index, c *Claim, now time.Time, live bool) {
	if len(t.startups) == 0 || c == nil {
		return
	}
	if c.OwnerPod != nil {
		if st := t.startups[c.OwnerPod.UID]; st != nil {
			if p := ix.pods[st.key]; p != nil {
				t.observeStages(ix, p, st, now, live)
			}
		}
		return
	}
	for _, st := range t.startups {
		if st.key.Namespace != c.Key.Namespace {
			continue
		}
		if p := ix.pods[st.key]; p != nil {
			t.observeStages(ix, p, st, now, live)
		}
	}
}

func (t *latencyTracker) observeStages(ix *Index, p *Pod, st *podStartup, now time.Time, live bool) {
	lane := ix.podLane(p)
	if lane == "" {
		return
	}
	for _, stage := range ix.reachedStages(p) {
		if st.done[stage] {
			continue
		}
		st.done[stage] = true
		if live {
			t.obs.ObservePodStartup(lane, stage, max(now.Sub(st.start), 0))
		}
	}
	if st.done[StageReady] {
		delete(t.startups, p.UID)
	}
}

// reachedStages returns the startup stages the pod has reached.
func (ix *Index) reachedStages(p *Pod) []string {
	var out []string
	lane := ix.podLane(p)
	if lane == LaneDRA || lane == LaneDRAExtended {
		claims := resolvePodClaims((*indexClaims)(ix), p)
		created, allocated := len(claims) > 0, len(claims) > 0
		for _, pc := range claims {
			created = created && pc.Claim != nil
			allocated = allocated && pc.Claim != nil && pc.Claim.Allocated()
		}
		if created {
			out = append(out, StageClaimCreated)
		}
		if allocated {
			out = append(out, StageAllocated)
		}
	}
	if p.Obj.Spec.NodeName != "" {
		out = append(out, StageBound)
	}
	if p.Started() {
		out = append(out, StageStarted)
	}
	if p.Ready() {
		out = append(out, StageReady)
	}
	return out
}
