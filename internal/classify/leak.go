package classify

import (
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// LeakReason says why a reservation or allocation is considered leaked.
type LeakReason string

// The leak reasons.
const (
	// LeakPodMissing: status.reservedFor names a pod that does not exist.
	LeakPodMissing LeakReason = "pod_missing"
	// LeakPodFinished: status.reservedFor names a pod that has finished
	// (kubernetes#141274 re-adds terminal pods).
	LeakPodFinished LeakReason = "pod_finished"
	// LeakPodRecreated: status.reservedFor names a pod whose name now
	// belongs to a pod with another UID.
	LeakPodRecreated LeakReason = "pod_recreated"
	// LeakOwnerMissing: a claim generated for a pod outlives the pod.
	LeakOwnerMissing LeakReason = "owner_missing"
	// LeakUnreserved: an allocated claim has reserved nobody for longer
	// than the grace period: a GPU held for no pod.
	LeakUnreserved LeakReason = "allocated_unreserved"
	// LeakPodStuckTerminating: status.reservedFor names a bound pod whose
	// deletion deadline passed longer ago than the grace period, none of
	// whose containers runs: the kubelet cannot finish it, typically because
	// the driver's NodeUnprepareResources keeps failing (kubernetes#139772),
	// and the resourceclaim controller keeps the reservation until it is gone.
	LeakPodStuckTerminating LeakReason = "pod_stuck_terminating"
	// LeakNotEvicted: status.reservedFor names a running pod that holds a
	// device with a NoExecute taint its request does not tolerate, added
	// longer ago than the grace period. The device taint eviction
	// controller deletes such a pod within seconds. kubernetes#141290
	// reports it skipping a claim that maps an extended resource (seen on
	// 1.36.1, fixed for 1.38; the e2e harness's 1.37.2 evicts such a pod).
	LeakNotEvicted LeakReason = "noexecute_not_evicted"
)

// LeakReasons lists every leak reason.
var LeakReasons = []LeakReason{LeakPodMissing, LeakPodFinished, LeakPodRecreated, LeakOwnerMissing, LeakUnreserved, LeakPodStuckTerminating, LeakNotEvicted}

// stuckSince returns when a bound pod in deletion became stuck (its
// deletion deadline: deletionTimestamp is the time of the delete plus the
// pod's grace period), and whether it is such a pod: deleted, bound, and
// running no container. Finalizers are not the kubelet's: a pod held by one
// is not stuck here.
func stuckSince(p *index.Pod) (time.Time, bool) {
	o := p.Obj
	if o.DeletionTimestamp == nil || o.Spec.NodeName == "" || len(o.Finalizers) > 0 {
		return time.Time{}, false
	}
	for _, c := range o.Status.ContainerStatuses {
		if c.State.Running != nil {
			return time.Time{}, false
		}
	}
	return o.DeletionTimestamp.Time, true
}

// Leak is one leaked reservation or allocation, per allocated device.
type Leak struct {
	Claim  *index.Claim
	Pod    string
	PodUID types.UID
	Node   string
	Device string
	Reason LeakReason
	Detail string
}

// Leaks finds leaked reservations and allocations. grace applies to
// allocated claims that reserve nobody; the others leak at once (alerts add
// their own `for`).
func Leaks(s *index.Snapshot, now time.Time, grace time.Duration) []Leak {
	var out []Leak
	for _, c := range s.Claims {
		if s.Owns(c.Key.Namespace) {
			out = append(out, claimLeaks(s, c, now, grace)...)
		}
	}
	return out
}

// claimLeaks is Leaks of one claim. It reads the claim, the pods it names
// (leakReads), and the devices and taints of its allocation.
func claimLeaks(s *index.Snapshot, c *index.Claim, now time.Time, grace time.Duration) []Leak {
	var out []Leak
	var reported []types.UID // a claim is reserved for one pod or a few
	for _, r := range c.Obj.Status.ReservedFor {
		if r.Resource != "pods" || r.APIGroup != "" {
			continue
		}
		p := s.Pod(index.Key{Namespace: c.Key.Namespace, Name: r.Name})
		var reason LeakReason
		var detail string
		switch {
		case p == nil:
			reason, detail = LeakPodMissing, fmt.Sprintf("reserved for pod %s (uid %s), which does not exist", r.Name, r.UID)
		case p.UID != r.UID:
			reason, detail = LeakPodRecreated, fmt.Sprintf("reserved for pod %s uid %s; the pod of that name now has uid %s", r.Name, r.UID, p.UID)
		case p.Terminal():
			reason, detail = LeakPodFinished, fmt.Sprintf("reserved for pod %s, which has finished (phase %s)", r.Name, p.Obj.Status.Phase)
		case p.Obj.DeletionTimestamp != nil && p.Obj.Spec.NodeName == "":
			// The resourceclaim controller's isPodDone: deleted before
			// it was bound, it never runs.
			reason, detail = LeakPodFinished, fmt.Sprintf("reserved for pod %s, which was deleted before it was bound", r.Name)
		default:
			since, stuck := stuckSince(p)
			if !stuck {
				out = append(out, notEvicted(s, c, p, now, grace)...)
				continue
			}
			if now.Sub(since) <= grace {
				continue
			}
			reason, detail = LeakPodStuckTerminating, fmt.Sprintf("reserved for pod %s on node %s, deleted and past its deadline since %s (%s) with no container running: the kubelet cannot finish it (a failing NodeUnprepareResources of the driver keeps it, kubernetes#139772)",
				r.Name, p.Obj.Spec.NodeName, since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second))
		}
		reported = append(reported, r.UID)
		out = append(out, perDevice(s, c, Leak{Claim: c, Pod: r.Name, PodUID: r.UID, Reason: reason, Detail: detail})...)
	}
	if o := c.OwnerPod; o != nil && !slices.Contains(reported, o.UID) {
		p := s.Pod(index.Key{Namespace: c.Key.Namespace, Name: o.Name})
		if p == nil || p.UID != o.UID {
			return append(out, perDevice(s, c, Leak{Claim: c, Pod: o.Name, PodUID: o.UID, Reason: LeakOwnerMissing,
				Detail: fmt.Sprintf("generated for pod %s (uid %s), which no longer exists", o.Name, o.UID)})...)
		}
	}
	if c.Allocated() && len(c.Obj.Status.ReservedFor) == 0 {
		since := s.UnreservedSince(c)
		if idle := now.Sub(since); idle > grace {
			l := Leak{Claim: c, Reason: LeakUnreserved, Detail: fmt.Sprintf("allocated and reserved for nobody since %s (%s)", since.UTC().Format(time.RFC3339), idle.Round(time.Second))}
			if o := c.OwnerPod; o != nil {
				l.Pod, l.PodUID = o.Name, o.UID
			}
			out = append(out, perDevice(s, c, l)...)
		}
	}
	return out
}

