package agent

import (
	"fmt"
	"hash/fnv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

const (
	node = "gpu-node-1"
	gpuA = "GPU-aaaaaaaa-0000-4000-8000-000000000000"
	gpuB = "GPU-bbbbbbbb-0000-4000-8000-000000000000"
)

// inputs is a node with two GPUs (minors 0 and 1) published by the DRA
// driver, each busy with one process, pods and claims as given.
func inputs(objs ...any) Inputs {
	in := Inputs{Node: node, Source: "fake", Claims: map[string]*resourceapi.ResourceClaim{}, ProcVisible: true,
		DevicePluginResources: dra.Resources{"nvidia.com/gpu"}, Kubelet: &podresources.Report{}}
	var t objects.Trimmer
	slice := nvidia.Slice(node+"-"+testobj.Driver, node, 1,
		nvidia.WithMinor(nvidia.GPUDevice("gpu-0", gpuA, "NVIDIA H100 80GB HBM3"), 0),
		nvidia.WithMinor(nvidia.GPUDevice("gpu-1", gpuB, "NVIDIA H100 80GB HBM3"), 1))
	in.Slices = []*objects.Slice{t.Trim(slice).(*objects.Slice)}
	for _, o := range objs {
		switch o := t.Trim(o).(type) {
		case *corev1.Pod:
			in.Pods = append(in.Pods, o)
		case *resourceapi.ResourceClaim:
			in.Claims[ClaimKey(o.Namespace, o.Name)] = o
		}
	}
	in.GPU = &gpu.Reading{Source: "fake", Entities: []gpu.Entity{
		{UUID: gpuA, Minor: 0, Values: map[gpu.FieldID]float64{gpu.FieldGPUUtil: 90}, Processes: []gpu.Process{{PID: 100, UsedMemoryBytes: 1 << 30}}},
		{UUID: gpuB, Minor: 1, Values: map[gpu.FieldID]float64{gpu.FieldGPUUtil: 80}, Processes: []gpu.Process{{PID: 200, UsedMemoryBytes: 2 << 30}}},
	}}
	return in
}

func pod(name string) *corev1.Pod {
	h := fnv.New32a()
	h.Write([]byte(name))
	uid := fmt.Sprintf("%08x-0000-4000-8000-000000000000", h.Sum32())
	p := testobj.Running(testobj.Bound(testobj.Pod(name, uid), node))
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}

func allocated(name string, p *corev1.Pod, device string) *resourceapi.ResourceClaim {
	c := testobj.Claim(name, "c-"+name, testobj.Request("gpu", testobj.GPUClassName))
	return testobj.ReservedFor(testobj.Allocated(c, node, testobj.T0, testobj.Result("gpu", node, device)), p)
}

func lane(v *View, uuid string) string {
	for _, g := range v.GPUs {
		if g.UUID == uuid {
			return g.Lane
		}
	}
	return ""
}

// A PodGroup member's GPU: the scheduler reserves the group's claim for
// the PodGroup, not the pod. Reading reservedFor as pod UIDs only leaves
// the GPU unallocated and the member's process a violation.
func TestJoinPodGroupReservation(t *testing.T) {
	member := pod("worker-0")
	member.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: testobj.Ptr("trainers")}
	member = testobj.WithClaimStatus(testobj.WithTemplateClaim(member, "gpu", "gpu"), "gpu", "trainers-gpu-x1")
	claim := allocated("trainers-gpu-x1", member, "gpu-0")
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "trainers", UID: "group-uid"}}
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "PodGroup", Name: "trainers", UID: "group-uid", Controller: testobj.Ptr(true)}}
	claim.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "gpu"}
	in := inputs(member, claim)
	in.Kubelet = nil // the socket is down: the dra lane comes from the claims
	in.PodOfPID = map[int]string{100: string(member.UID)}
	v := Join(in)
	if l := lane(v, gpuA); l != LaneDRA {
		t.Errorf("the member's GPU reads lane %q, want dra", l)
	}
	if len(v.Violations) != 0 {
		t.Errorf("violations %+v, want none: the member holds the GPU through its group", v.Violations)
	}
}

