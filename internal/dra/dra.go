// Package dra is the DRA model the cluster exporter and the node agent
// share, so that both read a pod's claims the same way: which claims a pod
// depends on (named, generated from a template, generated for its PodGroup,
// made for its extended resources), whether a claim is reserved for a pod
// (itself or its PodGroup), which containers use a claim, and which
// extended resources are device-plugin GPUs. It reads API objects only.
package dra

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Claims looks claims up. C is the caller's record of a claim (the index's
// joined claim, or the API object itself); its zero value means absent.
type Claims[C comparable] interface {
	// Claim returns the claim of that namespace and name.
	Claim(namespace, name string) C
	// OwnedBy returns the claims whose controlling owner has this UID.
	OwnedBy(uid types.UID) []C
	// OfGroup returns the claims a PodGroup of the namespace owns.
	OfGroup(namespace, group string) []C
	// Object returns the API object of a claim.
	Object(c C) *resourceapi.ResourceClaim
}

// PodClaim is one claim a pod depends on, resolved.
type PodClaim[C comparable] struct {
	// Name is the entry in pod.spec.resourceClaims; empty for the claim
	// the scheduler made for the pod's extended-resource requests.
	Name string
	// Template is the ResourceClaimTemplate the claim is generated from.
	Template string
	// ClaimName is the claim's name when known (named, or recorded in the
	// pod status, or found through its owner reference).
	ClaimName string
	// Claim is the claim, zero when it does not exist (or is not known).
	Claim C
}

// Extended reports whether the entry is the pod's extended-resource claim.
func (pc PodClaim[C]) Extended() bool { return pc.Name == "" }

