package index

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Lanes name the ways a pod gets a GPU.
const (
	LaneDRA          = "dra"
	LaneDRAExtended  = "dra-extended"
	LaneDevicePlugin = "device-plugin"
)

// PodClaim is one claim a pod depends on, resolved.
type PodClaim struct {
	// Name is the entry in pod.spec.resourceClaims; empty for the claim
	// the scheduler made for the pod's extended-resource requests.
	Name string
	// Template is the ResourceClaimTemplate the claim is generated from.
	Template string
	// ClaimName is the claim's name when known (named, or recorded in the
	// pod status, or found through its owner reference).
	ClaimName string
	// Claim is the claim object, nil when it does not exist.
	Claim *Claim
}

type claimSource interface {
	claimByKey(Key) *Claim
	claimsOwnedBy(types.UID) []*Claim
	claimsOfGroup(Key) []*Claim
}

// resolvePodClaims returns the claims a pod depends on, in spec order, then
// the extended-resource claim. Template entries the controller decided need
// no claim are left out.
func resolvePodClaims(src claimSource, p *Pod) []PodClaim {
	pod := p.Obj
	out := make([]PodClaim, 0, len(pod.Spec.ResourceClaims)+1)
	for _, rc := range pod.Spec.ResourceClaims {
		pc := PodClaim{Name: rc.Name}
		switch {
		case rc.ResourceClaimName != nil:
			pc.ClaimName = *rc.ResourceClaimName
		case rc.ResourceClaimTemplateName != nil:
			pc.Template = *rc.ResourceClaimTemplateName
			status, recorded := claimStatus(pod, rc.Name)
			if recorded && status.ResourceClaimName == nil {
				continue // generating a claim was not necessary
			}
			if recorded {
				pc.ClaimName = *status.ResourceClaimName
			} else if c := generatedClaim(src, p, rc.Name); c != nil {
				// The controller created the claim but has not yet
				// recorded it in the pod status.
				pc.ClaimName = c.Key.Name
			} else if c := groupClaim(src, p, rc.Name); c != nil {
				// A claim generated for the pod's PodGroup.
				pc.ClaimName = c.Key.Name
			}
		default:
			continue // invalid entry; the API server rejects it
		}
		if pc.ClaimName != "" {
			pc.Claim = src.claimByKey(Key{pod.Namespace, pc.ClaimName})
			if pc.Claim != nil && pc.Template != "" && !ownedByPod(pc.Claim, p) {
				// A claim of that name exists but belongs to another
				// pod (a previous incarnation): not this pod's claim.
				pc.Claim = nil
			}
		}
		out = append(out, pc)
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out = append(out, PodClaim{ClaimName: st.ResourceClaimName, Claim: src.claimByKey(Key{pod.Namespace, st.ResourceClaimName})})
	} else {
		for _, c := range src.claimsOwnedBy(pod.UID) {
			if c.Extended {
				out = append(out, PodClaim{ClaimName: c.Key.Name, Claim: c})
			}
		}
	}
	return out
}

func claimStatus(pod *corev1.Pod, name string) (corev1.PodResourceClaimStatus, bool) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.PodResourceClaimStatus{}, false
}

// ownedByPod reports whether a generated claim belongs to the pod: the pod
// owns it, or the PodGroup the pod belongs to does.
func ownedByPod(c *Claim, p *Pod) bool {
	if c.OwnerPod != nil {
		return c.OwnerPod.UID == p.UID
	}
	return c.OwnerGroup != nil && c.OwnerGroup.Name == p.Group()
}

// groupClaim finds the claim generated for the pod's PodGroup from the same
// pod claim entry (the Pod and its PodGroup use the same entry names).
func groupClaim(src claimSource, p *Pod, podClaimName string) *Claim {
	group := p.Group()
	if group == "" {
		return nil
	}
	for _, c := range src.claimsOfGroup(Key{p.Key.Namespace, group}) {
		if c.Obj.Annotations[resourceapi.PodResourceClaimAnnotation] == podClaimName {
			return c
		}
	}
	return nil
}

func generatedClaim(src claimSource, p *Pod, podClaimName string) *Claim {
	for _, c := range src.claimsOwnedBy(p.UID) {
		if c.Obj.Annotations[resourceapi.PodResourceClaimAnnotation] == podClaimName {
			return c
		}
	}
	return nil
}

// podLane returns the lane that serves the pod's GPUs, or "" when the pod
// uses none. extendedByDRA tells whether a device class serves an extended
// resource name. A bound pod whose extended resources DRA serves has
// status.extendedResourceClaimStatus (the scheduler writes it before
// binding); a bound pod without it got them from the device plugin, even if
// the node's allocatable has since dropped (unhealthy devices, a stopped
// plugin).
func podLane(p *Pod, devicePluginResource func(string) bool, extendedByDRA func(string) bool) string {
	if p.UsesClaims() {
		return LaneDRA
	}
	if p.Obj.Status.ExtendedResourceClaimStatus != nil {
		return LaneDRAExtended
	}
	if p.Obj.Spec.NodeName == "" {
		for name := range p.ExtendedRequests {
			if extendedByDRA(name) {
				return LaneDRAExtended
			}
		}
	}
	for name := range p.ExtendedRequests {
		if devicePluginResource(name) {
			return LaneDevicePlugin
		}
	}
	return ""
}
