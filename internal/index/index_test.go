package index_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

func gpus(names ...string) []resourceapi.Device {
	out := make([]resourceapi.Device, len(names))
	for i, n := range names {
		out[i] = gpuDevice(n, "GPU-"+n)
	}
	return out
}

func TestPoolNewestGenerationWins(t *testing.T) {
	gen1 := slice("node-1-gen1", "node-1", 1, gpus("gpu-0", "gpu-1", "gpu-2", "gpu-3")...)
	gen2 := slice("node-1-gen2", "node-1", 2, gpus("gpu-0", "gpu-1", "gpu-2")...)
	for _, tc := range []struct {
		name  string
		order []*resourceapi.ResourceSlice
	}{
		{"old generation first", []*resourceapi.ResourceSlice{gen1, gen2}},
		{"new generation first", []*resourceapi.ResourceSlice{gen2, gen1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := build(t, index.Config{}, gpuClass())
			for _, s := range tc.order {
				upsert(t, ix, s, true)
			}
			s := ix.Snapshot()
			want := []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2"}
			if got := deviceNames(s); !slices.Equal(got, want) {
				t.Fatalf("devices = %v, want %v (generation 2 only)", got, want)
			}
			for _, d := range s.Devices {
				if d.Slice != gen2.Name {
					t.Errorf("device %s comes from slice %s, want %s", d.Key, d.Slice, gen2.Name)
				}
			}
			if got := classDeviceNames(s, gpuClassName); !slices.Equal(got, want) {
				t.Errorf("class devices = %v, want %v", got, want)
			}

			// The driver deletes the new generation (rollback): the
			// old one is all that is left and counts again.
			del(t, ix, gen2)
			s = ix.Snapshot()
			want = []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2", "node-1/gpu-3"}
			if got := deviceNames(s); !slices.Equal(got, want) {
				t.Fatalf("after deleting generation 2: devices = %v, want %v", got, want)
			}
			for _, d := range s.Devices {
				if d.Slice != gen1.Name {
					t.Errorf("device %s comes from slice %s, want %s", d.Key, d.Slice, gen1.Name)
				}
			}
			if got := classDeviceNames(s, gpuClassName); !slices.Equal(got, want) {
				t.Errorf("class devices = %v, want %v", got, want)
			}

			del(t, ix, gen1)
			if got := deviceNames(ix.Snapshot()); len(got) != 0 {
				t.Errorf("after deleting every slice: devices = %v, want none", got)
			}
		})
	}
}

