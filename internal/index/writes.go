package index

// The index's writes per kind of object (slices are pool.go's): what
// each keeps joined, and what it tells the latency tracker.

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

func (ix *Index) upsertClass(c *Class) {
	if err := ix.matcher.Compile(c.Selectors); err != nil {
		c.CompileError = err.Error()
	}
	old := ix.classes[c.Name]
	ix.classes[c.Name] = c
	if old == nil || !sameSelectors(old.Selectors, c.Selectors) {
		ix.rematchClass(c.Name)
	}
}

func sameSelectors(a, b []resourceapi.DeviceSelector) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i].CEL == nil) != (b[i].CEL == nil) || (a[i].CEL != nil && a[i].CEL.Expression != b[i].CEL.Expression) {
			return false
		}
	}
	return true
}

func (ix *Index) upsertClaim(c *Claim, now time.Time, arr arrival) {
	old := ix.claims[c.Key]
	if old != nil && old.UID != c.UID {
		// Deleted and recreated while the watch was down.
		ix.deleteClaim(c.Key, now, arrivedLate)
		old = nil
	}
	ix.claims[c.Key] = c
	ix.changedClaims[c.Key] = struct{}{}
	if old != nil {
		ix.unlinkClaim(old)
	}
	for _, r := range c.Obj.Status.ReservedFor {
		ix.claimsByReservedPod.add(r.UID, c.Key)
	}
	if c.OwnerPod != nil {
		ix.claimsByOwner.add(c.OwnerPod.UID, c.Key)
	}
	if !c.Allocated() || len(c.Obj.Status.ReservedFor) > 0 {
		delete(ix.unreservedSince, c.UID)
	} else if _, ok := ix.unreservedSince[c.UID]; !ok {
		// Since when it reserves nobody: now when this update is the
		// transition (seen live, or late: then it is at most that late),
		// else (first sight) the allocation time.
		since := c.AllocatedAt
		if since.IsZero() {
			since = c.Obj.CreationTimestamp.Time
		}
		if old != nil && (!old.Allocated() || len(old.Obj.Status.ReservedFor) > 0) {
			since = now
		}
		ix.unreservedSince[c.UID] = since
	}
	ix.latency.claimChanged(ix, old, c, now, arr)
}

func (ix *Index) unlinkClaim(c *Claim) {
	for _, r := range c.Obj.Status.ReservedFor {
		ix.claimsByReservedPod.remove(r.UID, c.Key)
	}
	if c.OwnerPod != nil {
		ix.claimsByOwner.remove(c.OwnerPod.UID, c.Key)
	}
}

// links maps a pod UID to claim keys. A pod has one claim or a few, so a
// slice each is kept rather than a set: at 100k pods a map per pod took
// 80 MB of the heap, the slices take a tenth of that.
type links map[types.UID][]Key

func (l links) add(uid types.UID, k Key) {
	if !slices.Contains(l[uid], k) {
		l[uid] = append(l[uid], k)
	}
}

func (l links) remove(uid types.UID, k Key) {
	keys := l[uid]
	i := slices.Index(keys, k)
	switch {
	case i < 0:
	case len(keys) == 1:
		delete(l, uid)
	default:
		l[uid] = slices.Delete(keys, i, i+1)
	}
}

func (ix *Index) deleteClaim(k Key, now time.Time, arr arrival) {
	old := ix.claims[k]
	if old == nil {
		return
	}
	delete(ix.claims, k)
	ix.changedClaims[k] = struct{}{}
	ix.unlinkClaim(old)
	delete(ix.unreservedSince, old.UID)
	ix.latency.claimChanged(ix, old, nil, now, arr)
}

// upsertPod reports whether the index changed: a pod that takes no part
// (no claims, no extended resources) is not held.
func (ix *Index) upsertPod(p *Pod, now time.Time, arr arrival) bool {
	old := ix.pods[p.Key]
	replaced := false
	if old != nil && old.UID != p.UID {
		replaced = ix.deletePod(p.Key, now, arrivedLate)
		old = nil
	}
	if !p.UsesClaims() && len(p.ExtendedRequests) == 0 && p.Obj.Status.ExtendedResourceClaimStatus == nil {
		// Pods without DRA claims or extended resources take no part.
		return ix.deletePod(p.Key, now, arr) || replaced
	}
	ix.pods[p.Key] = p
	ix.changedPods[p.Key] = struct{}{}
	ix.latency.podChanged(ix, old, p, now, arr)
	return true
}

// deletePod reports whether the pod was held.
func (ix *Index) deletePod(k Key, now time.Time, arr arrival) bool {
	old := ix.pods[k]
	if old == nil {
		return false
	}
	delete(ix.pods, k)
	ix.changedPods[k] = struct{}{}
	ix.latency.podChanged(ix, old, nil, now, arr)
	return true
}

// upsertEvent holds the event if it is DRA evidence about a pod of the
// shard, and reports whether the index changed.
func (ix *Index) upsertEvent(e *Event) bool {
	if !e.AboutPodWarning || !vocab.RelevantEvent(e.Reason, e.Message) || !ix.shard.Owns(e.Pod.Namespace) {
		return ix.deleteEvent(e.Key)
	}
	ix.events[e.Key] = e
	return true
}

// deleteEvent reports whether the event was held.
func (ix *Index) deleteEvent(k Key) bool {
	if _, ok := ix.events[k]; !ok {
		return false
	}
	delete(ix.events, k)
	return true
}
