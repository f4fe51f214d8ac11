package agent

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// Inputs is everything the node knows at one scrape.
type Inputs struct {
	Node string
	// Pods, Slices: the node's, from node-scoped watches (trimmed as the
	// informers trim them).
	Pods   []*corev1.Pod
	Slices []*objects.Slice
	// Claims of the node's pods (and of what the kubelet reports), by
	// namespace/name; a name the API does not know is absent.
	Claims map[string]*resourceapi.ResourceClaim

	// Kubelet is nil when the pod-resources API failed.
	Kubelet *podresources.Report
	// GPU is nil when the GPU source failed.
	Source string
	GPU    *gpu.Reading
	// Candidates are the libraries the source may serve from, with
	// their state (nil for a source of one library).
	Candidates []gpu.CandidateStatus
	// PodOfPID maps a GPU process to its pod UID ("" for none); nil when
	// the host's processes are not visible.
	PodOfPID map[int]string
	// ProcVisible: the host's processes are visible under the proc root.
	ProcVisible bool
	// DevicePluginResources are the kubelet's device-plugin resources
	// that are GPUs (--device-plugin.resources, as the exporter reads it).
	DevicePluginResources dra.Resources
	// DriverPrepared are the claims the driver's kubelet plugin holds
	// prepared, from its checkpoint; nil when it is not read.
	DriverPrepared []PreparedClaim
}

// ClaimKey is the key of Inputs.Claims.
func ClaimKey(namespace, name string) string { return dra.ClaimKey(namespace, name) }

type sliceDevice struct {
	DeviceRef
	uuid, parentUUID, profile, product string
}

