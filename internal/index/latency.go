package index

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Observer receives durations of lifecycle transitions. A transition the
// index saw happen is timed by its clock; one that happened while it was not
// watching (a relist after an outage, or before the initial list) is timed
// from the objects' own timestamps when they record it, and only when it
// happened after the index was created (Config.Started): a restart or a
// relist never observes a transition twice, nor one from before the process
// started. The metrics reference (collector's latency families) lists
// what can be recovered that way.
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

// arrival is how an object change reached the index.
type arrival uint8

const (
	// arrivedInitial: an informer's initial list, or a file.
	arrivedInitial arrival = iota
	// arrivedLive: a watch event, normally moments after the change.
	arrivedLive
	// arrivedLate: a relist after the watch was down; the change happened
	// at some unknown time before now.
	arrivedLate
)

// promptWindow is how close to an object's timestamp (second resolution) a
// live event must arrive to be timed by the clock (millisecond resolution)
// rather than by the timestamp.
const promptWindow = 2 * time.Second

// pendingTTL bounds how long the tracker waits for the second half of a
// transition (a pod end whose claim never lets go is a leak, reported
// elsewhere, not a latency).
const pendingTTL = 15 * time.Minute

type latencyTracker struct {
	obs Observer
	// started: transitions recovered from timestamps before this time
	// happened before the process and are not observed.
	started time.Time
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

func newLatencyTracker(obs Observer, started time.Time) *latencyTracker {
	return &latencyTracker{
		obs:              obs,
		started:          started,
		unallocatedSince: map[types.UID]time.Time{},
		startups:         map[types.UID]*podStartup{},
		releases:         map[types.UID]*claimRelease{},
	}
}

// claimChanged handles a claim added (old nil), updated, or deleted (c nil).
func (t *latencyTracker) claimChanged(ix *Index, old, c *Claim, now time.Time, arr arrival) {
	if t.obs == nil {
		return
	}
	t.sweep(now)
	switch {
	case c == nil:
		delete(t.unallocatedSince, old.UID)
	case !c.Allocated():
		if _, seen := t.unallocatedSince[c.UID]; !seen {
			t.unallocatedSince[c.UID] = startTime(c.Obj.CreationTimestamp.Time, now, arr == arrivedLive && old == nil)
		}
	default:
		created := c.Obj.CreationTimestamp.Time
		if start, seen := t.unallocatedSince[c.UID]; seen {
			delete(t.unallocatedSince, c.UID)
			if d, ok := transitionDuration(start, created, c.AllocatedAt, now, arr); ok {
				t.observeAllocation(c, d)
			}
		} else if old == nil && t.recoverable(c.AllocatedAt) {
			// Created and allocated while the exporter was not watching
			// (first seen allocated): timed from the timestamps, once.
			t.observeAllocation(c, max(c.AllocatedAt.Sub(created), 0))
		}
	}
	if old != nil {
		t.releaseOnClaimChange(old, c, now, arr)
	}
	t.claimStartupStages(ix, c, now, arr)
}

func (t *latencyTracker) observeAllocation(c *Claim, d time.Duration) {
	for _, class := range c.AllocatedClasses() {
		t.obs.ObserveAllocation(class, d)
	}
}

// recoverable reports whether a transition recorded at ts, which the
// exporter did not see happen, is observed: it happened after the process
// started.
func (t *latencyTracker) recoverable(ts time.Time) bool {
	return !ts.IsZero() && !ts.Before(t.started)
}

// transitionDuration times a transition from start (when the exporter saw
// the object begin, or its creation) to a stage the object reached at
// stageAt by its own timestamp (zero: not recorded). A change that arrives
// live within promptWindow of its timestamp, or live without one, is timed
// by the clock (bounded by the timestamps); any other by the timestamps
// alone, from created. A late change without a timestamp is not timed.
func transitionDuration(start, created, stageAt, now time.Time, arr arrival) (time.Duration, bool) {
	stamped := !stageAt.IsZero()
	switch {
	case arr == arrivedLive && (!stamped || now.Sub(stageAt) < promptWindow):
		return boundedDuration(now.Sub(start), stageAt.Sub(created), stamped), true
	case stamped:
		return max(stageAt.Sub(created), 0), true
	}
	return 0, false
}

// startTime is when an object was created: the moment its creation reached
// us when that was live and prompt (millisecond precision), else its
// creationTimestamp (second precision). An add seen late (a relist after a
// watch outage) is not prompt.
func startTime(created, now time.Time, liveAdd bool) time.Time {
	if liveAdd && now.Sub(created) < promptWindow {
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
func (t *latencyTracker) podChanged(ix *Index, old, p *Pod, now time.Time, arr arrival) {
	if t.obs == nil {
		return
	}
	t.sweep(now)
	switch {
	case p == nil:
		delete(t.startups, old.UID)
		if !old.Terminal() && arr != arrivedLate {
			t.podEnded(ix, old.UID, now)
		}
		return
	case p.Terminal():
		delete(t.startups, p.UID)
		if arr == arrivedLive && (old == nil || !old.Terminal()) {
			t.podEnded(ix, p.UID, now)
		}
		return
	}
	st := t.startups[p.UID]
	if st == nil {
		if old != nil || p.Obj.DeletionTimestamp != nil {
			return // only a pod's first start is timed
		}
		st = &podStartup{key: p.Key, start: startTime(p.Obj.CreationTimestamp.Time, now, arr == arrivedLive), done: map[string]bool{}}
		t.startups[p.UID] = st
		// The stages it reached before the exporter saw it are known
		// only from their timestamps.
		t.observeStages(ix, p, st, now, arrivedLate)
		return
	}
	t.observeStages(ix, p, st, now, arr)
}

// claimStartupStages re-evaluates the pods a claim may belong to. A claim
// from an informer's initial list or a relist completes stages that were
// reached before we saw them: they are observed from their timestamps, when
// they have one and it is after the process started.
func (t *latencyTracker) claimStartupStages(ix *Index, c *Claim, now time.Time, arr arrival) {
	if len(t.startups) == 0 || c == nil {
		return
	}
	if c.OwnerPod != nil {
		if st := t.startups[c.OwnerPod.UID]; st != nil {
			if p := ix.pods[st.key]; p != nil {
				t.observeStages(ix, p, st, now, arr)
			}
		}
		return
	}
	for _, st := range t.startups {
		if st.key.Namespace != c.Key.Namespace {
			continue
		}
		if p := ix.pods[st.key]; p != nil {
			t.observeStages(ix, p, st, now, arr)
		}
	}
}

// observeStages observes the stages the pod reached since the last call:
// by the clock when the change arrived live and prompt, else from the
// stage's timestamp when it is after the process started (a stage reached
// earlier, or without a timestamp, is marked and not observed).
func (t *latencyTracker) observeStages(ix *Index, p *Pod, st *podStartup, now time.Time, arr arrival) {
	lane := ix.podLane(p)
	if lane == "" {
		return
	}
	created := p.Obj.CreationTimestamp.Time
	for _, stage := range ix.reachedStages(p) {
		if st.done[stage] {
			continue
		}
		st.done[stage] = true
		at := ix.stageTime(p, stage)
		if !at.IsZero() {
			at = maxTime(at, created) // a claim made before its pod
		}
		if arr != arrivedLive && !t.recoverable(at) {
			continue
		}
		if d, ok := transitionDuration(st.start, created, at, now, arr); ok {
			t.obs.ObservePodStartup(lane, stage, d)
		}
	}
	if st.done[StageReady] && (lane != LaneDRA && lane != LaneDRAExtended || st.done[StageAllocated]) {
		delete(t.startups, p.UID)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stageTime returns when the pod reached a stage by the timestamps of the
// pod and its claims, or the zero time when they do not record it.
func (ix *Index) stageTime(p *Pod, stage string) time.Time {
	var at time.Time
	switch stage {
	case StageClaimCreated, StageAllocated:
		for _, pc := range resolvePodClaims((*indexClaims)(ix), p) {
			if pc.Claim == nil {
				return time.Time{}
			}
			ts := pc.Claim.Obj.CreationTimestamp.Time
			if stage == StageAllocated {
				ts = pc.Claim.AllocatedAt
			}
			if ts.IsZero() {
				return time.Time{}
			}
			at = maxTime(at, ts)
		}
	case StageBound, StageReady:
		want := corev1.PodScheduled
		if stage == StageReady {
			want = corev1.PodReady
		}
		for _, c := range p.Obj.Status.Conditions {
			if c.Type == want && c.Status == corev1.ConditionTrue {
				at = c.LastTransitionTime.Time
			}
		}
	case StageStarted:
		for _, statuses := range [][]corev1.ContainerStatus{p.Obj.Status.InitContainerStatuses, p.Obj.Status.ContainerStatuses} {
			for _, cs := range statuses {
				for _, ts := range []time.Time{runningSince(cs.State), runningSince(cs.LastTerminationState)} {
					if !ts.IsZero() && (at.IsZero() || ts.Before(at)) {
						at = ts
					}
				}
			}
		}
	}
	return at
}

// runningSince is when a container in that state started running.
func runningSince(s corev1.ContainerState) time.Time {
	switch {
	case s.Running != nil:
		return s.Running.StartedAt.Time
	case s.Terminated != nil:
		return s.Terminated.StartedAt.Time
	}
	return time.Time{}
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