func TestPoolSpanningSlices(t *testing.T) {
	a := slice("node-2-a", "node-2", 3, gpus("gpu-0", "gpu-1")...)
	b := slice("node-2-b", "node-2", 3, gpus("gpu-2", "gpu-3")...)
	a.Spec.Pool.ResourceSliceCount, b.Spec.Pool.ResourceSliceCount = 2, 2
	ix := build(t, index.Config{}, gpuClass(), a, b)

	s := ix.Snapshot()
	want := []string{"node-2/gpu-0", "node-2/gpu-1", "node-2/gpu-2", "node-2/gpu-3"}
	if got := deviceNames(s); !slices.Equal(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
	if d := s.Device(devKey("node-2", "gpu-3")); d == nil || d.Slice != "node-2-b" || d.Node != "node-2" {
		t.Errorf("gpu-3 = %+v, want slice node-2-b on node-2", d)
	}

	del(t, ix, a)
	want = []string{"node-2/gpu-2", "node-2/gpu-3"}
	if got := deviceNames(ix.Snapshot()); !slices.Equal(got, want) {
		t.Errorf("after deleting one slice of the pool: devices = %v, want %v", got, want)
	}
}

func TestSliceMovedBetweenPools(t *testing.T) {
	s1 := slice("shared-slice", "node-a", 1, gpus("gpu-0", "gpu-1")...)
	other := slice("node-b-slice", "node-b", 1, gpus("gpu-7")...)
	ix := build(t, index.Config{}, gpuClass(), s1, other)

	moved := slice("shared-slice", "node-b", 1, gpus("gpu-0", "gpu-1")...)
	upsert(t, ix, moved, true)
	s := ix.Snapshot()
	want := []string{"node-b/gpu-0", "node-b/gpu-1", "node-b/gpu-7"}
	if got := deviceNames(s); !slices.Equal(got, want) {
		t.Fatalf("after the slice moved to pool node-b: devices = %v, want %v", got, want)
	}
	if d := s.Device(devKey("node-a", "gpu-0")); d != nil {
		t.Errorf("device of the old pool still present: %+v", d.Key)
	}
	if got := classDeviceNames(s, gpuClassName); !slices.Equal(got, want) {
		t.Errorf("class devices = %v, want %v", got, want)
	}

	del(t, ix, moved)
	want = []string{"node-b/gpu-7"}
	if got := deviceNames(ix.Snapshot()); !slices.Equal(got, want) {
		t.Errorf("after deleting the moved slice: devices = %v, want %v", got, want)
	}
}

func TestClassUpdateRematchesDevices(t *testing.T) {
	node1 := slice("node-1", "node-1", 1,
		gpuDevice("gpu-0", "GPU-0"),
		migDevice("gpu-1-mig-1g5gb-0-0", "MIG-0", "GPU-1", "1g.5gb", "4864Mi"))
	flexible := deviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'gpu'")
	ix := build(t, index.Config{}, flexible, node1)

	before := ix.Snapshot()
	if got := classDeviceNames(before, "flex"); !slices.Equal(got, []string{"node-1/gpu-0"}) {
		t.Fatalf("before the update: class flex selects %v, want [node-1/gpu-0]", got)
	}
	gpuBefore := before.Device(devKey("node-1", "gpu-0"))

	upsert(t, ix, deviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'"), true)
	after := ix.Snapshot()
	if got := classDeviceNames(after, "flex"); !slices.Equal(got, []string{"node-1/gpu-1-mig-1g5gb-0-0"}) {
		t.Errorf("after the update: class flex selects %v, want the MIG device", got)
	}
	if d := after.Device(devKey("node-1", "gpu-0")); d == nil || slices.Contains(d.Classes, "flex") {
		t.Errorf("after the update gpu-0 classes = %v, want flex gone", d.Classes)
	}

	// Devices are replaced, not mutated: the earlier snapshot still
	// shows the old membership.
	if !slices.Equal(gpuBefore.Classes, []string{"flex"}) {
		t.Errorf("a device held by an earlier snapshot changed: classes %v, want [flex]", gpuBefore.Classes)
	}
	if got := classDeviceNames(before, "flex"); !slices.Equal(got, []string{"node-1/gpu-0"}) {
		t.Errorf("earlier snapshot now says class flex selects %v", got)
	}
	if d := before.Device(devKey("node-1", "gpu-1-mig-1g5gb-0-0")); slices.Contains(d.Classes, "flex") {
		t.Errorf("the MIG device held by an earlier snapshot gained class flex")
	}

	// An update with the same selectors changes nothing.
	upsert(t, ix, deviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'"), true)
	if got := classDeviceNames(ix.Snapshot(), "flex"); !slices.Equal(got, []string{"node-1/gpu-1-mig-1g5gb-0-0"}) {
		t.Errorf("after a no-op update: class flex selects %v", got)
	}
}

// A device that already has a selector error for one class must not be
// changed in place when another class starts failing on it: an earlier
// snapshot (and a concurrent scrape) holds that device.
func TestClassUpdateDoesNotMutateEarlierSnapshotErrors(t *testing.T) {
	// "broken" fails on every full GPU: they have no profile attribute.
	broken := deviceClass("broken", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")
	flex := deviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'")
	ix := build(t, index.Config{}, broken, flex, slice("node-1", "node-1", 1, gpus("gpu-0")...))

	before := ix.Snapshot()
	d := before.Device(devKey("node-1", "gpu-0"))
	if _, ok := d.ClassErrors["broken"]; !ok || len(d.ClassErrors) != 1 {
		t.Fatalf("before: ClassErrors = %v, want only class broken", d.ClassErrors)
	}

	// flex now fails on the device too.
	upsert(t, ix, deviceClass("flex", "device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-x'"), true)
	after := ix.Snapshot().Device(devKey("node-1", "gpu-0"))
	if _, ok := after.ClassErrors["flex"]; !ok {
		t.Errorf("after: ClassErrors = %v, want an error for flex", after.ClassErrors)
	}
	if _, ok := d.ClassErrors["flex"]; ok {
		t.Errorf("the device held by the earlier snapshot was mutated: ClassErrors = %v, want only broken", d.ClassErrors)
	}
}

func TestClassDeletion(t *testing.T) {
	ix := build(t, index.Config{}, gpuClass(), migClass(), slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...))
	before := ix.Snapshot()
	del(t, ix, gpuClass())
	s := ix.Snapshot()
	if s.Class(gpuClassName) != nil {
		t.Errorf("deleted class still in the snapshot")
	}
	if got := classDeviceNames(s, gpuClassName); len(got) != 0 {
		t.Errorf("deleted class still selects %v", got)
	}
	for _, d := range s.Devices {
		if len(d.Classes) != 0 {
			t.Errorf("device %s still lists classes %v", d.Key, d.Classes)
		}
	}
	for _, row := range s.ClassCapacity() {
		if row.DeviceClass == gpuClassName {
			t.Errorf("ClassCapacity still reports the deleted class: %+v", row)
		}
	}
	if got := classDeviceNames(before, gpuClassName); len(got) != 2 {
		t.Errorf("the earlier snapshot lost the class membership: %v", got)
	}
	// Deleting a class that does not exist is harmless.
	del(t, ix, deviceClass("never-existed"))
}

func TestDeviceNode(t *testing.T) {
	perDevice := func(devs ...resourceapi.Device) *resourceapi.ResourceSlice {
		s := slice("network", "unused", 1, devs...)
		s.Spec.NodeName = nil
		s.Spec.Pool.Name = "fabric"
		s.Spec.PerDeviceNodeSelection = ptr(true)
		return s
	}
	onNode := gpuDevice("gpu-0", "GPU-0")
	onNode.NodeName = ptr("node-7")
	everywhere := gpuDevice("gpu-1", "GPU-1")
	everywhere.AllNodes = ptr(true)
	selected := gpuDevice("gpu-2", "GPU-2")
	selected.NodeSelector = nodeSelector("node-8")

	allNodes := slice("all", "unused", 1, gpus("gpu-0")...)
	allNodes.Spec.NodeName = nil
	allNodes.Spec.AllNodes = ptr(true)
	allNodes.Spec.Pool.Name = "cluster-pool"

	sliceSelector := slice("rack", "unused", 1, gpus("gpu-0")...)
	sliceSelector.Spec.NodeName = nil
	sliceSelector.Spec.NodeSelector = nodeSelector("node-9")
	sliceSelector.Spec.Pool.Name = "rack-pool"

	tests := []struct {
		name  string
		slice *resourceapi.ResourceSlice
		dev   index.DeviceKey
		want  string
	}{
		{"slice nodeName", slice("node-1", "node-1", 1, gpus("gpu-0")...), devKey("node-1", "gpu-0"), "node-1"},
		{"per-device nodeName", perDevice(onNode), devKey("fabric", "gpu-0"), "node-7"},
		{"per-device allNodes", perDevice(everywhere), devKey("fabric", "gpu-1"), ""},
		{"per-device node selector", perDevice(selected), devKey("fabric", "gpu-2"), ""},
		{"slice allNodes", allNodes, devKey("cluster-pool", "gpu-0"), ""},
		{"slice node selector", sliceSelector, devKey("rack-pool", "gpu-0"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := build(t, index.Config{}, gpuClass(), tt.slice).Snapshot()
			d := s.Device(tt.dev)
			if d == nil {
				t.Fatalf("device %s not indexed; have %v", tt.dev, deviceNames(s))
			}
			if d.Node != tt.want {
				t.Errorf("Node = %q, want %q", d.Node, tt.want)
			}
		})
	}
}

func TestGPUUUID(t *testing.T) {
	bare := gpuDevice("gpu-0", "GPU-bare")
	qualified := resourceapi.Device{Name: "gpu-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"gpu.nvidia.com/type": strAttr("gpu"),
		"gpu.nvidia.com/uuid": strAttr("GPU-qualified"),
	}}
	foreign := resourceapi.Device{Name: "gpu-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                strAttr("gpu"),
		"example.com/uuid":    strAttr("not-ours"),
		"gpu.nvidia.com/name": strAttr("x"),
	}}
	s := build(t, index.Config{}, gpuClass(), slice("node-1", "node-1", 1, bare, qualified, foreign)).Snapshot()
	for dev, want := range map[string]string{"gpu-0": "GPU-bare", "gpu-1": "GPU-qualified", "gpu-2": ""} {
		d := s.Device(devKey("node-1", dev))
		if d == nil {
			t.Fatalf("%s not indexed", dev)
		}
		if d.GPUUUID != want {
			t.Errorf("%s: GPUUUID = %q, want %q", dev, d.GPUUUID, want)
		}
	}
	// The qualified attribute name is in the driver's domain, so the
	// class selector sees it as device.attributes['gpu.nvidia.com'].type.
	if got := classDeviceNames(s, gpuClassName); !slices.Equal(got, []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2"}) {
		t.Errorf("class devices = %v", got)
	}
}

// A bare attribute name is the same attribute as its name qualified with the
// driver's domain (the DRA API's rule), so a lookup by either form finds it.
func TestDeviceAttributeLookup(t *testing.T) {
	dev := gpuDevice("gpu-0", "GPU-0")
	dev.Attributes["index"] = resourceapi.DeviceAttribute{IntValue: ptr(int64(3))}
	dev.Attributes["mig.capable"] = resourceapi.DeviceAttribute{BoolValue: ptr(true)}
	dev.Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr("580.65.6")}
	dev.Attributes["resource.kubernetes.io/pciBusID"] = strAttr("0000:1b:00.0")
	d := build(t, index.Config{}, slice("node-1", "node-1", 1, dev)).Snapshot().Device(devKey("node-1", "gpu-0"))

	tests := []struct {
		name   string
		want   string
		wantOK bool
	}{
		{"productName", "NVIDIA H100 80GB HBM3", true},
		{"gpu.nvidia.com/productName", "NVIDIA H100 80GB HBM3", true},
		{"index", "3", true},
		{"mig.capable", "true", true},
		{"driverVersion", "580.65.6", true},
		{"resource.kubernetes.io/pciBusID", "0000:1b:00.0", true},
		{"pciBusID", "", false},
		{"example.com/productName", "", false},
		{"missing", "", false},
	}
	for _, tt := range tests {
		got, ok := d.Attribute(tt.name)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Attribute(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// mig-node is an A100 whose full GPU and two 3g.20gb halves share one
// counter set of 40Gi.
func migPool() *resourceapi.ResourceSlice {
	full := consumes(gpuDevice("gpu-0", "GPU-A100"), "gpu-0-counter-set", "40Gi")
	half0 := consumes(migDevice("gpu-0-mig-3g20gb-0-0", "MIG-0", "GPU-A100", "3g.20gb", "20Gi"), "gpu-0-counter-set", "20Gi")
	half1 := consumes(migDevice("gpu-0-mig-3g20gb-1-4", "MIG-1", "GPU-A100", "3g.20gb", "20Gi"), "gpu-0-counter-set", "20Gi")
	s := slice("mig-node", "mig-node", 1, full, half0, half1)
	s.Spec.SharedCounters = []resourceapi.CounterSet{{
		Name:     "gpu-0-counter-set",
		Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("40Gi")}},
	}}
	return s
}

func TestSharedCountersMIG(t *testing.T) {
	base := []any{gpuClass(), migClass(), migPool()}
	full, half0, half1 := devKey("mig-node", "gpu-0"), devKey("mig-node", "gpu-0-mig-3g20gb-0-0"), devKey("mig-node", "gpu-0-mig-3g20gb-1-4")

	t.Run("nothing allocated", func(t *testing.T) {
		s := build(t, index.Config{}, base...).Snapshot()
		for _, k := range []index.DeviceKey{full, half0, half1} {
			if !s.Available(s.Device(k)) {
				t.Errorf("%s not available with nothing allocated", k)
			}
		}
	})
	t.Run("one half allocated", func(t *testing.T) {
		c := allocated(claim("mig-claim", "uid-mig", request("mig", migClassName)), "mig-node", time.Time{}, result("mig", "mig-node", half0.Device))
		s := build(t, index.Config{}, append(base, c)...).Snapshot()
		if s.Available(s.Device(full)) {
			t.Errorf("full GPU available while a MIG partition of it is allocated")
		}
		if s.InUse(full) {
			t.Errorf("full GPU counted as in use")
		}
		if !s.InUse(half0) || s.Available(s.Device(half0)) {
			t.Errorf("allocated half: InUse=%v Available=%v, want true, false", s.InUse(half0), s.Available(s.Device(half0)))
		}
		if !s.Available(s.Device(half1)) {
			t.Errorf("the other half should still fit in the counters")
		}
		want := []index.Capacity{
			{DeviceClass: gpuClassName, Node: "mig-node", Total: 1, Allocated: 0, Free: 0},
			{DeviceClass: migClassName, Node: "mig-node", Total: 2, Allocated: 1, Free: 1},
		}
		if got := s.ClassCapacity(); !slices.Equal(got, want) {
			t.Errorf("ClassCapacity = %+v, want %+v", got, want)
		}
	})
	t.Run("full GPU allocated", func(t *testing.T) {
		c := allocated(claim("gpu-claim", "uid-gpu"), "mig-node", time.Time{}, result("gpu", "mig-node", full.Device))
		s := build(t, index.Config{}, append(base, c)...).Snapshot()
		for _, k := range []index.DeviceKey{half0, half1} {
			if s.Available(s.Device(k)) {
				t.Errorf("%s available while the full GPU is allocated", k)
			}
		}
	})
	t.Run("older generation counters ignored", func(t *testing.T) {
		old := migPool()
		old.Name = "mig-node-old"
		old.Spec.SharedCounters[0].Counters["memory"] = resourceapi.Counter{Value: resource.MustParse("80Gi")}
		newer := migPool()
		newer.Spec.Pool.Generation = 2
		c := allocated(claim("mig-claim", "uid-mig", request("mig", migClassName)), "mig-node", time.Time{}, result("mig", "mig-node", half0.Device))
		s := build(t, index.Config{}, gpuClass(), migClass(), old, newer, c).Snapshot()
		if s.Available(s.Device(full)) {
			t.Errorf("full GPU available: the stale generation's 80Gi counter was used")
		}
	})
	t.Run("counter set nobody publishes", func(t *testing.T) {
		p := migPool()
		p.Spec.SharedCounters = nil
		s := build(t, index.Config{}, gpuClass(), p).Snapshot()
		if s.Available(s.Device(full)) {
			t.Errorf("a device consuming an unpublished counter set is available")
		}
	})
}

func TestTaintedDeviceNotFree(t *testing.T) {
	for _, tc := range []struct {
		effect resourceapi.DeviceTaintEffect
		free   bool
	}{
		{resourceapi.DeviceTaintEffectNoSchedule, false},
		{resourceapi.DeviceTaintEffectNoExecute, false},
		{resourceapi.DeviceTaintEffectNone, true},
	} {
		t.Run(string(tc.effect), func(t *testing.T) {
			d := gpuDevice("gpu-0", "GPU-0")
			d.Taints = []resourceapi.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: tc.effect}}
			s := build(t, index.Config{}, gpuClass(), slice("node-1", "node-1", 1, d)).Snapshot()
			if got := s.Available(s.Device(devKey("node-1", "gpu-0"))); got != tc.free {
				t.Errorf("Available = %v, want %v", got, tc.free)
			}
			free := 0
			if tc.free {
				free = 1
			}
			want := []index.Capacity{{DeviceClass: gpuClassName, Node: "node-1", Total: 1, Free: free}}
			if got := s.ClassCapacity(); !slices.Equal(got, want) {
				t.Errorf("ClassCapacity = %+v, want %+v", got, want)
			}
		})
	}
}

