package index

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/dra"
)

// Lanes name the ways a pod gets a GPU.
const (
	LaneDRA          = "dra"
	LaneDRAExtended  = "dra-extended"
	LaneDevicePlugin = "device-plugin"
)

// PodClaim is one claim a pod depends on, resolved (the shared DRA model's,
// over the index's claims: Claim is nil when the claim does not exist).
type PodClaim = dra.PodClaim[*Claim]

// snapshotClaims and indexClaims let the shared resolution read a
// snapshot's or the live index's claims; pointer-shaped, they cost no
// allocation as a dra.Claims.
type (
	snapshotClaims Snapshot
	indexClaims    Index
)

func (l *snapshotClaims) Claim(namespace, name string) *Claim {
	return (*Snapshot)(l).claimByKey(Key{namespace, name})
}
func (l *snapshotClaims) OwnedBy(uid types.UID) []*Claim { return (*Snapshot)(l).claimsOwnedBy(uid) }
func (l *snapshotClaims) OfGroup(namespace, group string) []*Claim {
	return (*Snapshot)(l).claimsOfGroup(Key{namespace, group})
}
func (l *snapshotClaims) Object(c *Claim) *resourceapi.ResourceClaim { return c.Obj }

func (l *indexClaims) Claim(namespace, name string) *Claim {
	return (*Index)(l).claimByKey(Key{namespace, name})
}
func (l *indexClaims) OwnedBy(uid types.UID) []*Claim { return (*Index)(l).claimsOwnedBy(uid) }
func (l *indexClaims) OfGroup(namespace, group string) []*Claim {
	return (*Index)(l).claimsOfGroup(Key{namespace, group})
}
func (l *indexClaims) Object(c *Claim) *resourceapi.ResourceClaim { return c.Obj }

// resolvePodClaims returns the claims a pod depends on (dra.PodClaims).
func resolvePodClaims(src dra.Claims[*Claim], p *Pod) []PodClaim {
	return dra.PodClaims(src, p.Obj)
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