// Join attributes the node's GPUs. It never fails: missing or odd inputs
// give fewer series, not an error.
func Join(in Inputs) *View {
	v := &View{Node: in.Node, Source: in.Source, SourceUp: in.GPU != nil, PodResourcesUp: in.Kubelet != nil, ProcVisible: in.ProcVisible, Candidates: in.Candidates}
	if in.GPU != nil {
		v.Groups = in.GPU.Groups
		if in.GPU.Source != "" {
			v.Source = in.GPU.Source
		}
	}
	devices := newestDevices(in.Slices)
	byRef := map[DeviceRef]*sliceDevice{}
	byUUID := map[string]*sliceDevice{}
	for _, d := range devices {
		byRef[d.DeviceRef] = d
		if d.uuid != "" {
			byUUID[d.uuid] = d
		}
	}
	pods := map[string]*corev1.Pod{}
	podsByName := map[string]*corev1.Pod{}
	for _, p := range in.Pods {
		// The watch selects the node's pods; a trimmed pod that uses no
		// GPU keeps no node name.
		if p == nil || (p.Spec.NodeName != "" && p.Spec.NodeName != in.Node) {
			continue
		}
		pods[string(p.UID)] = p
		podsByName[p.Namespace+"/"+p.Name] = p
	}

	// Entities of the source, matched to slice devices.
	var entities []gpu.Entity
	if in.GPU != nil {
		entities = in.GPU.Entities
	}
	entityRef := map[string]DeviceRef{}
	matched := map[DeviceRef]bool{}
	heldDevices := heldRefs(in)
	for _, e := range entities {
		if d := byUUID[e.UUID]; d != nil {
			entityRef[e.UUID] = d.DeviceRef
			matched[d.DeviceRef] = true
		}
	}
	// Matching one instance can leave another a single candidate: go on
	// until a pass matches none.
	holdersOf := podHolders(in, podsByName)
	for progress := true; progress; {
		progress = false
		for _, e := range entities {
			if _, ok := entityRef[e.UUID]; ok || e.MIG == nil {
				continue
			}
			if d := matchDynamicMIG(e, devices, matched, heldDevices, podsOn(e, in.PodOfPID), holdersOf); d != nil {
				entityRef[e.UUID] = d.DeviceRef
				matched[d.DeviceRef] = true
				// A dynamic-MIG slice device has no uuid: the source's
				// entity gives it one, so claims on it resolve.
				d.uuid = e.UUID
				byUUID[e.UUID] = d
				progress = true
			}
		}
	}

	claims := dra.NewClaimSet(in.Claims)
	apiHolders, apiDevices := apiHolders(in, pods, claims, byRef)
	var kubeletDRA, devicePlugin []Holder
	if in.Kubelet != nil {
		kubeletDRA, devicePlugin = kubeletHolders(in, podsByName, byRef, entities)
	}
	if in.Kubelet != nil {
		dyn := in.Kubelet.Dynamic
		if dyn || anyRunning(apiDevices) {
			v.Dynamic = &dyn
		}
	}
	draHolders := apiHolders
	if in.Kubelet != nil && in.Kubelet.Dynamic {
		draHolders = kubeletDRA
	}
	v.Holders = dedupeHolders(append(append([]Holder{}, draHolders...), devicePlugin...))
	held := map[string][]Holder{}
	for _, h := range v.Holders {
		if h.GPUUUID != "" {
			held[h.GPUUUID] = append(held[h.GPUUUID], h)
		}
	}
	// Whoever holds a GPU in either source may use it: the isolation check
	// reads both the kubelet and the API.
	allowed := map[string]map[string]bool{}
	for _, h := range append(append(append([]Holder{}, apiHolders...), kubeletDRA...), devicePlugin...) {
		if allowed[h.GPUUUID] == nil {
			allowed[h.GPUUUID] = map[string]bool{}
		}
		allowed[h.GPUUUID][h.PodUID] = true
	}
	// The MPS server of a claim runs in the DRA driver's control-daemon
	// pod, which holds no claim: it may use the GPUs of the claim it
	// serves.
	for uid, refs := range mpsDaemons(pods, in.Claims) {
		for _, ref := range refs {
			if d := byRef[ref]; d != nil && d.uuid != "" {
				if allowed[d.uuid] == nil {
					allowed[d.uuid] = map[string]bool{}
				}
				allowed[d.uuid][uid] = true
			}
		}
	}
	instancesHeld := map[string]bool{}
	for _, e := range entities {
		if e.MIG != nil && len(held[e.UUID]) > 0 {
			instancesHeld[e.ParentUUID] = true
		}
	}

	for _, e := range entities {
		g := GPU{Entity: e, DeviceRef: entityRef[e.UUID], Lane: LaneUnallocated}
		hs := held[e.UUID]
		for _, h := range hs {
			if draLane(h.Lane) {
				g.Lane = h.Lane
			} else if g.Lane == LaneUnallocated {
				g.Lane = LaneDevicePlugin
			}
		}
		if len(hs) == 0 && instancesHeld[e.UUID] {
			g.Lane = LaneDRA
		}
		if len(hs) == 1 {
			h := hs[0]
			g.Holder = &h
		}
		v.GPUs = append(v.GPUs, g)
		v.PodMemory = append(v.PodMemory, podMemory(e, in.PodOfPID, pods)...)
		if in.PodOfPID != nil {
			v.Violations = append(v.Violations, violations(e, in.PodOfPID, pods, allowed)...)
		}
	}
	v.Inventory = inventory(entities, entityRef, devices)
	v.Conflicts = conflicts(in, apiDevices, kubeletDRA, devicePlugin, byUUID, held)
	return v
}