func TestAdminAccessNotCounted(t *testing.T) {
	admin := result("gpu", "node-1", "gpu-0")
	admin.AdminAccess = ptr(true)
	monitor := allocated(claim("dcgm-monitor", "uid-admin"), "node-1", time.Time{}, admin)
	s := build(t, index.Config{}, gpuClass(), slice("node-1", "node-1", 1, gpus("gpu-0")...), monitor).Snapshot()
	k := devKey("node-1", "gpu-0")
	if s.InUse(k) {
		t.Errorf("an admin-access allocation makes the device in use")
	}
	if got := s.AllocatedTo(k); len(got) != 0 {
		t.Errorf("AllocatedTo = %d claims, want 0", len(got))
	}
	if !s.Available(s.Device(k)) {
		t.Errorf("device not available despite only an admin-access allocation")
	}
	c := s.Claim(index.Key{Namespace: ns, Name: "dcgm-monitor"})
	if len(c.Results) != 1 || !c.Results[0].AdminAccess {
		t.Errorf("Results = %+v, want one admin-access result", c.Results)
	}
}

func TestAllocatedToAndShareable(t *testing.T) {
	shared := gpuDevice("gpu-0", "GPU-0")
	shared.AllowMultipleAllocations = ptr(true)
	a := allocated(claim("a", "uid-a"), "node-1", time.Time{}, result("gpu", "node-1", "gpu-0"))
	b := allocated(claim("b", "uid-b"), "node-1", time.Time{}, result("gpu", "node-1", "gpu-0"))
	s := build(t, index.Config{}, gpuClass(), slice("node-1", "node-1", 1, shared), a, b).Snapshot()
	k := devKey("node-1", "gpu-0")
	if got := len(s.AllocatedTo(k)); got != 2 {
		t.Errorf("AllocatedTo = %d claims, want 2", got)
	}
	if !s.Available(s.Device(k)) {
		t.Errorf("a shareable device in use should still be available")
	}
}

