package classify

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Held is one device a live pod holds through one of its claims, with what
// the kubelet reports of its health and the taints on it. A running pod
// keeps running on an Unhealthy or NoSchedule-tainted GPU: that is the
// page, not the scheduling of new pods.
type Held struct {
	Pod    *index.Pod
	Claim  *index.Claim
	Device *index.Device
	// Health is the kubelet's word (allocatedResourcesStatus, KEP-4680):
	// healthy, unhealthy or unknown; "" when the kubelet reports none.
	Health string
	Taints []index.Taint
}

// HeldDevices lists, for every pod that is bound and has not finished, the
// published devices of its allocated claims that are reserved for it
// (admin-access results left out: they hold no device).
func HeldDevices(s *index.Snapshot) []Held { return heldDevices(s, false) }

// HeldWithSignal is HeldDevices without the devices that have neither a
// health report nor a taint: what the held families show. Where no device
// is tainted, a pod whose kubelet reports no device health is skipped
// before its claims are resolved (most pods, on most clusters).
func HeldWithSignal(s *index.Snapshot) []Held { return heldDevices(s, true) }

func heldDevices(s *index.Snapshot, signalOnly bool) []Held {
	var out []Held
	tainted := s.AnyDeviceTaints()
	for _, p := range s.Pods {
		if p.Terminal() || p.Obj.Spec.NodeName == "" || !s.Owns(p.Key.Namespace) {
			continue
		}
		health := deviceHealth(p.Obj)
		if signalOnly && health == nil && !tainted {
			continue
		}
		for _, pc := range s.ResolvePodClaims(p) {
			c := pc.Claim
			if c == nil || !c.Allocated() || !c.ReservedForPod(p) {
				continue
			}
			for _, r := range c.Results {
				d := s.Device(r.Device)
				if r.AdminAccess || d == nil {
					continue
				}
				h := Held{Pod: p, Claim: c, Device: d, Health: health[r.Device], Taints: s.Taints(d)}
				if signalOnly && h.Health == "" && len(h.Taints) == 0 {
					continue
				}
				out = append(out, h)
			}
		}
	}
	return out
}

// deviceHealth reads the health the kubelet reports per DRA device in the
// pod's container statuses. A resource ID of DRA is driver/pool/device; a
// pool name may itself contain slashes. When containers disagree, the worst
// wins.
func deviceHealth(pod *corev1.Pod) map[index.DeviceKey]string {
	var out map[index.DeviceKey]string
	for _, list := range [2][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			for _, rs := range list[i].AllocatedResourcesStatus {
				if !strings.HasPrefix(string(rs.Name), "claim:") {
					continue // a device-plugin resource
				}
				for _, h := range rs.Resources {
					id := string(h.ResourceID)
					first, last := strings.Index(id, "/"), strings.LastIndex(id, "/")
					if first <= 0 || last <= first {
						continue
					}
					k := index.DeviceKey{Driver: id[:first], Pool: id[first+1 : last], Device: id[last+1:]}
					v := strings.ToLower(string(h.Health))
					if healthRank[v] == 0 {
						v = "unknown"
					}
					if out == nil {
						out = map[index.DeviceKey]string{}
					}
					if healthRank[v] > healthRank[out[k]] {
						out[k] = v
					}
				}
			}
		}
	}
	return out
}

// healthRank orders the kubelet's health words, the worst highest.
var healthRank = map[string]int{"healthy": 1, "unknown": 2, "unhealthy": 3}
