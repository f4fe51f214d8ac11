package index

import (
	"time"

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