func TestPodRelevance(t *testing.T) {
	cpuOnly := pod("web", "uid-web")
	cpuOnly.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		"hugepages-2Mi": resource.MustParse("2Mi"), "kubernetes.io/batch-cpu": resource.MustParse("1"),
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		indexed bool
	}{
		{"no claims, no extended resources", cpuOnly, false},
		{"template claim", withTemplateClaim(pod("a", "uid-a"), "gpu", "tmpl"), true},
		{"named claim", withNamedClaim(pod("b", "uid-b"), "gpu", "shared"), true},
		{"device-plugin GPU limit", withLimit(pod("c", "uid-c"), gpuResource, 1), true},
		{"implicit deviceclass resource", withLimit(pod("d", "uid-d"), resourceapi.ResourceDeviceClassPrefix+gpuClassName, 1), true},
		{"extended claim status only", withExtendedClaimStatus(pod("e", "uid-e"), "e-gpu-x"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := build(t, index.Config{}, tt.pod).Snapshot()
			if got := s.Pod(index.Key{Namespace: ns, Name: tt.pod.Name}) != nil; got != tt.indexed {
				t.Errorf("indexed = %v, want %v", got, tt.indexed)
			}
		})
	}

	t.Run("a relevant pod updated to irrelevant is removed", func(t *testing.T) {
		p := withExtendedClaimStatus(pod("f", "uid-f"), "f-gpu")
		ix := build(t, index.Config{}, p)
		plain := pod("f", "uid-f")
		upsert(t, ix, plain, true)
		if ix.Snapshot().Pod(index.Key{Namespace: ns, Name: "f"}) != nil {
			t.Errorf("pod still indexed after it stopped using DRA")
		}
	})
}

