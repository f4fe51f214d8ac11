package index

// A snapshot's lookups: by key and name, a pod's claims, lane and events.

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Owns reports whether the namespace belongs to the exporter's shard (always,
// unsharded): the classifier skips other shards' pods and claims, whose
// series another shard emits.
func (s *Snapshot) Owns(namespace string) bool { return s.shard.Owns(namespace) }

// Class returns a class by name.
func (s *Snapshot) Class(name string) *Class { return traced(s, s.classByName[name]) }

// Device returns a device by key.
func (s *Snapshot) Device(k DeviceKey) *Device { return traced(s, s.deviceByKey[k]) }

// Claim returns a claim by key.
func (s *Snapshot) Claim(k Key) *Claim { return traced(s, s.claimsByKey[k]) }

// Pod returns a pod by key.
func (s *Snapshot) Pod(k Key) *Pod { return traced(s, s.podsByKey[k]) }

// Node returns a node by name.
func (s *Snapshot) Node(name string) *Node { return traced(s, s.nodesByName[name]) }

// ClassDevices returns the devices a class selects.
func (s *Snapshot) ClassDevices(class string) []*Device { return tracedAll(s, s.classDevices[class]) }

// ResolvePodClaims returns the claims a pod depends on (see PodClaim).
func (s *Snapshot) ResolvePodClaims(p *Pod) []PodClaim {
	out := resolvePodClaims((*snapshotClaims)(s), p)
	if s.trace != nil {
		for _, pc := range out {
			traced(s, pc.Claim)
		}
	}
	return out
}

func (s *Snapshot) claimByKey(k Key) *Claim { return s.claimsByKey[k] }

func (s *Snapshot) claimsOwnedBy(uid types.UID) []*Claim { return s.claimsByOwner[uid] }

func (s *Snapshot) claimsOfGroup(g Key) []*Claim { return s.claimsByGroup[g] }

// PodLane returns the lane serving the pod's GPUs, "" when none.
func (s *Snapshot) PodLane(p *Pod) string {
	return podLane(p, s.IsDevicePluginResource, func(name string) bool { return s.ClassForExtendedResource(name) != nil })
}

// IsDevicePluginResource reports whether the resource name belongs to the
// device-plugin lane.
func (s *Snapshot) IsDevicePluginResource(name string) bool {
	return slices.Contains(s.devicePlugin, name)
}

// ClassForExtendedResource returns the class serving an extended resource.
func (s *Snapshot) ClassForExtendedResource(name string) *Class {
	return traced(s, classForExtendedResource(s.classByName, name))
}

// PodEvents returns the events about a pod, newest first. Events recorded
// for another pod of the same name (another UID) are left out.
func (s *Snapshot) PodEvents(p *Pod) []*Event {
	var out []*Event
	for _, e := range s.podEvents[p.Key] {
		if e.PodUID == "" || e.PodUID == p.UID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *Event) int {
		if c := b.Timestamp.Compare(a.Timestamp); c != 0 {
			return c
		}
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	return tracedAll(s, out)
}

// PodEventRecords returns the events held under the pod's name, as the
// snapshot holds them (unsorted, other UIDs included): to tell whether a
// pod's evidence changed between two snapshots, not to read. The slice must
// not be modified.
func (s *Snapshot) PodEventRecords(p *Pod) []*Event { return s.podEvents[p.Key] }

// UnreservedSince returns since when an allocated claim has reserved
// nobody: when the exporter saw it happen, else (a file, or a restart) the
// allocation time, else the claim's creation.
func (s *Snapshot) UnreservedSince(c *Claim) time.Time {
	if t, ok := s.unreservedSince[c.UID]; ok {
		return t
	}
	if !c.AllocatedAt.IsZero() {
		return c.AllocatedAt
	}
	return c.Obj.CreationTimestamp.Time
}