// A template claim the controller has not yet recorded in the pod's
// status is found through its owner, as the exporter finds it.
func TestJoinOwnerReferenceFallback(t *testing.T) {
	p := testobj.WithTemplateClaim(pod("llm-0"), "gpu", "gpu")
	claim := testobj.OwnedBy(allocated("llm-0-gpu-abcde", p, "gpu-0"), p, "gpu")
	in := inputs(p, claim)
	in.Kubelet = nil
	v := Join(in)
	if l := lane(v, gpuA); l != LaneDRA {
		t.Errorf("GPU lane %q, want dra", l)
	}
}

// Device-plugin IDs: time-slicing and MPS report GPU-<uuid>::<n>, GKE's
// plugin nvidia<minor>; both name a GPU the pods hold.
func TestJoinDevicePluginIDs(t *testing.T) {
	a, b, c := pod("ts-0"), pod("ts-1"), pod("gke-0")
	in := inputs(a, b, c)
	in.Kubelet = &podresources.Report{Pods: []podresources.Pod{
		{Namespace: a.Namespace, Name: a.Name, Devices: []podresources.Device{{Container: "main", Resource: "nvidia.com/gpu", ID: gpuA + "::0"}}},
		{Namespace: b.Namespace, Name: b.Name, Devices: []podresources.Device{{Container: "main", Resource: "nvidia.com/gpu", ID: gpuA + "::1"}}},
		{Namespace: c.Namespace, Name: c.Name, Devices: []podresources.Device{{Container: "main", Resource: "nvidia.com/gpu", ID: "nvidia1"}}},
	}}
	in.PodOfPID = map[int]string{100: string(a.UID), 200: string(c.UID)}
	v := Join(in)
	if l := lane(v, gpuA); l != LaneDevicePlugin {
		t.Errorf("time-sliced GPU lane %q, want device-plugin", l)
	}
	if l := lane(v, gpuB); l != LaneDevicePlugin {
		t.Errorf("nvidia1 GPU lane %q, want device-plugin", l)
	}
	if len(v.Violations) != 0 {
		t.Errorf("violations %+v, want none", v.Violations)
	}
	holders := 0
	for _, h := range v.Holders {
		if h.GPUUUID == gpuA {
			holders++
		}
	}
	if holders != 2 {
		t.Errorf("time-sliced GPU has %d holders, want 2: %+v", holders, v.Holders)
	}
}

// Every device-plugin ID form seen in the field names its GPU or MIG
// instance: GKE's nvidia<minor>/vgpu<n> (time-sharing) and
// nvidia<minor>/gi<id>[/vgpu<n>] (MIG), the NVIDIA plugin's index strategy
// (<index>, <index>:<n>, with ::<replica>), and its resources
// nvidia.com/gpu.shared and nvidia.com/mig-<profile>.
func TestJoinDevicePluginIDForms(t *testing.T) {
	const migX, migY = "MIG-xxxxxxxx-0000-4000-8000-000000000000", "MIG-yyyyyyyy-0000-4000-8000-000000000000"
	for _, c := range []struct{ resource, id, want string }{
		{"nvidia.com/gpu", "nvidia0/vgpu3", gpuA},
		{"nvidia.com/gpu", "nvidia1/gi2", migY},
		{"nvidia.com/gpu", "nvidia1/gi1/vgpu0", migX},
		{"nvidia.com/gpu", "0", gpuA},
		{"nvidia.com/gpu", "0::2", gpuA},
		{"nvidia.com/mig-1g.10gb", "1:1", migY},
		{"nvidia.com/mig-1g.10gb", migX, migX},
		{"nvidia.com/gpu.shared", gpuA + "::1", gpuA},
	} {
		p := pod("dp-0")
		in := inputs(p)
		in.GPU.Entities[0].Index = 0
		in.GPU.Entities[1].Index = 1
		in.GPU.Entities = append(in.GPU.Entities,
			gpu.Entity{UUID: migX, ParentUUID: gpuB, Index: 1, Minor: 1, MIG: &gpu.MIGInstance{GPUInstanceID: 1, Profile: "1g.10gb", DeviceIndex: 0}},
			gpu.Entity{UUID: migY, ParentUUID: gpuB, Index: 1, Minor: 1, MIG: &gpu.MIGInstance{GPUInstanceID: 2, Profile: "1g.10gb", DeviceIndex: 1}})
		in.Kubelet = &podresources.Report{Pods: []podresources.Pod{
			{Namespace: p.Namespace, Name: p.Name, Devices: []podresources.Device{{Container: "main", Resource: c.resource, ID: c.id}}},
		}}
		var got []string
		for _, h := range Join(in).Holders {
			if h.Lane == LaneDevicePlugin {
				got = append(got, h.GPUUUID)
			}
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s %q: device-plugin holders of %v, want %s", c.resource, c.id, got, c.want)
		}
	}
}