func TestExtendedRequests(t *testing.T) {
	p := pod("train", "uid-train")
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	p.Spec.Containers = []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuResource: q(2)}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{gpuResource: q(1)}, Limits: corev1.ResourceList{gpuResource: q(1)}}},
	}
	p.Spec.InitContainers = []corev1.Container{
		{Name: "init-small", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuResource: q(1)}}},
		{Name: "init-big", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/fpga": q(4)}}},
	}
	got := build(t, index.Config{}, p).Snapshot().Pod(index.Key{Namespace: ns, Name: "train"}).ExtendedRequests
	want := map[string]int64{gpuResource: 3, "example.com/fpga": 4}
	if len(got) != len(want) || got[gpuResource] != 3 || got["example.com/fpga"] != 4 {
		t.Errorf("ExtendedRequests = %v, want %v", got, want)
	}
}

func TestClaimRecreatedWithNewUID(t *testing.T) {
	p := pod("llm-0", "uid-pod")
	first := reservedFor(allocated(claim("shared-gpu", "uid-1"), "node-1", t0.Add(-time.Hour), result("gpu", "node-1", "gpu-0")), p)
	ix := build(t, index.Config{Now: func() time.Time { return t0 }}, gpuClass(), slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...), first)

	second := allocated(createdAt(claim("shared-gpu", "uid-2"), t0.Add(-time.Minute)), "node-1", t0.Add(-time.Minute), result("gpu", "node-1", "gpu-1"))
	upsert(t, ix, second, true)
	s := ix.Snapshot()
	c := s.Claim(index.Key{Namespace: ns, Name: "shared-gpu"})
	if c == nil || c.UID != "uid-2" {
		t.Fatalf("claim = %+v, want uid-2", c)
	}
	if len(s.Claims) != 1 {
		t.Errorf("%d claims indexed, want 1", len(s.Claims))
	}
	if s.InUse(devKey("node-1", "gpu-0")) || !s.InUse(devKey("node-1", "gpu-1")) {
		t.Errorf("device usage follows the old claim: gpu-0 %v, gpu-1 %v", s.InUse(devKey("node-1", "gpu-0")), s.InUse(devKey("node-1", "gpu-1")))
	}
	if c.ReservedFor(p.UID) {
		t.Errorf("the new claim reports the old claim's reservation")
	}
	// The recreated claim never reserved anybody: it has been idle since
	// its own allocation, not since the exporter noticed it.
	if got := s.UnreservedSince(c); !got.Equal(t0.Add(-time.Minute)) {
		t.Errorf("UnreservedSince = %v, want its allocation time %v", got, t0.Add(-time.Minute))
	}
}

func TestEventsRelevance(t *testing.T) {
	p := pod("llm-0", "uid-llm-0")
	tests := []struct {
		reason, message string
		kept            bool
	}{
		{index.ReasonFailedScheduling, "0/3 nodes are available: cannot allocate all claims", true},
		{index.ReasonFailedResourceClaimCreation, "webhook denied", true},
		{index.ReasonFailedPrepareDynamicResources, "NodePrepareResources failed", true},
		{"FailedCreatePodSandBox", "failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=gpu-0", true},
		{"Failed", "Error: failed to prepare dynamic resources: rpc error", true},
		{"FailedCreatePodSandBox", "failed to setup network for sandbox", false},
		{"BackOff", "Back-off restarting failed container", false},
		{"Unhealthy", "Readiness probe failed: HTTP 503 (cdi mentioned, but not a sandbox failure)", false},
	}
	for i, tt := range tests {
		t.Run(tt.reason+"/"+tt.message[:10], func(t *testing.T) {
			e := event("ev"+string(rune('a'+i)), p, tt.reason, tt.message, t0)
			s := build(t, index.Config{}, p, e).Snapshot()
			if got := len(s.Events()) == 1; got != tt.kept {
				t.Errorf("kept = %v, want %v", got, tt.kept)
			}
			if got := index.RelevantEvent(tt.reason, tt.message); got != tt.kept {
				t.Errorf("RelevantEvent = %v, want %v", got, tt.kept)
			}
		})
	}

	t.Run("an event updated to an irrelevant reason is dropped", func(t *testing.T) {
		ix := build(t, index.Config{}, p, event("ev", p, index.ReasonFailedScheduling, "x", t0))
		upsert(t, ix, event("ev", p, "BackOff", "x", t0), true)
		if n := len(ix.Snapshot().Events()); n != 0 {
			t.Errorf("%d events kept, want 0", n)
		}
	})
	t.Run("delete", func(t *testing.T) {
		e := event("ev", p, index.ReasonFailedScheduling, "x", t0)
		ix := build(t, index.Config{}, p, e)
		del(t, ix, cache.DeletedFinalStateUnknown{Key: "prod/ev", Obj: e})
		if n := len(ix.Snapshot().Events()); n != 0 {
			t.Errorf("%d events kept after delete, want 0", n)
		}
	})
}

