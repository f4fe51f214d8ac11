package classify

// The controller's and the scheduler's links of one claim: it exists, it is
// allocated (requests.go checks why not), it is reserved for the pod.

import (
	corev1 "k8s.io/api/core/v1"

	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// walkClaim checks one claim of the pod. For a gated pod only the
// controller's links count: the scheduler has not seen the pod yet.
func (w *walker) walkClaim(pc index.PodClaim, gated bool) {
	label := pc.ClaimName
	if label == "" {
		label = pc.Name
	}
	exists := Link{Step: "claim exists", Layer: LayerController, Claim: label}
	if pc.Claim == nil {
		switch {
		case pc.Template != "" || pc.Name == "":
			exists.Reason = ClaimNotCreated
			exists.Evidence = w.notCreatedEvidence(pc)
		default:
			exists.Reason = ClaimNotFound
			exists.Evidence = []string{fmt.Sprintf("pod.spec.resourceClaims[%s] names ResourceClaim %s/%s, which does not exist", pc.Name, w.p.Key.Namespace, pc.ClaimName)}
		}
		w.fail(exists, nil, pc.ClaimName)
		return
	}
	c := pc.Claim
	exists.State = Pass
	switch {
	case pc.Template != "":
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s generated from template %s for pod claim %s", c.Key, pc.Template, pc.Name)}
	case pc.Name == "":
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s created by the scheduler for the pod's extended-resource requests", c.Key)}
	default:
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s named by pod claim %s", c.Key, pc.Name)}
	}
	if c.Obj.DeletionTimestamp != nil && !c.ReservedForPod(w.p) {
		exists.Reason = ClaimNotFound
		exists.Evidence = append(exists.Evidence, fmt.Sprintf("the claim is being deleted (deletionTimestamp %s): the scheduler allocates and reserves no claim in deletion; recreate it, or the pod",
			c.Obj.DeletionTimestamp.UTC().Format("2006-01-02T15:04:05Z")))
		w.fail(exists, c, c.Key.Name)
		return
	}
	w.add(exists)
	if gated {
		return
	}

	if !c.Allocated() {
		if ok, class := w.walkRequests(c); ok && w.waitsForGroup() {
			w.add(Link{Step: "pod group quorum", Layer: LayerScheduler, Claim: c.Key.Name, Class: class, State: Wait, Evidence: w.groupEvidence()})
			w.waiting = true
		} else if ok {
			l := Link{Step: "claim allocated", Claim: c.Key.Name, Class: class, Reason: Unallocated}
			first := "every request has free matching devices, yet the claim is unallocated: look at node resources, affinity, taints and claim constraints"
			if w.selectorErrors {
				first = "every request has free matching devices on a node without selector errors, but the scheduler gives up on the errors above: fix the selectors or the devices they fail on"
			}
			l.Evidence = append([]string{first}, w.schedulingEvidence()...)
			w.fail(l, c, c.Key.Name)
		}
		return
	}
	alloc := Link{Step: "claim allocated", Layer: LayerScheduler, Claim: c.Key.Name, State: Pass}
	for _, r := range c.Results {
		alloc.Evidence = append(alloc.Evidence, w.describeResult(c, r))
	}
	if n := claimNode(w.s, c); n != "" {
		alloc.Evidence = append(alloc.Evidence, "node: "+n)
	}
	w.add(alloc)

	reserved := Link{Step: "claim reserved for pod", Layer: LayerScheduler, Claim: c.Key.Name}
	if !c.ReservedForPod(w.p) {
		reserved.Reason = NotReserved
		reserved.Evidence = []string{fmt.Sprintf("status.reservedFor names %s, not this pod (uid %s)", describeReservations(c), w.p.UID)}
		reserved.Evidence = append(reserved.Evidence, w.schedulingEvidence()...)
		w.fail(reserved, c, c.Key.Name)
		return
	}
	reserved.State = Pass
	reserved.Evidence = []string{fmt.Sprintf("status.reservedFor includes pod %s (uid %s)", w.p.Key.Name, w.p.UID)}
	w.add(reserved)
}

func (w *walker) notCreatedEvidence(pc index.PodClaim) []string {
	var ev []string
	switch {
	case pc.Name == "":
		ev = append(ev, fmt.Sprintf("pod.status.extendedResourceClaimStatus names ResourceClaim %s, which does not exist", pc.ClaimName))
	case pc.ClaimName != "":
		ev = append(ev, fmt.Sprintf("pod.status.resourceClaimStatuses[%s] names ResourceClaim %s, which does not exist (or belongs to another pod)", pc.Name, pc.ClaimName))
	default:
		ev = append(ev, fmt.Sprintf("no claim generated from template %s for pod claim %s (pod.status.resourceClaimStatuses has no entry)", pc.Template, pc.Name))
	}
	for _, e := range w.s.PodEvents(w.p) {
		if e.Reason == vocab.FailedResourceClaimCreation {
			ev = append(ev, eventEvidence(e))
			break
		}
	}
	return ev
}

func (w *walker) schedulingEvidence() []string {
	for _, e := range w.s.PodEvents(w.p) {
		if e.Reason == vocab.FailedScheduling {
			return []string{eventEvidence(e)}
		}
	}
	for _, c := range w.p.Obj.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return []string{fmt.Sprintf("condition PodScheduled=False (%s): %s", c.Reason, c.Message)}
		}
	}
	return nil
}

// waitsForGroup reports whether an unallocated claim is held back by gang
// scheduling: the pod belongs to a PodGroup, and the scheduler has either
// said nothing about it (a gang member waits in Permit until minCount
// members fit; the claims are allocated only after that) or said that it
// waits for the group. A FailedScheduling in other words is a real failure.
func (w *walker) waitsForGroup() bool {
	if w.p.Group() == "" {
		return false
	}
	for _, e := range w.s.PodEvents(w.p) {
		if e.Reason == vocab.FailedScheduling {
			return vocab.GangWaiting(e.Message)
		}
	}
	for _, c := range w.p.Obj.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return vocab.GangWaiting(c.Message)
		}
	}
	return true
}

func (w *walker) groupEvidence() []string {
	group := w.p.Group()
	bound, members := 0, 0
	for _, p := range w.s.Pods {
		if p.Key.Namespace == w.p.Key.Namespace && p.Group() == group && !p.Terminal() {
			members++
			if p.Obj.Spec.NodeName != "" {
				bound++
			}
		}
	}
	ev := []string{fmt.Sprintf("the pod belongs to PodGroup %s/%s (%d members seen, %d bound); every request has free matching devices, and the scheduler allocates a gang member's claims only once the group's minCount members fit: waiting for the group, not a DRA failure", w.p.Key.Namespace, group, members, bound)}
	return append(ev, w.schedulingEvidence()...)
}