// newestDevices returns the devices of each pool's newest generation.
func newestDevices(slices []*objects.Slice) []*sliceDevice {
	newest := map[string]int64{}
	for _, s := range slices {
		k := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if g, ok := newest[k]; !ok || s.Spec.Pool.Generation > g {
			newest[k] = s.Spec.Pool.Generation
		}
	}
	var out []*sliceDevice
	for _, s := range slices {
		if s.Spec.Pool.Generation != newest[s.Spec.Driver+"/"+s.Spec.Pool.Name] {
			continue
		}
		for i, d := range s.Spec.Devices {
			attrs := s.Attributes[i]
			out = append(out, &sliceDevice{
				DeviceRef:  DeviceRef{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name},
				uuid:       stringAttr(attrs, s.Spec.Driver, "uuid"),
				parentUUID: stringAttr(attrs, s.Spec.Driver, "parentUUID"),
				profile:    stringAttr(attrs, s.Spec.Driver, "profile"),
				product:    stringAttr(attrs, s.Spec.Driver, "productName"),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return refLess(out[i].DeviceRef, out[j].DeviceRef) })
	return out
}

func stringAttr(attrs devattr.Attributes, driver, name string) string {
	for _, k := range []resourceapi.QualifiedName{resourceapi.QualifiedName(name), resourceapi.QualifiedName(driver + "/" + name)} {
		if a, ok := attrs.Get(k); ok && a.StringValue != nil {
			return *a.StringValue
		}
	}
	return ""
}

// matchDynamicMIG finds the slice device of a MIG instance that the driver
// published without a uuid (dynamic MIG: the instance is created on
// prepare): same parent GPU and profile; of several, the one whose name
// ends in the instance's placement start (gpu-<minor>-mig-<profile>-<id>-
// <start>), which NVML gives privileged callers only; else, of those a
// claim holds (the driver creates an instance for an allocated device
// only), the one held by the pod a process on the instance belongs to, or
// the only one left.
func matchDynamicMIG(e gpu.Entity, devices []*sliceDevice, taken, held map[DeviceRef]bool, podsOnE map[string]bool, holdersOf map[DeviceRef]map[string]bool) *sliceDevice {
	var candidates, heldCandidates []*sliceDevice
	for _, d := range devices {
		if d.uuid == "" && !taken[d.DeviceRef] && d.parentUUID == e.ParentUUID && d.profile == e.MIG.Profile {
			candidates = append(candidates, d)
			if held[d.DeviceRef] {
				heldCandidates = append(heldCandidates, d)
			}
		}
	}
	if len(candidates) == 1 {
		return candidates[0]
	}
	if e.MIG.PlacementStart >= 0 {
		suffix := fmt.Sprintf("-%d", e.MIG.PlacementStart)
		for _, d := range candidates {
			if strings.HasSuffix(d.Device, suffix) {
				return d
			}
		}
	}
	var byProcess []*sliceDevice
	for _, d := range heldCandidates {
		for uid := range podsOnE {
			if holdersOf[d.DeviceRef][uid] {
				byProcess = append(byProcess, d)
				break
			}
		}
	}
	if len(byProcess) == 1 {
		return byProcess[0]
	}
	if len(heldCandidates) == 1 {
		return heldCandidates[0]
	}
	return nil
}

// mpsDaemonPrefix starts the name of the DRA driver's MPS control daemon
// for a claim: a Deployment mps-control-daemon-<claim UID>-<hash>
// (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/sharing.go,
// MpsControlDaemonNameFmt and GetMpsControlDaemonID), whose pod runs the
// claim's nvidia-cuda-mps-server.
const mpsDaemonPrefix = "mps-control-daemon-"

// mpsDaemons returns, per MPS control-daemon pod of the node, the devices
// of the claim it serves.
func mpsDaemons(pods map[string]*corev1.Pod, claims map[string]*resourceapi.ResourceClaim) map[string][]DeviceRef {
	out := map[string][]DeviceRef{}
	for uid, p := range pods {
		rest, ok := strings.CutPrefix(p.Name, mpsDaemonPrefix)
		if !ok {
			continue
		}
		for _, c := range claims {
			if c.UID == "" || !strings.HasPrefix(rest, string(c.UID)+"-") || c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				out[uid] = append(out[uid], DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
			}
		}
	}
	return out
}

// podsOn returns the UIDs of the pods with a process on an entity.
func podsOn(e gpu.Entity, podOf map[int]string) map[string]bool {
	out := map[string]bool{}
	for _, p := range e.Processes {
		if uid := podOf[p.PID]; uid != "" {
			out[uid] = true
		}
	}
	return out
}