func TestPodEvents(t *testing.T) {
	p := withTemplateClaim(pod("llm-0", "uid-new"), "gpu", "tmpl")
	other := withTemplateClaim(pod("llm-0", "uid-old"), "gpu", "tmpl") // a previous pod of the same name
	third := withTemplateClaim(pod("llm-1", "uid-1"), "gpu", "tmpl")
	noUID := event("no-uid", p, index.ReasonFailedScheduling, "no uid", t0.Add(-3*time.Minute))
	noUID.InvolvedObject.UID = ""
	v1 := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: "v1-event"},
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "llm-0", UID: "uid-new"},
		Reason:              index.ReasonFailedScheduling,
		Note:                "cannot allocate all claims",
		ReportingController: "default-scheduler",
		Series:              &eventsv1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t0.Add(-1 * time.Minute))},
	}
	objs := []any{p, third,
		event("oldest", p, index.ReasonFailedScheduling, "oldest", t0.Add(-10*time.Minute)),
		event("newest", p, index.ReasonFailedPrepareDynamicResources, "newest", t0),
		event("tie-b", p, index.ReasonFailedScheduling, "tie b", t0.Add(-5*time.Minute)),
		event("tie-a", p, index.ReasonFailedScheduling, "tie a", t0.Add(-5*time.Minute)),
		event("old-pod", other, index.ReasonFailedPrepareDynamicResources, "previous incarnation", t0.Add(time.Minute)),
		event("other-pod", third, index.ReasonFailedScheduling, "another pod", t0.Add(time.Minute)),
		noUID, v1,
	}
	s := build(t, index.Config{}, objs...).Snapshot()
	var got []string
	for _, e := range s.PodEvents(s.Pod(index.Key{Namespace: ns, Name: "llm-0"})) {
		got = append(got, e.Key.Name)
	}
	want := []string{"newest", "v1-event", "no-uid", "tie-a", "tie-b", "oldest"}
	if !slices.Equal(got, want) {
		t.Errorf("PodEvents = %v, want %v", got, want)
	}
	for _, e := range s.PodEvents(s.Pod(index.Key{Namespace: ns, Name: "llm-0"})) {
		if e.Key.Name == "v1-event" && (e.Count != 7 || e.Reporter != "default-scheduler" || e.Message != "cannot allocate all claims") {
			t.Errorf("events.k8s.io event converted to %+v", e)
		}
	}
}

func TestUnreservedSince(t *testing.T) {
	now := t0
	clock := func() time.Time { return now }
	p := pod("llm-0", "uid-pod")
	base := allocated(claim("c", "uid-c"), "node-1", t0.Add(-30*time.Minute), result("gpu", "node-1", "gpu-0"))

	t.Run("seen live", func(t *testing.T) {
		now = t0
		ix := build(t, index.Config{Now: clock}, reservedFor(base, p))
		now = t0.Add(time.Minute)
		upsert(t, ix, base, true) // the reservation is removed
		now = t0.Add(2 * time.Minute)
		upsert(t, ix, base, true) // another update, still unreserved
		s := ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: ns, Name: "c"})); !got.Equal(t0.Add(time.Minute)) {
			t.Errorf("UnreservedSince = %v, want %v", got, t0.Add(time.Minute))
		}
		// Reserved again, then released again: the clock restarts.
		now = t0.Add(3 * time.Minute)
		upsert(t, ix, reservedFor(base, p), true)
		now = t0.Add(4 * time.Minute)
		upsert(t, ix, base, true)
		s = ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: ns, Name: "c"})); !got.Equal(t0.Add(4 * time.Minute)) {
			t.Errorf("after a second release UnreservedSince = %v, want %v", got, t0.Add(4*time.Minute))
		}
	})
	t.Run("initial list uses the allocation time", func(t *testing.T) {
		now = t0
		s := build(t, index.Config{Now: clock}, base).Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: ns, Name: "c"})); !got.Equal(t0.Add(-30 * time.Minute)) {
			t.Errorf("UnreservedSince = %v, want the allocation time %v", got, t0.Add(-30*time.Minute))
		}
	})
	t.Run("initial list without allocation time uses creation", func(t *testing.T) {
		now = t0
		c := allocated(createdAt(claim("c", "uid-c"), t0.Add(-2*time.Hour)), "node-1", time.Time{}, result("gpu", "node-1", "gpu-0"))
		s := build(t, index.Config{Now: clock}, c).Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: ns, Name: "c"})); !got.Equal(t0.Add(-2 * time.Hour)) {
			t.Errorf("UnreservedSince = %v, want the creation time %v", got, t0.Add(-2*time.Hour))
		}
	})
	// After a restart the exporter did not see the claim let go. A later
	// live update that leaves it unreserved (a label, a status write) is
	// not the moment it let go either: the idle clock must not restart,
	// or an allocated_unreserved leak disappears on every update.
	t.Run("live update of a claim already unreserved at the initial list", func(t *testing.T) {
		now = t0
		ix := build(t, index.Config{Now: clock}, base)
		now = t0.Add(time.Minute)
		relabeled := base.DeepCopy()
		relabeled.Labels = map[string]string{"touched": "yes"}
		upsert(t, ix, relabeled, true)
		s := ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: ns, Name: "c"})); !got.Equal(t0.Add(-30 * time.Minute)) {
			t.Errorf("UnreservedSince = %v, want the allocation time %v (the update did not release anything)", got, t0.Add(-30*time.Minute))
		}
	})
}