// leakReads returns the keys of the pods claimLeaks and claimLeaksChangeAt
// look up for claim c: the names in its status.reservedFor (the latter
// looks up every consumer's name as a pod's), and its owner.
func leakReads(c *index.Claim) []index.Key {
	var keys []index.Key
	for _, r := range c.Obj.Status.ReservedFor {
		keys = append(keys, index.Key{Namespace: c.Key.Namespace, Name: r.Name})
	}
	if o := c.OwnerPod; o != nil {
		keys = append(keys, index.Key{Namespace: c.Key.Namespace, Name: o.Name})
	}
	return keys
}

// notEvicted lists the devices of claim c, reserved for the live pod p,
// that carry a NoExecute taint the request that got the device does not
// tolerate, added longer than grace ago. A pod already being deleted is
// being evicted (or is stuck, pod_stuck_terminating); a taint without
// timeAdded has no age to judge and is left out.
func notEvicted(s *index.Snapshot, c *index.Claim, p *index.Pod, now time.Time, grace time.Duration) []Leak {
	if p.Obj.DeletionTimestamp != nil || p.Obj.Spec.NodeName == "" || !s.AnyDeviceTaints() {
		return nil
	}
	var out []Leak
	for _, r := range c.Results {
		d := s.Device(r.Device)
		if r.AdminAccess || d == nil {
			continue
		}
		t, ok := untoleratedNoExecute(s.Taints(d), requestTolerations(c, r.Request))
		if !ok || now.Sub(t.TimeAdded.Time) <= grace {
			continue
		}
		how := "through claim " + c.Key.Name
		why := "the device taint eviction controller of kube-controller-manager has not deleted it"
		if _, extended := c.Obj.Annotations[resourceapi.ExtendedResourceClaimAnnotation]; extended {
			how = "as an extended resource (claim " + c.Key.Name + ", the scheduler's mapping)"
			why = "the device taint eviction controller has not deleted it; kubernetes#141290 reports it skipping claims of extended resources before 1.38"
		}
		taint := t.Key
		if t.Value != "" {
			taint += "=" + t.Value
		}
		taint += ":NoExecute"
		if t.Rule != "" {
			taint += " by DeviceTaintRule " + t.Rule
		}
		node := c.Node
		if node == "" {
			node = d.Node
		}
		out = append(out, Leak{Claim: c, Pod: p.Key.Name, PodUID: p.UID, Node: node, Device: r.Device.Device, Reason: LeakNotEvicted,
			Detail: fmt.Sprintf("reserved for pod %s, which runs on device %s %s although the device is tainted %s since %s (%s) and the request does not tolerate it: %s",
				p.Key.Name, r.Device.Device, how, taint, t.TimeAdded.UTC().Format(time.RFC3339), now.Sub(t.TimeAdded.Time).Round(time.Second), why)})
	}
	return out
}

