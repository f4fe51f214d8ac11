package agent

// Who holds each GPU: the pods the API server says hold it (claims
// allocated and reserved), the kubelet's pod-resources in either lane.

import (
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// podHolders returns, per device, the UIDs of the pods a claim reserves it
// for or the kubelet prepared it for.
func podHolders(in Inputs, podsByName map[string]*corev1.Pod) map[DeviceRef]map[string]bool {
	out := map[DeviceRef]map[string]bool{}
	add := func(ref DeviceRef, uid string) {
		if out[ref] == nil {
			out[ref] = map[string]bool{}
		}
		out[ref][uid] = true
	}
	for _, c := range in.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			for _, rf := range c.Status.ReservedFor {
				if rf.Resource == "pods" {
					add(DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device}, string(rf.UID))
				}
			}
		}
	}
	if in.Kubelet != nil {
		for _, kp := range in.Kubelet.Pods {
			p := podsByName[kp.Namespace+"/"+kp.Name]
			if p == nil {
				continue
			}
			for _, c := range kp.Claims {
				add(DeviceRef{Driver: c.Driver, Pool: c.Pool, Device: c.Device}, string(p.UID))
			}
		}
	}
	return out
}

// heldRefs are the devices of the node's claims: allocated, or prepared
// by the kubelet.
func heldRefs(in Inputs) map[DeviceRef]bool {
	out := map[DeviceRef]bool{}
	for _, c := range in.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			out[DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device}] = true
		}
	}
	if in.Kubelet != nil {
		for _, p := range in.Kubelet.Pods {
			for _, c := range p.Claims {
				out[DeviceRef{Driver: c.Driver, Pool: c.Pool, Device: c.Device}] = true
			}
		}
	}
	return out
}

// apiDevice is a device the API server says a pod of this node holds.
type apiDevice struct {
	Holder
	DeviceRef
	running bool
	podName string
	// inUse: a container the kubelet keeps running uses the claim (not
	// only init containers), so the kubelet reports it prepared.
	inUse bool
}

// apiHolders reads the claim allocations: a claim of a non-terminal pod of
// this node, allocated and reserved for it (itself or its PodGroup), holds
// its devices of this node.
func apiHolders(in Inputs, pods map[string]*corev1.Pod, claims *dra.ClaimSet, byRef map[DeviceRef]*sliceDevice) ([]Holder, []apiDevice) {
	var holders []Holder
	var devices []apiDevice
	for _, uid := range slices.Sorted(maps.Keys(pods)) {
		p := pods[uid]
		if terminal(p) {
			continue
		}
		for _, pc := range dra.PodClaims[*resourceapi.ResourceClaim](claims, p) {
			c := pc.Claim
			if c == nil || c.Status.Allocation == nil || !dra.ReservedForPod(c, p) {
				continue
			}
			lane := LaneDRA
			if pc.Extended() {
				lane = LaneDRAExtended
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				ref := DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
				d := byRef[ref]
				if d == nil {
					continue // another node's device, or a driver without a slice here
				}
				h := Holder{GPUUUID: d.uuid, Lane: lane, Namespace: p.Namespace, Pod: p.Name, PodUID: uid, Claim: c.Name}
				holders = append(holders, h)
				devices = append(devices, apiDevice{Holder: h, DeviceRef: ref, running: p.Status.Phase == corev1.PodRunning, podName: p.Name,
					inUse: dra.UsedByContainers(p, pc)})
			}
		}
	}
	return holders, devices
}

func anyRunning(ds []apiDevice) bool {
	for _, d := range ds {
		if d.running {
			return true
		}
	}
	return false
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// claimLane is the lane of a pod's claim the kubelet reports: dra-extended
// for the pod's extended-resource claim, dra otherwise (and for a pod the
// agent does not know).
func claimLane(p *corev1.Pod, claim string) string {
	if p != nil {
		if st := p.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName == claim {
			return LaneDRAExtended
		}
	}
	return LaneDRA
}

// kubeletHolders reads the pod-resources report.
func kubeletHolders(in Inputs, podsByName map[string]*corev1.Pod, byRef map[DeviceRef]*sliceDevice, entities []gpu.Entity) (draHolders, devicePlugin []Holder) {
	for _, kp := range in.Kubelet.Pods {
		uid := ""
		p := podsByName[kp.Namespace+"/"+kp.Name]
		if p != nil {
			uid = string(p.UID)
		}
		for _, d := range kp.Devices {
			if !devicePluginResource(in.DevicePluginResources, d.Resource) {
				continue
			}
			uuid := devicePluginGPU(d.ID, entities)
			if uuid == "" {
				continue
			}
			devicePlugin = append(devicePlugin, Holder{GPUUUID: uuid, Lane: LaneDevicePlugin, Namespace: kp.Namespace, Pod: kp.Name, PodUID: uid})
		}
		for _, c := range kp.Claims {
			d := byRef[DeviceRef{Driver: c.Driver, Pool: c.Pool, Device: c.Device}]
			if d == nil {
				continue
			}
			draHolders = append(draHolders, Holder{GPUUUID: d.uuid, Lane: claimLane(p, c.ClaimName), Namespace: kp.Namespace, Pod: kp.Name, PodUID: uid, Claim: c.ClaimName})
		}
	}
	return draHolders, devicePlugin
}

func dedupeHolders(hs []Holder) []Holder {
	seen := map[Holder]bool{}
	out := hs[:0]
	for _, h := range hs {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return holderLess(out[i], out[j]) })
	return out
}

func holderLess(a, b Holder) bool {
	return strings.Join([]string{a.GPUUUID, a.Lane, a.Namespace, a.Pod, a.PodUID, a.Claim}, "\xff") <
		strings.Join([]string{b.GPUUUID, b.Lane, b.Namespace, b.Pod, b.PodUID, b.Claim}, "\xff")
}

func refLess(a, b DeviceRef) bool {
	if a.Driver != b.Driver {
		return a.Driver < b.Driver
	}
	if a.Pool != b.Pool {
		return a.Pool < b.Pool
	}
	return a.Device < b.Device
}
