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

// HeldWithSignal lists, for every pod that is bound and has not finished,
// the published devices of its allocated claims that are reserved for it
// (admin-access results left out: they hold no device) and that have a
// health report or a taint: what the held families show. Where no device
// is tainted, a pod whose kubelet reports no device health is skipped
// before its claims are resolved (most pods, on most clusters).
func HeldWithSignal(s *index.Snapshot) []Held {
	var out []Held
	tainted := s.AnyDeviceTaints()
	for _, p := range s.Pods {
		out = append(out, heldBy(s, p, tainted)...)
	}
	return out
}

// HeldBy is HeldWithSignal for one pod: what it reads beyond the pod are
// the claims it resolves to and their devices (the held family's entry of
// the fan-out table, collector/fanout.go).
func HeldBy(s *index.Snapshot, p *index.Pod) []Held {
	return heldBy(s, p, s.AnyDeviceTaints())
}

// ReportsDeviceHealth reports whether the kubelet reports the health of a
// device of the pod's claims.
func ReportsDeviceHealth(p *index.Pod) bool { return !deviceHealth(p.Obj).empty() }

func heldBy(s *index.Snapshot, p *index.Pod, tainted bool) []Held {
	if p.Terminal() || p.Obj.Spec.NodeName == "" || !s.Owns(p.Key.Namespace) {
		return nil
	}
	health := deviceHealth(p.Obj)
	if health.empty() && !tainted {
		return nil
	}
	var out []Held
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
			h := Held{Pod: p, Claim: c, Device: d, Health: health.of(c, r), Taints: s.Taints(d)}
			if h.Health == "" && len(h.Taints) == 0 {
				continue
			}
			out = append(out, h)
		}
	}
	return out
}

// podHealth is the health the kubelet reports of the devices of a pod's
// claims, in the pod's container statuses (allocatedResourcesStatus,
// KEP-4680). The kubelet names a device by its first CDI device ID, and by
// driver/pool/device only when the device has none (kubernetes v1.37
// pkg/kubelet/cm/dra/manager.go, buildResourceHealth), under a status named
// "claim:<pod claim>" or "claim:<pod claim>/<request>"; it reports a CDI ID
// once per status even when several devices share it.
type podHealth struct {
	// devices: reports that name a device (driver/pool/device).
	devices map[index.DeviceKey]string
	// cdi: reports that name a CDI device, by claim and request ("" for
	// every request of the claim).
	cdi map[claimRequest][]cdiReport
}

type claimRequest struct{ claim, request string }

type cdiReport struct{ name, health string }

// deviceHealth reads what the kubelet reports of the pod's devices. When
// containers disagree, the worst wins.
func deviceHealth(pod *corev1.Pod) podHealth {
	var h podHealth
	for _, list := range [2][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			for _, rs := range list[i].AllocatedResourcesStatus {
				ref, ok := strings.CutPrefix(string(rs.Name), "claim:")
				if !ok {
					continue // a device-plugin resource
				}
				podClaim, request, _ := strings.Cut(ref, "/")
				for _, r := range rs.Resources {
					v := strings.ToLower(string(r.Health))
					if healthRank[v] == 0 {
						v = "unknown"
					}
					id := string(r.ResourceID)
					if vendorClass, name, isCDI := strings.Cut(id, "="); isCDI && strings.Contains(vendorClass, "/") {
						k := claimRequest{claimName(pod, podClaim), request}
						if h.cdi == nil {
							h.cdi = map[claimRequest][]cdiReport{}
						}
						h.cdi[k] = append(h.cdi[k], cdiReport{name: name, health: v})
						continue
					}
					first, last := strings.Index(id, "/"), strings.LastIndex(id, "/")
					if first <= 0 || last <= first {
						continue
					}
					// A pool name may itself contain slashes.
					k := index.DeviceKey{Driver: id[:first], Pool: id[first+1 : last], Device: id[last+1:]}
					if h.devices == nil {
						h.devices = map[index.DeviceKey]string{}
					}
					h.devices[k] = worse(h.devices[k], v)
				}
			}
		}
	}
	return h
}

func (h podHealth) empty() bool { return h.devices == nil && h.cdi == nil }

// of returns the kubelet's word for a result of the pod's claim c, "" when
// it reports none. A CDI-named report belongs to the device whose name ends
// its CDI name (the NVIDIA driver's and the example driver's per-claim
// names end in the device's), or, when the claim's request has one device,
// to that one; a report several devices could have made is nobody's.
func (h podHealth) of(c *index.Claim, r index.Result) string {
	v := h.devices[r.Device]
	for _, request := range []string{"", r.Request} {
		reports := h.cdi[claimRequest{c.Key.Name, request}]
		if len(reports) == 0 {
			continue
		}
		var devices []index.DeviceKey
		for _, o := range c.Results {
			if request == "" || o.Request == request {
				devices = append(devices, o.Device)
			}
		}
		for _, rep := range reports {
			switch {
			case namesDevice(rep.name, r.Device.Device):
				v = worse(v, rep.health)
			case len(devices) == 1 && devices[0] == r.Device && !namesAnyDevice(rep.name, c.Results):
				v = worse(v, rep.health)
			}
		}
	}
	return v
}

// namesDevice says whether a CDI device name (after the "=") ends in the
// device's name, after a separator.
func namesDevice(cdiName, device string) bool {
	if cdiName == device {
		return true
	}
	rest, ok := strings.CutSuffix(cdiName, device)
	return ok && (strings.HasSuffix(rest, "-") || strings.HasSuffix(rest, "_") || strings.HasSuffix(rest, "."))
}

func namesAnyDevice(cdiName string, results []index.Result) bool {
	for _, o := range results {
		if namesDevice(cdiName, o.Device.Device) {
			return true
		}
	}
	return false
}

// claimName resolves an entry of pod.spec.resourceClaims to the claim's
// name, as the kubelet does: the pod status's generated name, else a named
// claim's.
func claimName(pod *corev1.Pod, podClaim string) string {
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == podClaim && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name == podClaim && rc.ResourceClaimName != nil {
			return *rc.ResourceClaimName
		}
	}
	return ""
}

func worse(a, b string) string {
	if healthRank[b] > healthRank[a] {
		return b
	}
	return a
}

// healthRank orders the kubelet's health words, the worst highest.
var healthRank = map[string]int{"healthy": 1, "unknown": 2, "unhealthy": 3}
