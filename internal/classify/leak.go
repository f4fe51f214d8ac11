package classify

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
)

// LeakReasons lists every leak reason.
var LeakReasons = []LeakReason{LeakPodMissing, LeakPodFinished, LeakPodRecreated, LeakOwnerMissing, LeakUnreserved}

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
		if !s.Owns(c.Key.Namespace) {
			continue
		}
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
				continue
			}
			reported = append(reported, r.UID)
			out = append(out, perDevice(s, c, Leak{Claim: c, Pod: r.Name, PodUID: r.UID, Reason: reason, Detail: detail})...)
		}
		if o := c.OwnerPod; o != nil && !slices.Contains(reported, o.UID) {
			p := s.Pod(index.Key{Namespace: c.Key.Namespace, Name: o.Name})
			if p == nil || p.UID != o.UID {
				out = append(out, perDevice(s, c, Leak{Claim: c, Pod: o.Name, PodUID: o.UID, Reason: LeakOwnerMissing,
					Detail: fmt.Sprintf("generated for pod %s (uid %s), which no longer exists", o.Name, o.UID)})...)
				continue
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
	}
	return out
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
// unreserved claim still within its grace period passes it. The zero time
// means never (only a change to the index can change the answer).
func LeaksChangeAt(s *index.Snapshot, now time.Time, grace time.Duration) time.Time {
	var at time.Time
	for _, c := range s.Claims {
		if !c.Allocated() || len(c.Obj.Status.ReservedFor) != 0 || !s.Owns(c.Key.Namespace) {
			continue
		}
		end := s.UnreservedSince(c).Add(grace)
		if now.Sub(end) > 0 {
			continue // already leaked
		}
		if at.IsZero() || end.Before(at) {
			at = end
		}
	}
	return at
}