func TestClassCapacity(t *testing.T) {
	objs := []any{
		gpuClass(), migClass(), deviceClass("h100", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"),
		slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1", "gpu-2")...),
		slice("node-2", "node-2", 1, gpus("gpu-0")...),
		allocated(claim("a", "uid-a"), "node-1", time.Time{}, result("gpu", "node-1", "gpu-0")),
		allocated(claim("b", "uid-b"), "node-2", time.Time{}, result("gpu", "node-2", "gpu-0")),
	}
	got := build(t, index.Config{}, objs...).Snapshot().ClassCapacity()
	want := []index.Capacity{
		{DeviceClass: gpuClassName, Node: "node-1", Total: 3, Allocated: 1, Free: 2},
		{DeviceClass: gpuClassName, Node: "node-2", Total: 1, Allocated: 1, Free: 0},
		{DeviceClass: "h100", Node: "node-1", Total: 3, Allocated: 1, Free: 2},
		{DeviceClass: "h100", Node: "node-2", Total: 1, Allocated: 1, Free: 0},
		{DeviceClass: migClassName, Node: "", Total: 0, Allocated: 0, Free: 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ClassCapacity =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLaneCapacity(t *testing.T) {
	dp1 := pod("dp-a", "uid-dp-a")
	dp2 := pod("dp-b", "uid-dp-b")
	done := pod("dp-done", "uid-dp-done")
	pending := pod("dp-pending", "uid-dp-pending")
	draPod := withTemplateClaim(pod("dra", "uid-dra"), "gpu", "tmpl")
	extPod := withExtendedClaimStatus(withLimit(pod("ext", "uid-ext"), gpuResource, 1), "ext-gpu")
	objs := []any{
		gpuClass(), migClass(),
		node("dp-node", 8), node("node-1", 0), node("node-2", 0),
		slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...),
		slice("node-2", "node-2", 1, gpus("gpu-0")...),
		running(bound(withLimit(dp1, gpuResource, 2), "dp-node")),
		running(bound(withLimit(dp2, gpuResource, 1), "dp-node")),
		finished(bound(withLimit(done, gpuResource, 4), "dp-node"), corev1.PodSucceeded),
		withLimit(pending, gpuResource, 1),
		draPod, extPod,
		reservedFor(allocated(ownedBy(claim("dra-gpu", "uid-c1"), draPod, "gpu"), "node-1", time.Time{}, result("gpu", "node-1", "gpu-0")), draPod),
		reservedFor(allocated(extendedFor(claim("ext-gpu", "uid-c2"), extPod), "node-2", time.Time{}, result("container-0-request-0", "node-2", "gpu-0")), extPod),
	}
	s := build(t, index.Config{DevicePluginResources: []string{gpuResource}}, objs...).Snapshot()
	got := s.LaneCapacity()
	want := []index.Capacity{
		{Lane: index.LaneDevicePlugin, DeviceClass: gpuClassName, Node: "dp-node", Total: 8, Allocated: 3, Free: 5},
		{Lane: index.LaneDRA, DeviceClass: gpuClassName, Node: "node-1", Total: 2, Allocated: 1, Free: 1},
		{Lane: index.LaneDRA, DeviceClass: gpuClassName, Node: "node-2", Total: 1, Allocated: 0, Free: 0},
		{Lane: index.LaneDRAExtended, DeviceClass: gpuClassName, Node: "node-2", Allocated: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("LaneCapacity =\n%+v\nwant\n%+v", got, want)
	}
	if free := s.DevicePluginFree(gpuResource); free != 5 {
		t.Errorf("DevicePluginFree = %d, want 5", free)
	}

	t.Run("device-plugin resource without a class", func(t *testing.T) {
		s := build(t, index.Config{DevicePluginResources: []string{gpuResource}}, node("dp-node", 4)).Snapshot()
		want := []index.Capacity{{Lane: index.LaneDevicePlugin, DeviceClass: gpuResource, Node: "dp-node", Total: 4, Free: 4}}
		if got := s.LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("LaneCapacity = %+v, want %+v", got, want)
		}
	})
}

func TestPodLane(t *testing.T) {
	cfg := index.Config{DevicePluginResources: []string{gpuResource}}
	tests := []struct {
		name    string
		classes []any
		pod     *corev1.Pod
		want    string
	}{
		{"pod claims", nil, withTemplateClaim(pod("a", "uid-a"), "gpu", "t"), index.LaneDRA},
		{"extended claim status", nil, withExtendedClaimStatus(withLimit(pod("a", "uid-a"), gpuResource, 1), "c"), index.LaneDRAExtended},
		{"bound to a device-plugin node", []any{gpuClass()}, bound(withLimit(pod("a", "uid-a"), gpuResource, 1), "dp-node"), index.LaneDevicePlugin},
		{"pending, a class serves the resource", []any{gpuClass()}, withLimit(pod("a", "uid-a"), gpuResource, 1), index.LaneDRAExtended},
		{"pending, no class serves the resource", nil, withLimit(pod("a", "uid-a"), gpuResource, 1), index.LaneDevicePlugin},
		{"implicit deviceclass resource", []any{gpuClass()}, withLimit(pod("a", "uid-a"), resourceapi.ResourceDeviceClassPrefix+gpuClassName, 1), index.LaneDRAExtended},
		{"unrelated extended resource", []any{gpuClass()}, withLimit(pod("a", "uid-a"), "example.com/fpga", 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]any{node("dp-node", 8)}, tt.classes...)
			objs = append(objs, tt.pod)
			s := build(t, cfg, objs...).Snapshot()
			p := s.Pod(index.Key{Namespace: ns, Name: tt.pod.Name})
			if p == nil {
				t.Fatal("pod not indexed")
			}
			if got := s.PodLane(p); got != tt.want {
				t.Errorf("PodLane = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolvePodClaims(t *testing.T) {
	p := withNamedClaim(withTemplateClaim(withTemplateClaim(pod("llm-0", "uid-llm-0"), "gpu", "tmpl"), "skipped", "tmpl-2"), "shared", "shared-gpu")
	p = withClaimStatus(p, "gpu", "llm-0-gpu-abcde")
	p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: "skipped"})

	mine := ownedBy(claim("llm-0-gpu-abcde", "uid-c"), p, "gpu")
	shared := claim("shared-gpu", "uid-shared")

	t.Run("status, skipped entry and named claim", func(t *testing.T) {
		s := build(t, index.Config{}, p, mine, shared).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: ns, Name: "llm-0"}))
		if len(pcs) != 2 {
			t.Fatalf("ResolvePodClaims = %+v, want 2 entries (the skipped template left out)", pcs)
		}
		if pcs[0].Name != "gpu" || pcs[0].Template != "tmpl" || pcs[0].ClaimName != "llm-0-gpu-abcde" || pcs[0].Claim == nil {
			t.Errorf("template entry = %+v", pcs[0])
		}
		if pcs[1].Name != "shared" || pcs[1].ClaimName != "shared-gpu" || pcs[1].Claim == nil {
			t.Errorf("named entry = %+v", pcs[1])
		}
	})
	t.Run("generated claim of another pod", func(t *testing.T) {
		theirs := ownedBy(claim("llm-0-gpu-abcde", "uid-c"), pod("llm-0", "uid-previous"), "gpu")
		s := build(t, index.Config{}, p, theirs, shared).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: ns, Name: "llm-0"}))
		if pcs[0].Claim != nil || pcs[0].ClaimName != "llm-0-gpu-abcde" {
			t.Errorf("a claim owned by another pod UID was resolved: %+v", pcs[0])
		}
	})
	t.Run("generated claim found by owner reference", func(t *testing.T) {
		np := withTemplateClaim(pod("new", "uid-new"), "gpu", "tmpl")
		c := ownedBy(claim("new-gpu-xyz", "uid-x"), np, "gpu")
		s := build(t, index.Config{}, np, c).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: ns, Name: "new"}))
		if len(pcs) != 1 || pcs[0].ClaimName != "new-gpu-xyz" || pcs[0].Claim == nil {
			t.Errorf("ResolvePodClaims = %+v, want the generated claim", pcs)
		}
	})
	t.Run("extended claim by owner", func(t *testing.T) {
		ep := withLimit(pod("ext", "uid-ext"), gpuResource, 1)
		c := extendedFor(claim("ext-gpu-1", "uid-e"), ep)
		s := build(t, index.Config{}, gpuClass(), ep, c).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: ns, Name: "ext"}))
		if len(pcs) != 1 || pcs[0].Name != "" || pcs[0].Claim == nil {
			t.Errorf("ResolvePodClaims = %+v, want the extended claim", pcs)
		}
	})
}

