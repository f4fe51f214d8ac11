package agent

// What the join finds per GPU: pod memory, isolation violations, the
// inventory and the conflicts between the API server and the kubelet.

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// podMemory sums the processes' memory per pod. Processes of no pod, of a
// pod this node does not know, or all of them when /proc is not visible,
// add up under empty pod labels (pod_uid kept when known), so that the
// series of a GPU add up to what its processes use.
func podMemory(e gpu.Entity, podOf map[int]string, pods map[string]*corev1.Pod) []PodMemory {
	sums := map[string]float64{}
	for _, p := range e.Processes {
		if p.MemoryUnknown {
			continue // NVML_VALUE_NOT_AVAILABLE: no figure to add
		}
		sums[podOf[p.PID]] += p.UsedMemoryBytes
	}
	uids := make([]string, 0, len(sums))
	for uid := range sums {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	var out []PodMemory
	for _, uid := range uids {
		m := PodMemory{GPUUUID: e.UUID, PodUID: uid, Bytes: sums[uid]}
		if p := pods[uid]; p != nil {
			m.Namespace, m.Pod = p.Namespace, p.Name
		}
		out = append(out, m)
	}
	return out
}

// violations: a process of a pod that holds neither this entity nor (for a
// MIG instance) its parent GPU, in either lane and either source.
func violations(e gpu.Entity, podOf map[int]string, pods map[string]*corev1.Pod, allowed map[string]map[string]bool) []Violation {
	seen := map[string]bool{}
	var out []Violation
	for _, p := range e.Processes {
		uid := podOf[p.PID]
		if uid == "" || seen[uid] || allowed[e.UUID][uid] || (e.ParentUUID != "" && allowed[e.ParentUUID][uid]) {
			continue
		}
		seen[uid] = true
		v := Violation{GPUUUID: e.UUID, PodUID: uid}
		if pod := pods[uid]; pod != nil {
			v.Namespace, v.Pod = pod.Namespace, pod.Name
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PodUID < out[j].PodUID })
	return out
}

func inventory(entities []gpu.Entity, refs map[string]DeviceRef, devices []*sliceDevice) []InventoryEntry {
	seen := map[string]bool{}
	var out []InventoryEntry
	for _, e := range entities {
		seen[e.UUID] = true
		out = append(out, InventoryEntry{UUID: e.UUID, ParentUUID: e.ParentUUID, Product: e.Product, DeviceRef: refs[e.UUID]})
	}
	// Devices the slices publish that the source did not read (source
	// down, or a GPU DCGM does not see): listed from the slice alone.
	for _, d := range devices {
		if d.uuid == "" || seen[d.uuid] {
			continue
		}
		seen[d.uuid] = true
		out = append(out, InventoryEntry{UUID: d.uuid, ParentUUID: d.parentUUID, Product: d.product, DeviceRef: d.DeviceRef})
	}
	return out
}

func conflicts(in Inputs, api []apiDevice, kubeletDRA, devicePlugin []Holder, byUUID map[string]*sliceDevice, held map[string][]Holder) []Conflict {
	var out []Conflict
	if in.Kubelet != nil && in.Kubelet.Dynamic {
		prepared := map[string]bool{}
		for _, kp := range in.Kubelet.Pods {
			for _, c := range kp.Claims {
				prepared[strings.Join([]string{kp.Namespace, kp.Name, c.ClaimName, c.Driver, c.Pool, c.Device}, "/")] = true
			}
		}
		for _, d := range api {
			key := strings.Join([]string{d.Namespace, d.podName, d.Claim, d.Driver, d.Pool, d.Device}, "/")
			if d.running && d.inUse && !prepared[key] {
				out = append(out, Conflict{Namespace: d.Namespace, Claim: d.Claim, Pod: d.Pod, PodUID: d.PodUID, DeviceRef: d.DeviceRef, GPUUUID: d.GPUUUID, Reason: ReasonNotPrepared})
			}
		}
	}
	if in.Kubelet != nil {
		uids := map[string]string{}
		for _, p := range in.Pods {
			uids[p.Namespace+"/"+p.Name] = string(p.UID)
		}
		for _, kp := range in.Kubelet.Pods {
			for _, c := range kp.Claims {
				ref := DeviceRef{Driver: c.Driver, Pool: c.Pool, Device: c.Device}
				if claimAllocates(in.Claims[ClaimKey(c.ClaimNamespace, c.ClaimName)], ref) {
					continue
				}
				uuid := ""
				for u, d := range byUUID {
					if d.DeviceRef == ref {
						uuid = u
					}
				}
				out = append(out, Conflict{Namespace: c.ClaimNamespace, Claim: c.ClaimName, Pod: kp.Name, PodUID: uids[kp.Namespace+"/"+kp.Name], DeviceRef: ref, GPUUUID: uuid, Reason: ReasonPreparedWithoutClaim})
			}
		}
	}
	out = append(out, driverPreparedWithoutClaim(in, byUUID)...)
	dpHeld := map[string]bool{}
	for _, h := range devicePlugin {
		dpHeld[h.GPUUUID] = true
	}
	for uuid, hs := range held {
		draHeld := false
		for _, h := range hs {
			draHeld = draHeld || draLane(h.Lane)
		}
		if !draHeld || !dpHeld[uuid] {
			continue
		}
		var ref DeviceRef
		if d := byUUID[uuid]; d != nil {
			ref = d.DeviceRef
		}
		for _, h := range hs {
			out = append(out, Conflict{Namespace: h.Namespace, Claim: h.Claim, Pod: h.Pod, PodUID: h.PodUID, DeviceRef: ref, GPUUUID: uuid, Reason: ReasonBothLanes})
		}
	}
	sort.Slice(out, func(i, j int) bool { return conflictKey(out[i]) < conflictKey(out[j]) })
	return out
}

func conflictKey(c Conflict) string {
	return strings.Join([]string{c.Reason, c.GPUUUID, c.Namespace, c.Claim, c.Pod, c.PodUID, c.Driver, c.Pool, c.Device}, "\xff")
}

func claimAllocates(c *resourceapi.ResourceClaim, ref DeviceRef) bool {
	if c == nil || c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == ref.Driver && r.Pool == ref.Pool && r.Device == ref.Device {
			return true
		}
	}
	return false
}

// driverPreparedWithoutClaim lists the devices the driver's checkpoint holds
// prepared for a claim the API server no longer has (or has under another
// UID) and the kubelet does not report: nothing will unprepare them.
func driverPreparedWithoutClaim(in Inputs, byUUID map[string]*sliceDevice) []Conflict {
	if len(in.DriverPrepared) == 0 {
		return nil
	}
	reported := map[string]bool{}
	if in.Kubelet != nil {
		for _, kp := range in.Kubelet.Pods {
			for _, c := range kp.Claims {
				reported[ClaimKey(c.ClaimNamespace, c.ClaimName)] = true
			}
		}
	}
	var out []Conflict
	for _, pc := range in.DriverPrepared {
		key := ClaimKey(pc.Namespace, pc.Name)
		if c := in.Claims[key]; (c != nil && string(c.UID) == pc.UID) || reported[key] {
			continue
		}
		for _, ref := range pc.Devices {
			uuid := ""
			for u, d := range byUUID {
				if d.DeviceRef == ref {
					uuid = u
				}
			}
			out = append(out, Conflict{Namespace: pc.Namespace, Claim: pc.Name, DeviceRef: ref, GPUUUID: uuid, Reason: ReasonDriverPreparedWithoutClaim})
		}
	}
	return out
}