// Two dynamic MIG instances of one profile on one GPU, placements unknown
// (NVML without privileges): each is told apart through its process, the
// process's pod and the claim that pod holds, so neither pod is a false
// isolation violation and both instances are allocated.
func TestJoinSameProfileDynamicMIG(t *testing.T) {
	const migX, migY = "MIG-xxxxxxxx-0000-4000-8000-000000000000", "MIG-yyyyyyyy-0000-4000-8000-000000000000"
	p1, p2 := pod("infer-1"), pod("infer-2")
	c1, c2 := allocated("infer-1-gpu", p1, nvidia.MIGName(1, "1g.10gb", 19, 0)), allocated("infer-2-gpu", p2, nvidia.MIGName(1, "1g.10gb", 19, 2))
	in := inputs(p1, p2, c1, c2)
	var tr objects.Trimmer
	var devs []resourceapi.Device
	for _, start := range []int{0, 1, 2} {
		devs = append(devs, nvidia.MIGDevice(nvidia.MIGName(1, "1g.10gb", 19, start), "", gpuB, "1g.10gb", "NVIDIA H100 80GB HBM3", "10Gi"))
	}
	in.Slices = append(in.Slices, tr.Trim(nvidia.Slice(node+"-mig", node, 1, devs...)).(*objects.Slice))
	in.GPU.Entities = append(in.GPU.Entities,
		gpu.Entity{UUID: migX, ParentUUID: gpuB, Index: 1, Minor: 1, MIG: &gpu.MIGInstance{GPUInstanceID: 7, Profile: "1g.10gb", PlacementStart: -1, DeviceIndex: 0},
			Processes: []gpu.Process{{PID: 301, UsedMemoryBytes: 1 << 30}}},
		gpu.Entity{UUID: migY, ParentUUID: gpuB, Index: 1, Minor: 1, MIG: &gpu.MIGInstance{GPUInstanceID: 8, Profile: "1g.10gb", PlacementStart: -1, DeviceIndex: 1},
			Processes: []gpu.Process{{PID: 302, UsedMemoryBytes: 1 << 30}}})
	in.Kubelet = &podresources.Report{Dynamic: true}
	for _, pc := range []struct {
		p *corev1.Pod
		c *resourceapi.ResourceClaim
	}{{p1, c1}, {p2, c2}} {
		in.Kubelet.Pods = append(in.Kubelet.Pods, podresources.Pod{Namespace: pc.p.Namespace, Name: pc.p.Name, Claims: []podresources.ClaimDevice{{
			Container: "main", ClaimNamespace: pc.c.Namespace, ClaimName: pc.c.Name, Driver: testobj.Driver, Pool: node, Device: pc.c.Status.Allocation.Devices.Results[0].Device}}})
	}
	in.PodOfPID = map[int]string{301: string(p2.UID), 302: string(p1.UID)}
	v := Join(in)
	if len(v.Violations) != 0 {
		t.Errorf("violations %+v, want none: each pod runs on the instance of its claim", v.Violations)
	}
	for uuid, want := range map[string]string{migX: nvidia.MIGName(1, "1g.10gb", 19, 2), migY: nvidia.MIGName(1, "1g.10gb", 19, 0)} {
		for _, g := range v.GPUs {
			if g.UUID == uuid && (g.Lane != LaneDRA || g.Device != want) {
				t.Errorf("%s: lane %q device %q, want dra %s", uuid, g.Lane, g.Device, want)
			}
		}
	}
}