// PodClaims returns the claims a pod depends on, in spec order, then the
// extended-resource claim. Template entries the controller decided need no
// claim are left out. A template's claim not yet recorded in the pod
// status is found through its owner (the pod, or the pod's PodGroup).
func PodClaims[C comparable](src Claims[C], pod *corev1.Pod) []PodClaim[C] {
	var zero C
	out := make([]PodClaim[C], 0, len(pod.Spec.ResourceClaims)+1)
	for _, rc := range pod.Spec.ResourceClaims {
		pc := PodClaim[C]{Name: rc.Name}
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
			} else if c := generatedClaim(src, src.OwnedBy(pod.UID), rc.Name); c != zero {
				// The controller created the claim but has not yet
				// recorded it in the pod status.
				pc.ClaimName = src.Object(c).Name
			} else if g := Group(pod); g != "" {
				// A claim generated for the pod's PodGroup.
				if c := generatedClaim(src, src.OfGroup(pod.Namespace, g), rc.Name); c != zero {
					pc.ClaimName = src.Object(c).Name
				}
			}
		default:
			continue // invalid entry; the API server rejects it
		}
		if pc.ClaimName != "" {
			pc.Claim = src.Claim(pod.Namespace, pc.ClaimName)
			if pc.Claim != zero && pc.Template != "" && !ownedByPod(src.Object(pc.Claim), pod) {
				// A claim of that name exists but belongs to another
				// pod (a previous incarnation): not this pod's claim.
				pc.Claim = zero
			}
		}
		out = append(out, pc)
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out = append(out, PodClaim[C]{ClaimName: st.ResourceClaimName, Claim: src.Claim(pod.Namespace, st.ResourceClaimName)})
	} else {
		for _, c := range src.OwnedBy(pod.UID) {
			if obj := src.Object(c); obj.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true" {
				out = append(out, PodClaim[C]{ClaimName: obj.Name, Claim: c})
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

// generatedClaim finds, among an owner's claims, the one generated from
// the pod claim entry (the Pod and its PodGroup use the same entry names).
func generatedClaim[C comparable](src Claims[C], owned []C, podClaimName string) C {
	for _, c := range owned {
		if src.Object(c).Annotations[resourceapi.PodResourceClaimAnnotation] == podClaimName {
			return c
		}
	}
	var zero C
	return zero
}

// Owner is a claim's controlling owner.
type Owner struct {
	Name string
	UID  types.UID
}

// Owners returns a claim's controlling owner when it is a Pod (claims
// generated from a template or for an extended resource) or a PodGroup
// (scheduling.k8s.io: a claim generated for a whole group of pods).
func Owners(c *resourceapi.ResourceClaim) (pod, group *Owner) {
	ref := metav1.GetControllerOfNoCopy(c)
	switch {
	case ref == nil:
	case ref.Kind == "Pod" && ref.APIVersion == "v1":
		pod = &Owner{Name: ref.Name, UID: ref.UID}
	case ref.Kind == "PodGroup" && strings.HasPrefix(ref.APIVersion, "scheduling.k8s.io/"):
		group = &Owner{Name: ref.Name, UID: ref.UID}
	}
	return pod, group
}

// ownedByPod reports whether a generated claim belongs to the pod: the pod
// owns it, or the PodGroup the pod belongs to does.
func ownedByPod(c *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	ref := metav1.GetControllerOfNoCopy(c)
	switch {
	case ref == nil:
		return false
	case ref.Kind == "Pod" && ref.APIVersion == "v1":
		return ref.UID == pod.UID
	}
	return ref.Kind == "PodGroup" && strings.HasPrefix(ref.APIVersion, "scheduling.k8s.io/") && ref.Name == Group(pod)
}

// Group returns the name of the PodGroup the pod belongs to, "" when none.
func Group(pod *corev1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}

// ReservedFor reports whether the claim is reserved for the pod UID.
func ReservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	for _, r := range c.Status.ReservedFor {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// ReservedForPod reports whether the claim is reserved for the pod, itself
// or through the PodGroup it belongs to (the scheduler reserves a group's
// claim for the group, not for its pods).
func ReservedForPod(c *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	if ReservedFor(c, pod.UID) {
		return true
	}
	group := Group(pod)
	if group == "" {
		return false
	}
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "podgroups" && r.Name == group {
			return true
		}
	}
	return false
}

// UsedByContainers reports whether a claim of the pod is used by a
// container the kubelet keeps running: a regular container or a sidecar
// (an init container with restartPolicy Always). A claim only ordinary
// init containers use is prepared for them and no longer in use once they
// have run, so the kubelet stops reporting it for the pod.
func UsedByContainers[C comparable](pod *corev1.Pod, pc PodClaim[C]) bool {
	running := func(name string) bool {
		for _, c := range pod.Spec.Containers {
			if c.Name == name {
				return true
			}
		}
		for _, c := range pod.Spec.InitContainers {
			if c.Name == name && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				return true
			}
		}
		return false
	}
	if pc.Extended() {
		st := pod.Status.ExtendedResourceClaimStatus
		if st == nil || len(st.RequestMappings) == 0 {
			return true
		}
		for _, m := range st.RequestMappings {
			if running(m.ContainerName) {
				return true
			}
		}
		return false
	}
	uses := func(c corev1.Container) bool {
		return slices.ContainsFunc(c.Resources.Claims, func(rc corev1.ResourceClaim) bool { return rc.Name == pc.Name })
	}
	for _, c := range pod.Spec.Containers {
		if uses(c) {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if uses(c) && running(c.Name) {
			return true
		}
	}
	return false
}

// Resources are the extended resources device plugins advertise for GPUs
// (--device-plugin.resources): the device-plugin lane.
type Resources []string

// ParseResources reads a comma-separated list.
func ParseResources(s string) Resources {
	var out Resources
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// Has reports whether name is one of the resources.
func (r Resources) Has(name string) bool { return slices.Contains(r, name) }

// ClaimKey is the key of a ClaimSet's claims: namespace/name.
func ClaimKey(namespace, name string) string { return namespace + "/" + name }

// ClaimSet is a set of claim objects by ClaimKey (the node agent's,
// fetched by name), indexed by owner for PodClaims' fallbacks.
type ClaimSet struct {
	byKey   map[string]*resourceapi.ResourceClaim
	byOwner map[types.UID][]*resourceapi.ResourceClaim
	byGroup map[string][]*resourceapi.ResourceClaim
}

// NewClaimSet indexes claims (keyed by ClaimKey).
func NewClaimSet(claims map[string]*resourceapi.ResourceClaim) *ClaimSet {
	s := &ClaimSet{byKey: claims, byOwner: map[types.UID][]*resourceapi.ResourceClaim{}, byGroup: map[string][]*resourceapi.ResourceClaim{}}
	for _, k := range slices.Sorted(maps.Keys(claims)) {
		c := claims[k]
		pod, group := Owners(c)
		if pod != nil {
			s.byOwner[pod.UID] = append(s.byOwner[pod.UID], c)
		}
		if group != nil {
			gk := ClaimKey(c.Namespace, group.Name)
			s.byGroup[gk] = append(s.byGroup[gk], c)
		}
	}
	return s
}

// Claim implements Claims.
func (s *ClaimSet) Claim(namespace, name string) *resourceapi.ResourceClaim {
	return s.byKey[ClaimKey(namespace, name)]
}

// OwnedBy implements Claims.
func (s *ClaimSet) OwnedBy(uid types.UID) []*resourceapi.ResourceClaim { return s.byOwner[uid] }

// OfGroup implements Claims.
func (s *ClaimSet) OfGroup(namespace, group string) []*resourceapi.ResourceClaim {
	return s.byGroup[ClaimKey(namespace, group)]
}

// Object implements Claims.
func (s *ClaimSet) Object(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim { return c }

// ClaimNames returns the names of the claims a pod depends on that are
// known by name: those the pod and its status give, and those of the
// known claims the owner fallbacks find (what the node agent fetches).
func ClaimNames(pod *corev1.Pod, known *ClaimSet) []string {
	var out []string
	for _, pc := range PodClaims[*resourceapi.ResourceClaim](known, pod) {
		if pc.ClaimName != "" {
			out = append(out, pc.ClaimName)
		}
	}
	return out
}
