package index

// Pod startup latency: the stages a pod with DRA claims passes, each
// observed once.

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

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