// MPS: the GPU's process list has the claim's MPS server, in the DRA
// driver's control-daemon pod (which holds no claim), and the clients,
// each in its pod. Neither is a violation; each pod's memory is its own.
func TestJoinMPS(t *testing.T) {
	client := pod("infer-0")
	claim := allocated("infer-0-gpu", client, "gpu-0")
	daemon := testobj.Running(testobj.Bound(testobj.Pod("mps-control-daemon-"+string(claim.UID)+"-3f2a1-7d9c8b6f5-x2x4z", "d0d0d0d0-0000-4000-8000-000000000000"), node))
	daemon.Namespace = "nvidia-dra-driver-gpu"
	stranger := pod("other-0")
	in := inputs(client, claim, daemon, stranger)
	in.Kubelet = &podresources.Report{Dynamic: true, Pods: []podresources.Pod{{Namespace: client.Namespace, Name: client.Name, Claims: []podresources.ClaimDevice{{
		Container: "main", ClaimNamespace: claim.Namespace, ClaimName: claim.Name, Driver: testobj.Driver, Pool: node, Device: "gpu-0"}}}}}
	in.GPU.Entities[0].Processes = []gpu.Process{
		{PID: 100, UsedMemoryBytes: 256 << 20},
		{PID: 101, UsedMemoryBytes: 4 << 30, MPSClient: true},
		{PID: 102, UsedMemoryBytes: 1 << 30, MPSClient: true},
	}
	in.PodOfPID = map[int]string{100: string(daemon.UID), 101: string(client.UID), 102: string(stranger.UID)}
	v := Join(in)
	if len(v.Violations) != 1 || v.Violations[0].Pod != stranger.Name {
		t.Errorf("violations %+v, want only %s (an MPS client without the claim)", v.Violations, stranger.Name)
	}
	mem := map[string]float64{}
	for _, m := range v.PodMemory {
		if m.GPUUUID == gpuA {
			mem[m.Pod] = m.Bytes
		}
	}
	if mem[client.Name] != 4<<30 || mem[daemon.Name] != 256<<20 {
		t.Errorf("per-pod memory %v", mem)
	}
}

// Only the configured resources are device-plugin GPUs (the exporter's
// --device-plugin.resources), not every nvidia.com/ resource.
func TestJoinDevicePluginResources(t *testing.T) {
	p := pod("vgpu-0")
	in := inputs(p)
	in.Kubelet = &podresources.Report{Pods: []podresources.Pod{
		{Namespace: p.Namespace, Name: p.Name, Devices: []podresources.Device{{Container: "main", Resource: "nvidia.com/vgpu-profile", ID: gpuA}}},
	}}
	if l := lane(Join(in), gpuA); l != LaneUnallocated {
		t.Errorf("a resource not in --device-plugin.resources: lane %q, want unallocated", l)
	}
	in.DevicePluginResources = dra.Resources{"nvidia.com/gpu", "nvidia.com/vgpu-profile"}
	if l := lane(Join(in), gpuA); l != LaneDevicePlugin {
		t.Errorf("a configured resource: lane %q, want device-plugin", l)
	}
}

// A claim only init containers use is no longer reported once they ran:
// it is not a not_prepared conflict.
func TestJoinInitContainerClaim(t *testing.T) {
	p := testobj.WithClaimStatus(testobj.WithTemplateClaim(pod("warmup-0"), "gpu", "gpu"), "gpu", "warmup-0-gpu")
	p.Spec.Containers[0].Resources.Claims = nil
	p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}
	claim := testobj.OwnedBy(allocated("warmup-0-gpu", p, "gpu-0"), p, "gpu")
	other := testobj.WithClaimStatus(testobj.WithTemplateClaim(pod("server-0"), "gpu", "gpu"), "gpu", "server-0-gpu")
	otherClaim := testobj.OwnedBy(allocated("server-0-gpu", other, "gpu-1"), other, "gpu")
	in := inputs(p, claim, other, otherClaim)
	// The kubelet reports DRA (another pod's claim) but not the init
	// container's, and not server-0's either.
	in.Kubelet = &podresources.Report{Dynamic: true}
	var notPrepared []string
	for _, c := range Join(in).Conflicts {
		if c.Reason == ReasonNotPrepared {
			notPrepared = append(notPrepared, c.Pod)
		}
	}
	if fmt.Sprint(notPrepared) != "[server-0]" {
		t.Errorf("not_prepared for %v, want [server-0] only", notPrepared)
	}
}

// A process whose memory NVML cannot tell adds nothing to its pod's sum.
func TestJoinUnknownProcessMemory(t *testing.T) {
	p := pod("llm-0")
	in := inputs(p)
	in.GPU.Entities[0].Processes = []gpu.Process{{PID: 100, MemoryUnknown: true}, {PID: 101, UsedMemoryBytes: 1 << 20}}
	in.PodOfPID = map[int]string{100: string(p.UID), 101: string(p.UID)}
	for _, m := range Join(in).PodMemory {
		if m.GPUUUID == gpuA && m.Bytes != 1<<20 {
			t.Errorf("pod memory %v, want 1 MiB", m.Bytes)
		}
	}
}
