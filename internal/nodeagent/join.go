package nodeagent

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/podresources"
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

// nvidiaDevice is the device-plugin ID of a GPU by its device file, as
// some plugins (GKE's) name GPUs.
var nvidiaDevice = regexp.MustCompile(`^nvidia([0-9]+)$`)

// GKE's plugin names a MIG instance nvidia<minor>/gi<GPU instance>, with
// /vgpu<n> under time-sharing, and a time-shared GPU nvidia<minor>/vgpu<n>
// (dcgm-exporter kubernetes.go, gkeMigDeviceIDRegex and "/vgpu").
var gkeMIG = regexp.MustCompile(`^nvidia([0-9]+)/gi([0-9]+)(/vgpu[0-9]+)?$`)

// NVIDIA's plugin with DEVICE_ID_STRATEGY=index names a GPU by its NVML
// index and a MIG device <gpu index>:<its position among the GPU's MIG
// devices> (k8s-device-plugin, setMigDeviceMapEntry: "%v:%v").
var (
	indexGPU = regexp.MustCompile(`^([0-9]+)$`)
	indexMIG = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
)

// devicePluginResource reports whether a device-plugin resource is a GPU
// one: a configured resource, or, with nvidia.com/gpu configured, the
// NVIDIA plugin's other names for its GPUs: nvidia.com/gpu.shared
// (time-slicing or MPS with renameByDefault) and nvidia.com/mig-<profile>
// (the mixed MIG strategy; dcgm-exporter takes the nvidia.com/mig- prefix
// the same way, kubernetes.go iterateGPUDevices).
func devicePluginResource(configured dra.Resources, name string) bool {
	if configured.Has(name) {
		return true
	}
	return configured.Has("nvidia.com/gpu") && (name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-"))
}

// devicePluginGPU returns the GPU or MIG UUID of a device-plugin device ID,
// "" when it names none. NVIDIA's device plugin uses the UUID, and with
// time-slicing or MPS the UUID and a replica number, GPU-<uuid>::<n>
// (dcgm-exporter strips it the same way: kubernetes.go ~697-701); other
// plugins name the device file, nvidia<minor>, which the GPU source maps.
func devicePluginGPU(id string, entities []gpu.Entity) string {
	id, _, _ = strings.Cut(id, "::")
	if n, ok := numbers(gkeMIG, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG != nil && e.Minor == n[0] && e.MIG.GPUInstanceID == n[1] })
	}
	id, _, _ = strings.Cut(id, "/vgpu")
	if n, ok := numbers(indexMIG, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG != nil && e.Index == n[0] && e.MIG.DeviceIndex == n[1] })
	}
	if n, ok := numbers(indexGPU, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG == nil && e.Index == n[0] })
	}
	if n, ok := numbers(nvidiaDevice, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG == nil && e.Minor == n[0] })
	}
	if strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-") {
		return id
	}
	return ""
}

// numbers returns the numbers re's groups capture in s.
func numbers(re *regexp.Regexp, s string) ([]int, bool) {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	out := make([]int, 0, len(m)-1)
	for _, g := range m[1:] {
		if g == "" || !unicode.IsDigit(rune(g[0])) {
			continue // an optional suffix such as /vgpu<n>
		}
		n, err := strconv.Atoi(g)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// entityUUID returns the UUID of the first entity that matches, "" when
// none does.
func entityUUID(entities []gpu.Entity, match func(gpu.Entity) bool) string {
	for _, e := range entities {
		if match(e) {
			return e.UUID
		}
	}
	return ""
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