func TestClaimNodeFromSelector(t *testing.T) {
	hostname := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-h"}}},
	}}}
	twoTerms := &corev1.NodeSelector{NodeSelectorTerms: append(nodeSelector("a").NodeSelectorTerms, nodeSelector("b").NodeSelectorTerms...)}
	zone := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}},
	}}}
	for _, tc := range []struct {
		name string
		sel  *corev1.NodeSelector
		want string
	}{
		{"matchFields metadata.name", nodeSelector("node-1"), "node-1"},
		{"hostname label", hostname, "node-h"},
		{"two terms", twoTerms, ""},
		{"zone", zone, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := allocated(claim("c", "uid-c"), "", time.Time{}, result("gpu", "node-1", "gpu-0"))
			c.Status.Allocation.NodeSelector = tc.sel
			s := build(t, index.Config{}, c).Snapshot()
			if got := s.Claim(index.Key{Namespace: ns, Name: "c"}).Node; got != tc.want {
				t.Errorf("Node = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClaimResultClasses(t *testing.T) {
	c := claim("c", "uid-c", request("gpu", gpuClassName), resourceapi.DeviceRequest{Name: "flex", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: gpuClassName}, {Name: "small", DeviceClassName: migClassName},
	}})
	c = allocated(c, "node-1", time.Time{}, result("gpu", "node-1", "gpu-0"), result("flex/small", "node-1", "gpu-1-mig"))
	got := build(t, index.Config{}, c).Snapshot().Claim(index.Key{Namespace: ns, Name: "c"})
	if len(got.Results) != 2 || got.Results[0].Class != gpuClassName || got.Results[1].Class != migClassName {
		t.Errorf("Results = %+v, want classes gpu then mig", got.Results)
	}
	if classes := got.Classes(); !slices.Equal(classes, []string{gpuClassName, migClassName}) {
		t.Errorf("Classes = %v", classes)
	}
}

func TestUnsupportedObject(t *testing.T) {
	ix := index.New(index.Config{})
	if err := ix.Upsert(&corev1.ConfigMap{}, true); err == nil || !strings.Contains(err.Error(), "unsupported") {
		t.Errorf("Upsert(ConfigMap) = %v, want an unsupported-type error", err)
	}
	if err := ix.Delete(&corev1.Secret{}); err == nil {
		t.Errorf("Delete(Secret) = nil, want an error")
	}
	// Deleting objects that were never added is harmless.
	for _, o := range []any{claim("x", "uid-x"), pod("x", "uid-x"), slice("x", "x", 1), node("x", 0), gpuClass()} {
		if err := ix.Delete(o); err != nil {
			t.Errorf("Delete(%T) of an unknown object: %v", o, err)
		}
	}
}

func TestDeleteTombstones(t *testing.T) {
	p := withTemplateClaim(pod("llm-0", "uid-llm-0"), "gpu", "t")
	c := claim("c", "uid-c")
	s := slice("node-1", "node-1", 1, gpus("gpu-0")...)
	ix := build(t, index.Config{}, gpuClass(), s, p, c, node("node-1", 0))
	for _, o := range []any{p, c, s} {
		del(t, ix, cache.DeletedFinalStateUnknown{Key: "k", Obj: o})
	}
	snap := ix.Snapshot()
	if len(snap.Pods) != 0 || len(snap.Claims) != 0 || len(snap.Devices) != 0 {
		t.Errorf("after tombstone deletes: %d pods, %d claims, %d devices", len(snap.Pods), len(snap.Claims), len(snap.Devices))
	}
	if len(snap.Nodes) != 1 {
		t.Errorf("nodes = %d, want 1", len(snap.Nodes))
	}
}

func TestSelectMemoAndErrors(t *testing.T) {
	d := gpuDevice("gpu-0", "GPU-0")
	m := migDevice("gpu-1-mig", "MIG-1", "GPU-1", "1g.5gb", "4864Mi")
	all := deviceClass("all", "device.driver == 'gpu.nvidia.com'")
	s := build(t, index.Config{}, all, slice("node-1", "node-1", 1, d, m)).Snapshot()
	sel := cel("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")
	got, free, errs := s.Select("all", sel)
	if len(got) != 1 || got[0].Key.Device != "gpu-1-mig" || free != 1 {
		t.Errorf("Select = %v (%d free), want the free MIG device", got, free)
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "gpu.nvidia.com/node-1/gpu-0") {
		t.Errorf("Select errors = %v, want one naming the full GPU", errs)
	}
	again, _, _ := s.Select("all", sel)
	if len(again) != 1 {
		t.Errorf("memoised Select = %v", again)
	}
	if err := s.CompileSelectors(cel("device.driver ==")); err == nil {
		t.Errorf("CompileSelectors of a broken expression = nil")
	}
}