// untoleratedNoExecute returns the oldest NoExecute taint with a timeAdded
// that no toleration tolerates.
func untoleratedNoExecute(taints []index.Taint, tolerations []resourceapi.DeviceToleration) (index.Taint, bool) {
	var oldest index.Taint
	found := false
	for _, t := range taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoExecute || t.TimeAdded == nil {
			continue
		}
		if slices.ContainsFunc(tolerations, func(tol resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(tol, t.DeviceTaint) }) {
			continue
		}
		if !found || t.TimeAdded.Before(oldest.TimeAdded) {
			oldest, found = t, true
		}
	}
	return oldest, found
}

// requestTolerations are the tolerations of the request (or firstAvailable
// subrequest, "request/sub") that an allocation result names.
func requestTolerations(c *index.Claim, request string) []resourceapi.DeviceToleration {
	for _, r := range c.Obj.Spec.Devices.Requests {
		for _, cand := range candidates(r) {
			if cand.name == request {
				return cand.tolerations
			}
		}
	}
	return nil
}

// perDevice repeats a leak for each allocated device, so that the series
// names the device; an unallocated claim gives one row without a device.
func perDevice(s *index.Snapshot, c *index.Claim, l Leak) []Leak {
	if len(c.Results) == 0 {
		return []Leak{l}
	}
	out := make([]Leak, 0, len(c.Results))
	for _, r := range c.Results {
		x := l
		x.Device = r.Device.Device
		x.Node = c.Node
		if d := s.Device(r.Device); d != nil && x.Node == "" {
			x.Node = d.Node
		}
		out = append(out, x)
	}
	return out
}

// LeaksChangeAt returns the first time after now at which Leaks would
// answer differently for the same snapshot: when the earliest allocated,
// unreserved claim still within its grace period passes it, or a bound pod
// in deletion passes its deadline by the grace period. The zero time
// means never (only a change to the index can change the answer).
func LeaksChangeAt(s *index.Snapshot, now time.Time, grace time.Duration) time.Time {
	var at time.Time
	for _, c := range s.Claims {
		if s.Owns(c.Key.Namespace) {
			at = earlier(at, claimLeaksChangeAt(s, c, now, grace))
		}
	}
	return at
}

// earlier returns the earlier of two times, the zero time standing for
// never.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// claimLeaksChangeAt is LeaksChangeAt of one claim; it reads what
// claimLeaks reads.
func claimLeaksChangeAt(s *index.Snapshot, c *index.Claim, now time.Time, grace time.Duration) time.Time {
	var at time.Time
	earliest := func(end time.Time) {
		if end.After(now) {
			at = earlier(at, end)
		}
	}
	for _, r := range c.Obj.Status.ReservedFor {
		if p := s.Pod(index.Key{Namespace: c.Key.Namespace, Name: r.Name}); p != nil && p.UID == r.UID {
			if since, stuck := stuckSince(p); stuck {
				earliest(since.Add(grace).Add(time.Nanosecond))
			} else if p.Obj.DeletionTimestamp == nil && p.Obj.Spec.NodeName != "" && s.AnyDeviceTaints() {
				for _, res := range c.Results {
					if d := s.Device(res.Device); d != nil && !res.AdminAccess {
						if t, ok := untoleratedNoExecute(s.Taints(d), requestTolerations(c, res.Request)); ok {
							earliest(t.TimeAdded.Add(grace).Add(time.Nanosecond))
						}
					}
				}
			}
		}
	}
	if !c.Allocated() || len(c.Obj.Status.ReservedFor) != 0 {
		return at
	}
	end := s.UnreservedSince(c).Add(grace)
	if now.Sub(end) > 0 {
		return at // already leaked
	}
	return earlier(at, end)
}
