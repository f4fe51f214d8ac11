package index_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

func gpus(names ...string) []resourceapi.Device {
	out := make([]resourceapi.Device, len(names))
	for i, n := range names {
		out[i] = GPUDevice(n, "GPU-"+n)
	}
	return out
}

func TestPoolNewestGenerationWins(t *testing.T) {
	gen1 := Slice("node-1-gen1", "node-1", 1, gpus("gpu-0", "gpu-1", "gpu-2", "gpu-3")...)
	gen2 := Slice("node-1-gen2", "node-1", 2, gpus("gpu-0", "gpu-1", "gpu-2")...)
	for _, tc := range []struct {
		name  string
		order []*resourceapi.ResourceSlice
	}{
		{"old generation first", []*resourceapi.ResourceSlice{gen1, gen2}},
		{"new generation first", []*resourceapi.ResourceSlice{gen2, gen1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := Build(t, index.Config{}, GPUClass())
			for _, s := range tc.order {
				Upsert(t, ix, s, true)
			}
			s := ix.Snapshot()
			want := []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2"}
			if got := DeviceNames(s); !slices.Equal(got, want) {
				t.Fatalf("devices = %v, want %v (generation 2 only)", got, want)
			}
			for _, d := range s.Devices {
				if d.Slice != gen2.Name {
					t.Errorf("device %s comes from slice %s, want %s", d.Key, d.Slice, gen2.Name)
				}
			}
			if got := ClassDeviceNames(s, GPUClassName); !slices.Equal(got, want) {
				t.Errorf("class devices = %v, want %v", got, want)
			}

			// The driver deletes the new generation (rollback): the
			// old one is all that is left and counts again.
			Del(t, ix, gen2)
			s = ix.Snapshot()
			want = []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2", "node-1/gpu-3"}
			if got := DeviceNames(s); !slices.Equal(got, want) {
				t.Fatalf("after deleting generation 2: devices = %v, want %v", got, want)
			}
			for _, d := range s.Devices {
				if d.Slice != gen1.Name {
					t.Errorf("device %s comes from slice %s, want %s", d.Key, d.Slice, gen1.Name)
				}
			}
			if got := ClassDeviceNames(s, GPUClassName); !slices.Equal(got, want) {
				t.Errorf("class devices = %v, want %v", got, want)
			}

			Del(t, ix, gen1)
			if got := DeviceNames(ix.Snapshot()); len(got) != 0 {
				t.Errorf("after deleting every slice: devices = %v, want none", got)
			}
		})
	}
}

func TestPoolSpanningSlices(t *testing.T) {
	a := Slice("node-2-a", "node-2", 3, gpus("gpu-0", "gpu-1")...)
	b := Slice("node-2-b", "node-2", 3, gpus("gpu-2", "gpu-3")...)
	a.Spec.Pool.ResourceSliceCount, b.Spec.Pool.ResourceSliceCount = 2, 2
	ix := Build(t, index.Config{}, GPUClass(), a, b)

	s := ix.Snapshot()
	want := []string{"node-2/gpu-0", "node-2/gpu-1", "node-2/gpu-2", "node-2/gpu-3"}
	if got := DeviceNames(s); !slices.Equal(got, want) {
		t.Fatalf("devices = %v, want %v", got, want)
	}
	if d := s.Device(DevKey("node-2", "gpu-3")); d == nil || d.Slice != "node-2-b" || d.Node != "node-2" {
		t.Errorf("gpu-3 = %+v, want slice node-2-b on node-2", d)
	}

	Del(t, ix, a)
	want = []string{"node-2/gpu-2", "node-2/gpu-3"}
	if got := DeviceNames(ix.Snapshot()); !slices.Equal(got, want) {
		t.Errorf("after deleting one slice of the pool: devices = %v, want %v", got, want)
	}
}

func TestSliceMovedBetweenPools(t *testing.T) {
	s1 := Slice("shared-slice", "node-a", 1, gpus("gpu-0", "gpu-1")...)
	other := Slice("node-b-slice", "node-b", 1, gpus("gpu-7")...)
	ix := Build(t, index.Config{}, GPUClass(), s1, other)

	moved := Slice("shared-slice", "node-b", 1, gpus("gpu-0", "gpu-1")...)
	Upsert(t, ix, moved, true)
	s := ix.Snapshot()
	want := []string{"node-b/gpu-0", "node-b/gpu-1", "node-b/gpu-7"}
	if got := DeviceNames(s); !slices.Equal(got, want) {
		t.Fatalf("after the slice moved to pool node-b: devices = %v, want %v", got, want)
	}
	if d := s.Device(DevKey("node-a", "gpu-0")); d != nil {
		t.Errorf("device of the old pool still present: %+v", d.Key)
	}
	if got := ClassDeviceNames(s, GPUClassName); !slices.Equal(got, want) {
		t.Errorf("class devices = %v, want %v", got, want)
	}

	Del(t, ix, moved)
	want = []string{"node-b/gpu-7"}
	if got := DeviceNames(ix.Snapshot()); !slices.Equal(got, want) {
		t.Errorf("after deleting the moved slice: devices = %v, want %v", got, want)
	}
}

func TestClassUpdateRematchesDevices(t *testing.T) {
	node1 := Slice("node-1", "node-1", 1,
		GPUDevice("gpu-0", "GPU-0"),
		MIGDevice("gpu-1-mig-1g5gb-19-0", "MIG-0", "GPU-1", "1g.5gb", "4864Mi"))
	flexible := DeviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'gpu'")
	ix := Build(t, index.Config{}, flexible, node1)

	before := ix.Snapshot()
	if got := ClassDeviceNames(before, "flex"); !slices.Equal(got, []string{"node-1/gpu-0"}) {
		t.Fatalf("before the update: class flex selects %v, want [node-1/gpu-0]", got)
	}
	gpuBefore := before.Device(DevKey("node-1", "gpu-0"))

	Upsert(t, ix, DeviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'"), true)
	after := ix.Snapshot()
	if got := ClassDeviceNames(after, "flex"); !slices.Equal(got, []string{"node-1/gpu-1-mig-1g5gb-19-0"}) {
		t.Errorf("after the update: class flex selects %v, want the MIG device", got)
	}
	if d := after.Device(DevKey("node-1", "gpu-0")); d == nil || slices.Contains(d.Classes, "flex") {
		t.Errorf("after the update gpu-0 classes = %v, want flex gone", d.Classes)
	}

	// Devices are replaced, not mutated: the earlier snapshot still
	// shows the old membership.
	if !slices.Equal(gpuBefore.Classes, []string{"flex"}) {
		t.Errorf("a device held by an earlier snapshot changed: classes %v, want [flex]", gpuBefore.Classes)
	}
	if got := ClassDeviceNames(before, "flex"); !slices.Equal(got, []string{"node-1/gpu-0"}) {
		t.Errorf("earlier snapshot now says class flex selects %v", got)
	}
	if d := before.Device(DevKey("node-1", "gpu-1-mig-1g5gb-19-0")); slices.Contains(d.Classes, "flex") {
		t.Errorf("the MIG device held by an earlier snapshot gained class flex")
	}

	// An update with the same selectors changes nothing.
	Upsert(t, ix, DeviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'"), true)
	if got := ClassDeviceNames(ix.Snapshot(), "flex"); !slices.Equal(got, []string{"node-1/gpu-1-mig-1g5gb-19-0"}) {
		t.Errorf("after a no-op update: class flex selects %v", got)
	}
}

// A device that already has a selector error for one class must not be
// changed in place when another class starts failing on it: an earlier
// snapshot (and a concurrent scrape) holds that device.
func TestClassUpdateDoesNotMutateEarlierSnapshotErrors(t *testing.T) {
	// "broken" fails on every full GPU: they have no profile attribute.
	broken := DeviceClass("broken", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")
	flex := DeviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'")
	ix := Build(t, index.Config{}, broken, flex, Slice("node-1", "node-1", 1, gpus("gpu-0")...))

	before := ix.Snapshot()
	d := before.Device(DevKey("node-1", "gpu-0"))
	if _, ok := d.ClassErrors["broken"]; !ok || len(d.ClassErrors) != 1 {
		t.Fatalf("before: ClassErrors = %v, want only class broken", d.ClassErrors)
	}

	// flex now fails on the device too.
	Upsert(t, ix, DeviceClass("flex", "device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-x'"), true)
	after := ix.Snapshot().Device(DevKey("node-1", "gpu-0"))
	if _, ok := after.ClassErrors["flex"]; !ok {
		t.Errorf("after: ClassErrors = %v, want an error for flex", after.ClassErrors)
	}
	if _, ok := d.ClassErrors["flex"]; ok {
		t.Errorf("the device held by the earlier snapshot was mutated: ClassErrors = %v, want only broken", d.ClassErrors)
	}
}

func TestClassDeletion(t *testing.T) {
	ix := Build(t, index.Config{}, GPUClass(), MIGClass(), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...))
	before := ix.Snapshot()
	Del(t, ix, GPUClass())
	s := ix.Snapshot()
	if s.Class(GPUClassName) != nil {
		t.Errorf("deleted class still in the snapshot")
	}
	if got := ClassDeviceNames(s, GPUClassName); len(got) != 0 {
		t.Errorf("deleted class still selects %v", got)
	}
	for _, d := range s.Devices {
		if len(d.Classes) != 0 {
			t.Errorf("device %s still lists classes %v", d.Key, d.Classes)
		}
	}
	for _, row := range allocator.Of(s).ClassCapacity() {
		if row.DeviceClass == GPUClassName {
			t.Errorf("ClassCapacity still reports the deleted class: %+v", row)
		}
	}
	if got := ClassDeviceNames(before, GPUClassName); len(got) != 2 {
		t.Errorf("the earlier snapshot lost the class membership: %v", got)
	}
	// Deleting a class that does not exist is harmless.
	Del(t, ix, DeviceClass("never-existed"))
}

func TestDeviceNode(t *testing.T) {
	perDevice := func(devs ...resourceapi.Device) *resourceapi.ResourceSlice {
		s := Slice("network", "unused", 1, devs...)
		s.Spec.NodeName = nil
		s.Spec.Pool.Name = "fabric"
		s.Spec.PerDeviceNodeSelection = Ptr(true)
		return s
	}
	onNode := GPUDevice("gpu-0", "GPU-0")
	onNode.NodeName = Ptr("node-7")
	everywhere := GPUDevice("gpu-1", "GPU-1")
	everywhere.AllNodes = Ptr(true)
	selected := GPUDevice("gpu-2", "GPU-2")
	selected.NodeSelector = NodeSelector("node-8")

	allNodes := Slice("all", "unused", 1, gpus("gpu-0")...)
	allNodes.Spec.NodeName = nil
	allNodes.Spec.AllNodes = Ptr(true)
	allNodes.Spec.Pool.Name = "cluster-pool"

	sliceSelector := Slice("rack", "unused", 1, gpus("gpu-0")...)
	sliceSelector.Spec.NodeName = nil
	sliceSelector.Spec.NodeSelector = NodeSelector("node-9")
	sliceSelector.Spec.Pool.Name = "rack-pool"

	tests := []struct {
		name  string
		slice *resourceapi.ResourceSlice
		dev   index.DeviceKey
		want  string
	}{
		{"slice nodeName", Slice("node-1", "node-1", 1, gpus("gpu-0")...), DevKey("node-1", "gpu-0"), "node-1"},
		{"per-device nodeName", perDevice(onNode), DevKey("fabric", "gpu-0"), "node-7"},
		{"per-device allNodes", perDevice(everywhere), DevKey("fabric", "gpu-1"), ""},
		{"per-device node selector", perDevice(selected), DevKey("fabric", "gpu-2"), ""},
		{"slice allNodes", allNodes, DevKey("cluster-pool", "gpu-0"), ""},
		{"slice node selector", sliceSelector, DevKey("rack-pool", "gpu-0"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Build(t, index.Config{}, GPUClass(), tt.slice).Snapshot()
			d := s.Device(tt.dev)
			if d == nil {
				t.Fatalf("device %s not indexed; have %v", tt.dev, DeviceNames(s))
			}
			if d.Node != tt.want {
				t.Errorf("Node = %q, want %q", d.Node, tt.want)
			}
		})
	}
}

func TestGPUUUID(t *testing.T) {
	bare := GPUDevice("gpu-0", "GPU-bare")
	qualified := resourceapi.Device{Name: "gpu-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"gpu.nvidia.com/type": StrAttr("gpu"),
		"gpu.nvidia.com/uuid": StrAttr("GPU-qualified"),
	}}
	foreign := resourceapi.Device{Name: "gpu-2", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                StrAttr("gpu"),
		"example.com/uuid":    StrAttr("not-ours"),
		"gpu.nvidia.com/name": StrAttr("x"),
	}}
	s := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, bare, qualified, foreign)).Snapshot()
	for dev, want := range map[string]string{"gpu-0": "GPU-bare", "gpu-1": "GPU-qualified", "gpu-2": ""} {
		d := s.Device(DevKey("node-1", dev))
		if d == nil {
			t.Fatalf("%s not indexed", dev)
		}
		if d.GPUUUID != want {
			t.Errorf("%s: GPUUUID = %q, want %q", dev, d.GPUUUID, want)
		}
	}
	// The qualified attribute name is in the driver's domain, so the
	// class selector sees it as device.attributes['gpu.nvidia.com'].type.
	if got := ClassDeviceNames(s, GPUClassName); !slices.Equal(got, []string{"node-1/gpu-0", "node-1/gpu-1", "node-1/gpu-2"}) {
		t.Errorf("class devices = %v", got)
	}
}

// A bare attribute name is the same attribute as its name qualified with the
// driver's domain (the DRA API's rule), so a lookup by either form finds it.
func TestDeviceAttributeLookup(t *testing.T) {
	dev := GPUDevice("gpu-0", "GPU-0")
	dev.Attributes["index"] = resourceapi.DeviceAttribute{IntValue: Ptr(int64(3))}
	dev.Attributes["mig.capable"] = resourceapi.DeviceAttribute{BoolValue: Ptr(true)}
	dev.Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: Ptr("580.65.6")}
	dev.Attributes["resource.kubernetes.io/pciBusID"] = StrAttr("0000:1b:00.0")
	d := Build(t, index.Config{}, Slice("node-1", "node-1", 1, dev)).Snapshot().Device(DevKey("node-1", "gpu-0"))

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
	full := Consumes(GPUDevice("gpu-0", "GPU-A100"), "gpu-0-counter-set", "40Gi")
	half0 := Consumes(MIGDevice("gpu-0-mig-3g20gb-9-0", "MIG-0", "GPU-A100", "3g.20gb", "20Gi"), "gpu-0-counter-set", "20Gi")
	half1 := Consumes(MIGDevice("gpu-0-mig-3g20gb-1-4", "MIG-1", "GPU-A100", "3g.20gb", "20Gi"), "gpu-0-counter-set", "20Gi")
	s := Slice("mig-node", "mig-node", 1, full, half0, half1)
	s.Spec.SharedCounters = []resourceapi.CounterSet{{
		Name:     "gpu-0-counter-set",
		Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("40Gi")}},
	}}
	return s
}

func TestSharedCountersMIG(t *testing.T) {
	base := []any{GPUClass(), MIGClass(), migPool()}
	full, half0, half1 := DevKey("mig-node", "gpu-0"), DevKey("mig-node", "gpu-0-mig-3g20gb-9-0"), DevKey("mig-node", "gpu-0-mig-3g20gb-1-4")

	t.Run("nothing allocated", func(t *testing.T) {
		s := Build(t, index.Config{}, base...).Snapshot()
		for _, k := range []index.DeviceKey{full, half0, half1} {
			if !allocator.Of(s).Available(s.Device(k)) {
				t.Errorf("%s not available with nothing allocated", k)
			}
		}
	})
	t.Run("one half allocated", func(t *testing.T) {
		c := Allocated(Claim("mig-claim", "uid-mig", Request("mig", MIGClassName)), "mig-node", time.Time{}, Result("mig", "mig-node", half0.Device))
		s := Build(t, index.Config{}, append(base, c)...).Snapshot()
		if allocator.Of(s).Available(s.Device(full)) {
			t.Errorf("full GPU available while a MIG partition of it is allocated")
		}
		if s.InUse(full) {
			t.Errorf("full GPU counted as in use")
		}
		if !s.InUse(half0) || allocator.Of(s).Available(s.Device(half0)) {
			t.Errorf("allocated half: InUse=%v Available=%v, want true, false", s.InUse(half0), allocator.Of(s).Available(s.Device(half0)))
		}
		if !allocator.Of(s).Available(s.Device(half1)) {
			t.Errorf("the other half should still fit in the counters")
		}
		want := []allocator.Capacity{
			{DeviceClass: GPUClassName, Node: "mig-node", Total: 1, Allocated: 0, Free: 0},
			{DeviceClass: MIGClassName, Node: "mig-node", Total: 2, Allocated: 1, Free: 1},
		}
		if got := allocator.Of(s).ClassCapacity(); !slices.Equal(got, want) {
			t.Errorf("ClassCapacity = %+v, want %+v", got, want)
		}
	})
	t.Run("full GPU allocated", func(t *testing.T) {
		c := Allocated(Claim("gpu-claim", "uid-gpu"), "mig-node", time.Time{}, Result("gpu", "mig-node", full.Device))
		s := Build(t, index.Config{}, append(base, c)...).Snapshot()
		for _, k := range []index.DeviceKey{half0, half1} {
			if allocator.Of(s).Available(s.Device(k)) {
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
		c := Allocated(Claim("mig-claim", "uid-mig", Request("mig", MIGClassName)), "mig-node", time.Time{}, Result("mig", "mig-node", half0.Device))
		s := Build(t, index.Config{}, GPUClass(), MIGClass(), old, newer, c).Snapshot()
		if allocator.Of(s).Available(s.Device(full)) {
			t.Errorf("full GPU available: the stale generation's 80Gi counter was used")
		}
	})
	t.Run("counter set nobody publishes", func(t *testing.T) {
		p := migPool()
		p.Spec.SharedCounters = nil
		s := Build(t, index.Config{}, GPUClass(), p).Snapshot()
		if allocator.Of(s).Available(s.Device(full)) {
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
			d := GPUDevice("gpu-0", "GPU-0")
			d.Taints = []resourceapi.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: tc.effect}}
			s := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, d)).Snapshot()
			if got := allocator.Of(s).Available(s.Device(DevKey("node-1", "gpu-0"))); got != tc.free {
				t.Errorf("Available = %v, want %v", got, tc.free)
			}
			free := 0
			if tc.free {
				free = 1
			}
			want := []allocator.Capacity{{DeviceClass: GPUClassName, Node: "node-1", Total: 1, Free: free}}
			if got := allocator.Of(s).ClassCapacity(); !slices.Equal(got, want) {
				t.Errorf("ClassCapacity = %+v, want %+v", got, want)
			}
		})
	}
}

func TestAdminAccessNotCounted(t *testing.T) {
	admin := Result("gpu", "node-1", "gpu-0")
	admin.AdminAccess = Ptr(true)
	monitor := Allocated(Claim("dcgm-monitor", "uid-admin"), "node-1", time.Time{}, admin)
	s := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...), monitor).Snapshot()
	k := DevKey("node-1", "gpu-0")
	if s.InUse(k) {
		t.Errorf("an admin-access allocation makes the device in use")
	}
	if got := s.AllocatedTo(k); len(got) != 0 {
		t.Errorf("AllocatedTo = %d claims, want 0", len(got))
	}
	if !allocator.Of(s).Available(s.Device(k)) {
		t.Errorf("device not available despite only an admin-access allocation")
	}
	c := s.Claim(index.Key{Namespace: NS, Name: "dcgm-monitor"})
	if len(c.Results) != 1 || !c.Results[0].AdminAccess {
		t.Errorf("Results = %+v, want one admin-access result", c.Results)
	}
}

func TestAllocatedToAndShareable(t *testing.T) {
	shared := GPUDevice("gpu-0", "GPU-0")
	shared.AllowMultipleAllocations = Ptr(true)
	withShare := func(c *resourceapi.ResourceClaim, id string) *resourceapi.ResourceClaim {
		uid := types.UID(id)
		c.Status.Allocation.Devices.Results[0].ShareID = &uid
		return c
	}
	a := withShare(Allocated(Claim("a", "uid-a"), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0")), "00000000-0000-4000-8000-00000000000a")
	b := withShare(Allocated(Claim("b", "uid-b"), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0")), "00000000-0000-4000-8000-00000000000b")
	s := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, shared), a, b).Snapshot()
	k := DevKey("node-1", "gpu-0")
	if got := len(s.AllocatedTo(k)); got != 2 {
		t.Errorf("AllocatedTo = %d claims, want 2", got)
	}
	if !allocator.Of(s).Available(s.Device(k)) {
		t.Errorf("a shareable device in use should still be available")
	}
	// In the capacity figures it is allocated, and free too: the shares
	// consumed nothing of its capacity (consumedCapacity absent), so a
	// further share fits.
	want := []allocator.Capacity{{DeviceClass: GPUClassName, Node: "node-1", Total: 1, Allocated: 1, Free: 1}}
	if got := allocator.Of(s).ClassCapacity(); !slices.Equal(got, want) {
		t.Errorf("ClassCapacity = %+v, want %+v", got, want)
	}
	wantLane := []allocator.Capacity{{Lane: index.LaneDRA, DeviceClass: GPUClassName, Node: "node-1", Total: 1, Allocated: 1, Free: 1}}
	if got := allocator.Of(s).LaneCapacity(); !slices.Equal(got, wantLane) {
		t.Errorf("LaneCapacity = %+v, want %+v", got, wantLane)
	}
}

func TestPodRelevance(t *testing.T) {
	cpuOnly := Pod("web", "uid-web")
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
		{"template claim", WithTemplateClaim(Pod("a", "uid-a"), "gpu", "tmpl"), true},
		{"named claim", WithNamedClaim(Pod("b", "uid-b"), "gpu", "shared"), true},
		{"device-plugin GPU limit", WithLimit(Pod("c", "uid-c"), GPUResource, 1), true},
		{"implicit deviceclass resource", WithLimit(Pod("d", "uid-d"), resourceapi.ResourceDeviceClassPrefix+GPUClassName, 1), true},
		{"extended claim status only", WithExtendedClaimStatus(Pod("e", "uid-e"), "e-gpu-x"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Build(t, index.Config{}, tt.pod).Snapshot()
			if got := s.Pod(index.Key{Namespace: NS, Name: tt.pod.Name}) != nil; got != tt.indexed {
				t.Errorf("indexed = %v, want %v", got, tt.indexed)
			}
		})
	}

	t.Run("a relevant pod updated to irrelevant is removed", func(t *testing.T) {
		p := WithExtendedClaimStatus(Pod("f", "uid-f"), "f-gpu")
		ix := Build(t, index.Config{}, p)
		plain := Pod("f", "uid-f")
		Upsert(t, ix, plain, true)
		if ix.Snapshot().Pod(index.Key{Namespace: NS, Name: "f"}) != nil {
			t.Errorf("pod still indexed after it stopped using DRA")
		}
	})
}

func TestExtendedRequests(t *testing.T) {
	p := Pod("train", "uid-train")
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	p.Spec.Containers = []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: q(2)}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{GPUResource: q(1)}, Limits: corev1.ResourceList{GPUResource: q(1)}}},
	}
	p.Spec.InitContainers = []corev1.Container{
		{Name: "init-small", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: q(1)}}},
		{Name: "init-big", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/fpga": q(4)}}},
	}
	got := Build(t, index.Config{}, p).Snapshot().Pod(index.Key{Namespace: NS, Name: "train"}).ExtendedRequests
	want := map[string]int64{GPUResource: 3, "example.com/fpga": 4}
	if len(got) != len(want) || got[GPUResource] != 3 || got["example.com/fpga"] != 4 {
		t.Errorf("ExtendedRequests = %v, want %v", got, want)
	}
}

func TestClaimRecreatedWithNewUID(t *testing.T) {
	p := Pod("llm-0", "uid-pod")
	first := ReservedFor(Allocated(Claim("shared-gpu", "uid-1"), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), p)
	ix := Build(t, index.Config{Now: func() time.Time { return T0 }}, GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...), first)

	second := Allocated(CreatedAt(Claim("shared-gpu", "uid-2"), T0.Add(-time.Minute)), "node-1", T0.Add(-time.Minute), Result("gpu", "node-1", "gpu-1"))
	Upsert(t, ix, second, true)
	s := ix.Snapshot()
	c := s.Claim(index.Key{Namespace: NS, Name: "shared-gpu"})
	if c == nil || c.UID != "uid-2" {
		t.Fatalf("claim = %+v, want uid-2", c)
	}
	if len(s.Claims) != 1 {
		t.Errorf("%d claims indexed, want 1", len(s.Claims))
	}
	if s.InUse(DevKey("node-1", "gpu-0")) || !s.InUse(DevKey("node-1", "gpu-1")) {
		t.Errorf("device usage follows the old claim: gpu-0 %v, gpu-1 %v", s.InUse(DevKey("node-1", "gpu-0")), s.InUse(DevKey("node-1", "gpu-1")))
	}
	if c.ReservedFor(p.UID) {
		t.Errorf("the new claim reports the old claim's reservation")
	}
	// The recreated claim never reserved anybody: it has been idle since
	// its own allocation, not since the exporter noticed it.
	if got := s.UnreservedSince(c); !got.Equal(T0.Add(-time.Minute)) {
		t.Errorf("UnreservedSince = %v, want its allocation time %v", got, T0.Add(-time.Minute))
	}
}

func TestEventsRelevance(t *testing.T) {
	p := Pod("llm-0", "uid-llm-0")
	tests := []struct {
		reason, message string
		kept            bool
	}{
		{vocab.FailedScheduling, "0/3 nodes are available: cannot allocate all claims", true},
		{vocab.FailedResourceClaimCreation, "webhook denied", true},
		{vocab.FailedPrepareDynamicResources, "NodePrepareResources failed", true},
		{"FailedCreatePodSandBox", "failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=gpu-0", true},
		{"Failed", "Error: failed to prepare dynamic resources: rpc error", true},
		{"Failed", "Error: failed to create containerd task: CDI device injection failed: unresolvable CDI devices gpu.nvidia.com/gpu=GPU-0", true},
		{"FailedCreatePodSandBox", "failed to setup network for sandbox", false},
		{"Failed", `Error: failed to create containerd task: exec: "/opt/mcdis/run.sh": stat /opt/mcdis/run.sh: no such file or directory`, false},
		{"BackOff", "Back-off restarting failed container", false},
		{"Unhealthy", "Readiness probe failed: HTTP 503 (cdi mentioned, but not a sandbox failure)", false},
	}
	for i, tt := range tests {
		t.Run(tt.reason+"/"+tt.message[:10], func(t *testing.T) {
			e := Event("ev"+string(rune('a'+i)), p, tt.reason, tt.message, T0)
			s := Build(t, index.Config{}, p, e).Snapshot()
			if got := len(s.Events) == 1; got != tt.kept {
				t.Errorf("kept = %v, want %v", got, tt.kept)
			}
			if got := vocab.RelevantEvent(tt.reason, tt.message); got != tt.kept {
				t.Errorf("RelevantEvent = %v, want %v", got, tt.kept)
			}
		})
	}

	t.Run("an event updated to an irrelevant reason is dropped", func(t *testing.T) {
		ix := Build(t, index.Config{}, p, Event("ev", p, vocab.FailedScheduling, "x", T0))
		Upsert(t, ix, Event("ev", p, "BackOff", "x", T0), true)
		if n := len(ix.Snapshot().Events); n != 0 {
			t.Errorf("%d events kept, want 0", n)
		}
	})
	t.Run("Normal events and events about other objects are dropped, as the informer's field selector drops them", func(t *testing.T) {
		normal := Event("normal", p, vocab.FailedScheduling, "x", T0)
		normal.Type = corev1.EventTypeNormal
		onNode := Event("on-node", p, vocab.FailedPrepareDynamicResources, "x", T0)
		onNode.InvolvedObject.Kind = "Node"
		v1Normal := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: "v1-normal"},
			Regarding:  corev1.ObjectReference{Kind: "Pod", Namespace: NS, Name: p.Name, UID: p.UID},
			Type:       corev1.EventTypeNormal, Reason: vocab.FailedScheduling, Note: "x",
		}
		ix := Build(t, index.Config{}, p, normal, onNode, v1Normal, Event("kept", p, vocab.FailedScheduling, "x", T0))
		var got []string
		for _, e := range ix.Snapshot().Events {
			got = append(got, e.Key.Name)
		}
		if !slices.Equal(got, []string{"kept"}) {
			t.Errorf("events kept: %v, want [kept]", got)
		}
	})
	t.Run("delete", func(t *testing.T) {
		e := Event("ev", p, vocab.FailedScheduling, "x", T0)
		ix := Build(t, index.Config{}, p, e)
		Del(t, ix, cache.DeletedFinalStateUnknown{Key: "prod/ev", Obj: e})
		if n := len(ix.Snapshot().Events); n != 0 {
			t.Errorf("%d events kept after delete, want 0", n)
		}
	})
}

func TestPodEvents(t *testing.T) {
	p := WithTemplateClaim(Pod("llm-0", "uid-new"), "gpu", "tmpl")
	other := WithTemplateClaim(Pod("llm-0", "uid-old"), "gpu", "tmpl") // a previous pod of the same name
	third := WithTemplateClaim(Pod("llm-1", "uid-1"), "gpu", "tmpl")
	noUID := Event("no-uid", p, vocab.FailedScheduling, "no uid", T0.Add(-3*time.Minute))
	noUID.InvolvedObject.UID = ""
	v1 := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: NS, Name: "v1-event"},
		Regarding:           corev1.ObjectReference{Kind: "Pod", Namespace: NS, Name: "llm-0", UID: "uid-new"},
		Type:                corev1.EventTypeWarning,
		Reason:              vocab.FailedScheduling,
		Note:                "cannot allocate all claims",
		ReportingController: "default-scheduler",
		Series:              &eventsv1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(T0.Add(-1 * time.Minute))},
	}
	objs := []any{p, third,
		Event("oldest", p, vocab.FailedScheduling, "oldest", T0.Add(-10*time.Minute)),
		Event("newest", p, vocab.FailedPrepareDynamicResources, "newest", T0),
		Event("tie-b", p, vocab.FailedScheduling, "tie b", T0.Add(-5*time.Minute)),
		Event("tie-a", p, vocab.FailedScheduling, "tie a", T0.Add(-5*time.Minute)),
		Event("old-pod", other, vocab.FailedPrepareDynamicResources, "previous incarnation", T0.Add(time.Minute)),
		Event("other-pod", third, vocab.FailedScheduling, "another pod", T0.Add(time.Minute)),
		noUID, v1,
	}
	s := Build(t, index.Config{}, objs...).Snapshot()
	var got []string
	for _, e := range s.PodEvents(s.Pod(index.Key{Namespace: NS, Name: "llm-0"})) {
		got = append(got, e.Key.Name)
	}
	want := []string{"newest", "v1-event", "no-uid", "tie-a", "tie-b", "oldest"}
	if !slices.Equal(got, want) {
		t.Errorf("PodEvents = %v, want %v", got, want)
	}
	for _, e := range s.PodEvents(s.Pod(index.Key{Namespace: NS, Name: "llm-0"})) {
		if e.Key.Name == "v1-event" && (e.Count != 7 || e.Reporter != "default-scheduler" || e.Message != "cannot allocate all claims") {
			t.Errorf("events.k8s.io event converted to %+v", e)
		}
	}
}

func TestUnreservedSince(t *testing.T) {
	now := T0
	clock := func() time.Time { return now }
	p := Pod("llm-0", "uid-pod")
	base := Allocated(Claim("c", "uid-c"), "node-1", T0.Add(-30*time.Minute), Result("gpu", "node-1", "gpu-0"))

	t.Run("seen live", func(t *testing.T) {
		now = T0
		ix := Build(t, index.Config{Now: clock}, ReservedFor(base, p))
		now = T0.Add(time.Minute)
		Upsert(t, ix, base, true) // the reservation is removed
		now = T0.Add(2 * time.Minute)
		Upsert(t, ix, base, true) // another update, still unreserved
		s := ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: NS, Name: "c"})); !got.Equal(T0.Add(time.Minute)) {
			t.Errorf("UnreservedSince = %v, want %v", got, T0.Add(time.Minute))
		}
		// Reserved again, then released again: the clock restarts.
		now = T0.Add(3 * time.Minute)
		Upsert(t, ix, ReservedFor(base, p), true)
		now = T0.Add(4 * time.Minute)
		Upsert(t, ix, base, true)
		s = ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: NS, Name: "c"})); !got.Equal(T0.Add(4 * time.Minute)) {
			t.Errorf("after a second release UnreservedSince = %v, want %v", got, T0.Add(4*time.Minute))
		}
	})
	t.Run("initial list uses the allocation time", func(t *testing.T) {
		now = T0
		s := Build(t, index.Config{Now: clock}, base).Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: NS, Name: "c"})); !got.Equal(T0.Add(-30 * time.Minute)) {
			t.Errorf("UnreservedSince = %v, want the allocation time %v", got, T0.Add(-30*time.Minute))
		}
	})
	t.Run("initial list without allocation time uses creation", func(t *testing.T) {
		now = T0
		c := Allocated(CreatedAt(Claim("c", "uid-c"), T0.Add(-2*time.Hour)), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0"))
		s := Build(t, index.Config{Now: clock}, c).Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: NS, Name: "c"})); !got.Equal(T0.Add(-2 * time.Hour)) {
			t.Errorf("UnreservedSince = %v, want the creation time %v", got, T0.Add(-2*time.Hour))
		}
	})
	// After a restart the exporter did not see the claim let go. A later
	// live update that leaves it unreserved (a label, a status write) is
	// not the moment it let go either: the idle clock must not restart,
	// or an allocated_unreserved leak disappears on every update.
	t.Run("live update of a claim already unreserved at the initial list", func(t *testing.T) {
		now = T0
		ix := Build(t, index.Config{Now: clock}, base)
		now = T0.Add(time.Minute)
		relabeled := base.DeepCopy()
		relabeled.Labels = map[string]string{"touched": "yes"}
		Upsert(t, ix, relabeled, true)
		s := ix.Snapshot()
		if got := s.UnreservedSince(s.Claim(index.Key{Namespace: NS, Name: "c"})); !got.Equal(T0.Add(-30 * time.Minute)) {
			t.Errorf("UnreservedSince = %v, want the allocation time %v (the update did not release anything)", got, T0.Add(-30*time.Minute))
		}
	})
}

func TestClassCapacity(t *testing.T) {
	objs := []any{
		GPUClass(), MIGClass(), DeviceClass("h100", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"),
		Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1", "gpu-2")...),
		Slice("node-2", "node-2", 1, gpus("gpu-0")...),
		Allocated(Claim("a", "uid-a"), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0")),
		Allocated(Claim("b", "uid-b"), "node-2", time.Time{}, Result("gpu", "node-2", "gpu-0")),
	}
	got := allocator.Of(Build(t, index.Config{}, objs...).Snapshot()).ClassCapacity()
	want := []allocator.Capacity{
		{DeviceClass: GPUClassName, Node: "node-1", Total: 3, Allocated: 1, Free: 2},
		{DeviceClass: GPUClassName, Node: "node-2", Total: 1, Allocated: 1, Free: 0},
		{DeviceClass: "h100", Node: "node-1", Total: 3, Allocated: 1, Free: 2},
		{DeviceClass: "h100", Node: "node-2", Total: 1, Allocated: 1, Free: 0},
		{DeviceClass: MIGClassName, Node: "", Total: 0, Allocated: 0, Free: 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ClassCapacity =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLaneCapacity(t *testing.T) {
	dp1 := Pod("dp-a", "uid-dp-a")
	dp2 := Pod("dp-b", "uid-dp-b")
	done := Pod("dp-done", "uid-dp-done")
	pending := Pod("dp-pending", "uid-dp-pending")
	draPod := WithTemplateClaim(Pod("dra", "uid-dra"), "gpu", "tmpl")
	extPod := WithExtendedClaimStatus(WithLimit(Pod("ext", "uid-ext"), GPUResource, 1), "ext-gpu")
	objs := []any{
		GPUClass(), MIGClass(),
		Node("dp-node", 8), Node("node-1", 0), Node("node-2", 0),
		Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...),
		Slice("node-2", "node-2", 1, gpus("gpu-0")...),
		Running(Bound(WithLimit(dp1, GPUResource, 2), "dp-node")),
		Running(Bound(WithLimit(dp2, GPUResource, 1), "dp-node")),
		Finished(Bound(WithLimit(done, GPUResource, 4), "dp-node"), corev1.PodSucceeded),
		WithLimit(pending, GPUResource, 1),
		draPod, extPod,
		ReservedFor(Allocated(OwnedBy(Claim("dra-gpu", "uid-c1"), draPod, "gpu"), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0")), draPod),
		ReservedFor(Allocated(ExtendedFor(Claim("ext-gpu", "uid-c2"), extPod), "node-2", time.Time{}, Result("container-0-request-0", "node-2", "gpu-0")), extPod),
	}
	s := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, objs...).Snapshot()
	got := allocator.Of(s).LaneCapacity()
	want := []allocator.Capacity{
		{Lane: index.LaneDevicePlugin, DeviceClass: GPUClassName, Node: "dp-node", Total: 8, Allocated: 3, Free: 5},
		{Lane: index.LaneDRA, DeviceClass: GPUClassName, Node: "node-1", Total: 2, Allocated: 1, Free: 1},
		{Lane: index.LaneDRA, DeviceClass: GPUClassName, Node: "node-2", Total: 1, Allocated: 0, Free: 0},
		{Lane: index.LaneDRAExtended, DeviceClass: GPUClassName, Node: "node-2", Allocated: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("LaneCapacity =\n%+v\nwant\n%+v", got, want)
	}
	if free := allocator.Of(s).DevicePluginFree(GPUResource); free != 5 {
		t.Errorf("DevicePluginFree = %d, want 5", free)
	}

	// The kubelet drops allocatable when the plugin's devices turn
	// unhealthy (or the plugin goes away); the pods keep theirs and stay in
	// the device-plugin lane, and the GPUs they hold still count in the
	// total, so allocated never exceeds it.
	t.Run("allocatable dropped to zero", func(t *testing.T) {
		s := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, GPUClass(), Node("dp-node", 0),
			Running(Bound(WithLimit(dp1, GPUResource, 2), "dp-node"))).Snapshot()
		want := []allocator.Capacity{{Lane: index.LaneDevicePlugin, DeviceClass: GPUClassName, Node: "dp-node", Total: 2, Allocated: 2, Free: 0}}
		if got := allocator.Of(s).LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("LaneCapacity = %+v, want %+v", got, want)
		}
		if lane := s.PodLane(s.Pod(index.Key{Namespace: NS, Name: "dp-a"})); lane != index.LaneDevicePlugin {
			t.Errorf("lane = %q, want device-plugin", lane)
		}
	})

	// Two of eight GPUs unhealthy: capacity 8, allocatable 6. The total is
	// the capacity; only healthy, unheld devices are free.
	t.Run("unhealthy devices", func(t *testing.T) {
		n := Node("dp-node", 6)
		n.Status.Capacity = corev1.ResourceList{GPUResource: resource.MustParse("8")}
		s := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, GPUClass(), n,
			Running(Bound(WithLimit(dp1, GPUResource, 5), "dp-node"))).Snapshot()
		want := []allocator.Capacity{{Lane: index.LaneDevicePlugin, DeviceClass: GPUClassName, Node: "dp-node", Total: 8, Allocated: 5, Free: 1}}
		if got := allocator.Of(s).LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("LaneCapacity = %+v, want %+v", got, want)
		}
		if lane := s.PodLane(s.Pod(index.Key{Namespace: NS, Name: "dp-a"})); lane != index.LaneDevicePlugin {
			t.Errorf("lane = %q, want device-plugin", lane)
		}
	})

	// A pod with a DRA claim (a NIC) and device-plugin GPUs, and a sidecar
	// (restartable init container) with a GPU: both take device-plugin GPUs.
	t.Run("claims plus device-plugin GPUs, and sidecars", func(t *testing.T) {
		mixed := Running(Bound(WithLimit(WithNamedClaim(Pod("mixed", "uid-mixed"), "nic", "nic-claim"), GPUResource, 4), "dp-node"))
		side := Running(Bound(WithLimit(Pod("side", "uid-side"), GPUResource, 1), "dp-node"))
		side.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: Ptr(corev1.ContainerRestartPolicyAlways),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")}}}}
		s := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, GPUClass(), Node("dp-node", 8), mixed, side).Snapshot()
		want := []allocator.Capacity{{Lane: index.LaneDevicePlugin, DeviceClass: GPUClassName, Node: "dp-node", Total: 8, Allocated: 6, Free: 2}}
		if got := allocator.Of(s).LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("LaneCapacity = %+v, want %+v", got, want)
		}
	})

	t.Run("device-plugin resource without a class", func(t *testing.T) {
		s := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, Node("dp-node", 4)).Snapshot()
		want := []allocator.Capacity{{Lane: index.LaneDevicePlugin, DeviceClass: GPUResource, Node: "dp-node", Total: 4, Free: 4}}
		if got := allocator.Of(s).LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("LaneCapacity = %+v, want %+v", got, want)
		}
	})
}

func TestPodLane(t *testing.T) {
	cfg := index.Config{DevicePluginResources: []string{GPUResource}}
	tests := []struct {
		name    string
		classes []any
		pod     *corev1.Pod
		want    string
	}{
		{"pod claims", nil, WithTemplateClaim(Pod("a", "uid-a"), "gpu", "t"), index.LaneDRA},
		{"extended claim status", nil, WithExtendedClaimStatus(WithLimit(Pod("a", "uid-a"), GPUResource, 1), "c"), index.LaneDRAExtended},
		{"bound to a device-plugin node", []any{GPUClass()}, Bound(WithLimit(Pod("a", "uid-a"), GPUResource, 1), "dp-node"), index.LaneDevicePlugin},
		{"pending, a class serves the resource", []any{GPUClass()}, WithLimit(Pod("a", "uid-a"), GPUResource, 1), index.LaneDRAExtended},
		{"pending, no class serves the resource", nil, WithLimit(Pod("a", "uid-a"), GPUResource, 1), index.LaneDevicePlugin},
		{"implicit deviceclass resource", []any{GPUClass()}, WithLimit(Pod("a", "uid-a"), resourceapi.ResourceDeviceClassPrefix+GPUClassName, 1), index.LaneDRAExtended},
		{"unrelated extended resource", []any{GPUClass()}, WithLimit(Pod("a", "uid-a"), "example.com/fpga", 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]any{Node("dp-node", 8)}, tt.classes...)
			objs = append(objs, tt.pod)
			s := Build(t, cfg, objs...).Snapshot()
			p := s.Pod(index.Key{Namespace: NS, Name: tt.pod.Name})
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
	p := WithNamedClaim(WithTemplateClaim(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "tmpl"), "skipped", "tmpl-2"), "shared", "shared-gpu")
	p = WithClaimStatus(p, "gpu", "llm-0-gpu-abcde")
	p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: "skipped"})

	mine := OwnedBy(Claim("llm-0-gpu-abcde", "uid-c"), p, "gpu")
	shared := Claim("shared-gpu", "uid-shared")

	t.Run("status, skipped entry and named claim", func(t *testing.T) {
		s := Build(t, index.Config{}, p, mine, shared).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: NS, Name: "llm-0"}))
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
		theirs := OwnedBy(Claim("llm-0-gpu-abcde", "uid-c"), Pod("llm-0", "uid-previous"), "gpu")
		s := Build(t, index.Config{}, p, theirs, shared).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: NS, Name: "llm-0"}))
		if pcs[0].Claim != nil || pcs[0].ClaimName != "llm-0-gpu-abcde" {
			t.Errorf("a claim owned by another pod UID was resolved: %+v", pcs[0])
		}
	})
	t.Run("generated claim found by owner reference", func(t *testing.T) {
		np := WithTemplateClaim(Pod("new", "uid-new"), "gpu", "tmpl")
		c := OwnedBy(Claim("new-gpu-xyz", "uid-x"), np, "gpu")
		s := Build(t, index.Config{}, np, c).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: NS, Name: "new"}))
		if len(pcs) != 1 || pcs[0].ClaimName != "new-gpu-xyz" || pcs[0].Claim == nil {
			t.Errorf("ResolvePodClaims = %+v, want the generated claim", pcs)
		}
	})
	t.Run("extended claim by owner", func(t *testing.T) {
		ep := WithLimit(Pod("ext", "uid-ext"), GPUResource, 1)
		c := ExtendedFor(Claim("ext-gpu-1", "uid-e"), ep)
		s := Build(t, index.Config{}, GPUClass(), ep, c).Snapshot()
		pcs := s.ResolvePodClaims(s.Pod(index.Key{Namespace: NS, Name: "ext"}))
		if len(pcs) != 1 || pcs[0].Name != "" || pcs[0].Claim == nil {
			t.Errorf("ResolvePodClaims = %+v, want the extended claim", pcs)
		}
	})
}

func TestClaimNodeFromSelector(t *testing.T) {
	hostname := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-h"}}},
	}}}
	twoTerms := &corev1.NodeSelector{NodeSelectorTerms: append(NodeSelector("a").NodeSelectorTerms, NodeSelector("b").NodeSelectorTerms...)}
	zone := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}},
	}}}
	for _, tc := range []struct {
		name string
		sel  *corev1.NodeSelector
		want string
	}{
		{"matchFields metadata.name", NodeSelector("node-1"), "node-1"},
		{"hostname label", hostname, "node-h"},
		{"two terms", twoTerms, ""},
		{"zone", zone, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Allocated(Claim("c", "uid-c"), "", time.Time{}, Result("gpu", "node-1", "gpu-0"))
			c.Status.Allocation.NodeSelector = tc.sel
			s := Build(t, index.Config{}, c).Snapshot()
			if got := s.Claim(index.Key{Namespace: NS, Name: "c"}).Node; got != tc.want {
				t.Errorf("Node = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClaimResultClasses(t *testing.T) {
	c := Claim("c", "uid-c", Request("gpu", GPUClassName), resourceapi.DeviceRequest{Name: "flex", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "big", DeviceClassName: GPUClassName}, {Name: "small", DeviceClassName: MIGClassName},
	}})
	c = Allocated(c, "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0"), Result("flex/small", "node-1", "gpu-1-mig"))
	got := Build(t, index.Config{}, c).Snapshot().Claim(index.Key{Namespace: NS, Name: "c"})
	if len(got.Results) != 2 || got.Results[0].Class != GPUClassName || got.Results[1].Class != MIGClassName {
		t.Errorf("Results = %+v, want classes gpu then mig", got.Results)
	}
	if classes := got.Classes(); !slices.Equal(classes, []string{GPUClassName, MIGClassName}) {
		t.Errorf("Classes = %v", classes)
	}
	for request, want := range map[string]string{"gpu": GPUClassName, "flex/big": GPUClassName, "flex/small": MIGClassName, "flex": "", "absent": ""} {
		if class := got.ClassOf(request); class != want {
			t.Errorf("ClassOf(%s) = %q, want %q", request, class, want)
		}
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
	for _, o := range []any{Claim("x", "uid-x"), Pod("x", "uid-x"), Slice("x", "x", 1), Node("x", 0), GPUClass()} {
		if err := ix.Delete(o); err != nil {
			t.Errorf("Delete(%T) of an unknown object: %v", o, err)
		}
	}
}

func TestDeleteTombstones(t *testing.T) {
	p := WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "t")
	c := Claim("c", "uid-c")
	s := Slice("node-1", "node-1", 1, gpus("gpu-0")...)
	ix := Build(t, index.Config{}, GPUClass(), s, p, c, Node("node-1", 0))
	for _, o := range []any{p, c, s} {
		Del(t, ix, cache.DeletedFinalStateUnknown{Key: "k", Obj: o})
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
	d := GPUDevice("gpu-0", "GPU-0")
	m := MIGDevice("gpu-1-mig", "MIG-1", "GPU-1", "1g.5gb", "4864Mi")
	all := DeviceClass("all", "device.driver == 'gpu.nvidia.com'")
	s := Build(t, index.Config{}, all, Slice("node-1", "node-1", 1, d, m)).Snapshot()
	sel := CEL("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")
	got := allocator.Of(s).Select("all", sel, allocator.Demand{})
	if len(got.Devices) != 1 || got.Devices[0].Key.Device != "gpu-1-mig" || got.Free != 1 {
		t.Errorf("Select = %v (%d free), want the free MIG device", got.Devices, got.Free)
	}
	if got.Errors != 1 || len(got.ErrorSample) != 1 || !strings.Contains(got.ErrorSample[0], "gpu.nvidia.com/node-1/gpu-0") {
		t.Errorf("Select errors = %d %v, want one naming the full GPU", got.Errors, got.ErrorSample)
	}
	// The scheduler aborts on node-1: its full GPU makes the selector fail.
	if got.Nodes != 0 || got.BestNodeFree != 0 {
		t.Errorf("Select usable nodes = %d (best %d free), want none", got.Nodes, got.BestNodeFree)
	}
	if again := allocator.Of(s).Select("all", sel, allocator.Demand{}); again != got {
		t.Errorf("Select is not memoised")
	}
	if !slices.Equal(got.ErrorNodes, []string{"node-1"}) || got.FreeOnErrorNodes != 1 || got.ClassErrors != 0 {
		t.Errorf("Select error nodes %q (%d free there, %d class errors), want node-1 with its free MIG device, no class error",
			got.ErrorNodes, got.FreeOnErrorNodes, got.ClassErrors)
	}
}

// The class's own selector failing on one device rules out its node for
// every request of the class, with or without selectors of its own.
func TestSelectClassErrorRulesOutTheNode(t *testing.T) {
	untyped := GPUDevice("gpu-0", "GPU-untyped")
	delete(untyped.Attributes, "type")
	s := Build(t, index.Config{}, GPUClass(),
		Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-1-0")),
		Slice("node-2", "node-2", 1, untyped, GPUDevice("gpu-1", "GPU-2-1"), GPUDevice("gpu-2", "GPU-2-2"))).Snapshot()
	for _, sel := range [][]resourceapi.DeviceSelector{nil, CEL("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')")} {
		got := allocator.Of(s).Select(GPUClassName, sel, allocator.Demand{})
		if got.Errors != 1 || got.ClassErrors != 1 || !slices.Equal(got.ErrorNodes, []string{"node-2"}) || got.FreeOnErrorNodes != 2 {
			t.Errorf("selectors %v: errors %d (class %d) on %q with %d free there; want 1 class error ruling out node-2 and its 2 free GPUs",
				sel, got.Errors, got.ClassErrors, got.ErrorNodes, got.FreeOnErrorNodes)
		}
		if got.Free != 3 || got.BestNode != "node-1" || got.BestNodeFree != 1 || got.Nodes != 1 {
			t.Errorf("selectors %v: %d free, best %s with %d of %d nodes; want 3 free, best node-1 with 1, one node left", sel, got.Free, got.BestNode, got.BestNodeFree, got.Nodes)
		}
		want := "device gpu.nvidia.com/node-2/gpu-0 on node node-2: DeviceClass gpu.nvidia.com selector #0: CEL runtime error: no such key: type"
		if len(got.ErrorSample) != 1 || !strings.HasPrefix(got.ErrorSample[0], want) {
			t.Errorf("selectors %v: error sample %q, want it to start %q", sel, got.ErrorSample, want)
		}
	}
}

// Two classes naming one extended resource: the scheduler uses the newer,
// the lower name breaking a tie (extendedresourcecache).
func TestClassForExtendedResourceNewestWins(t *testing.T) {
	class := func(name string, created time.Time) *resourceapi.DeviceClass {
		c := GPUClass()
		c.Name, c.UID, c.CreationTimestamp = name, types.UID("class-"+name), metav1.NewTime(created)
		return c
	}
	s := Build(t, index.Config{}, class("a-old", T0.Add(-time.Hour)), class("z-new", T0)).Snapshot()
	if c := s.ClassForExtendedResource(GPUResource); c == nil || c.Name != "z-new" {
		t.Errorf("class = %v, want z-new (the newer)", c)
	}
	s = Build(t, index.Config{}, class("b", T0), class("a", T0)).Snapshot()
	if c := s.ClassForExtendedResource(GPUResource); c == nil || c.Name != "a" {
		t.Errorf("class = %v, want a (same age, lower name)", c)
	}
}

// DeviceTaintRules (KEP-5055, GA in 1.37) taint the devices their selector
// names; a NoSchedule or NoExecute taint keeps them out of free.
func TestDeviceTaintRules(t *testing.T) {
	rule := func(name string, sel *resourceapi.DeviceTaintSelector, effect resourceapi.DeviceTaintEffect) *resourceapi.DeviceTaintRule {
		return &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourceapi.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "79", Effect: effect}}}
	}
	slices1 := []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...), Slice("node-2", "node-2", 1, gpus("gpu-0")...)}
	tests := []struct {
		name    string
		rule    *resourceapi.DeviceTaintRule
		tainted []string // devices with the rule's taint, as pool/device
		free    int
	}{
		{"one device", rule("r", &resourceapi.DeviceTaintSelector{Driver: Ptr(Driver), Pool: Ptr("node-1"), Device: Ptr("gpu-1")}, resourceapi.DeviceTaintEffectNoSchedule), []string{"node-1/gpu-1"}, 2},
		{"a pool", rule("r", &resourceapi.DeviceTaintSelector{Pool: Ptr("node-1")}, resourceapi.DeviceTaintEffectNoExecute), []string{"node-1/gpu-0", "node-1/gpu-1"}, 1},
		{"an empty selector matches every device", rule("r", &resourceapi.DeviceTaintSelector{}, resourceapi.DeviceTaintEffectNoSchedule), []string{"node-1/gpu-0", "node-1/gpu-1", "node-2/gpu-0"}, 0},
		{"no selector matches none", rule("r", nil, resourceapi.DeviceTaintEffectNoSchedule), nil, 3},
		{"effect None does not keep devices from free", rule("r", &resourceapi.DeviceTaintSelector{}, resourceapi.DeviceTaintEffectNone), []string{"node-1/gpu-0", "node-1/gpu-1", "node-2/gpu-0"}, 3},
		{"another driver's devices", rule("r", &resourceapi.DeviceTaintSelector{Driver: Ptr("other.example.com")}, resourceapi.DeviceTaintEffectNoSchedule), nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Build(t, index.Config{}, append(slices1, tt.rule)...).Snapshot()
			var tainted []string
			free := 0
			for _, d := range s.Devices {
				for _, taint := range s.Taints(d) {
					if taint.Rule == "r" {
						tainted = append(tainted, d.Key.Pool+"/"+d.Key.Device)
					}
				}
				if allocator.Of(s).Available(d) {
					free++
				}
			}
			slices.Sort(tainted)
			if !slices.Equal(tainted, tt.tainted) || free != tt.free {
				t.Errorf("tainted %v, %d free; want %v, %d free", tainted, free, tt.tainted, tt.free)
			}
		})
	}
	t.Run("a deleted rule lets go", func(t *testing.T) {
		r := rule("r", &resourceapi.DeviceTaintSelector{}, resourceapi.DeviceTaintEffectNoSchedule)
		ix := Build(t, index.Config{}, append(slices1, r)...)
		Del(t, ix, r)
		for _, d := range ix.Snapshot().Devices {
			if len(ix.Snapshot().Taints(d)) != 0 {
				t.Errorf("%s still tainted", d.Key)
			}
		}
	})
}

// While nothing changes the index hands out the same snapshot; an upsert
// or a delete, even of an object it ignores, makes a new one that shows it.
func TestSnapshotReusedUntilAChange(t *testing.T) {
	ix := Build(t, index.Config{}, GPUClass(), Node("node-1", 0))
	a, b := ix.Snapshot(), ix.Snapshot()
	if a != b {
		t.Fatal("two snapshots of an unchanged index differ")
	}
	if err := ix.Upsert(Node("node-2", 0), true); err != nil {
		t.Fatal(err)
	}
	c := ix.Snapshot()
	if c == b || len(c.Nodes) != 2 || len(b.Nodes) != 1 {
		t.Fatalf("after an upsert: same snapshot %v, nodes %d (old one %d)", c == b, len(c.Nodes), len(b.Nodes))
	}
	if err := ix.Delete(Node("node-2", 0)); err != nil {
		t.Fatal(err)
	}
	if d := ix.Snapshot(); d == c || len(d.Nodes) != 1 {
		t.Fatalf("after a delete: same snapshot %v, nodes %d", d == c, len(d.Nodes))
	}
}

// An update that changes nothing the index holds (a kubelet's status
// report, a pod without GPUs, an event that is no DRA evidence) keeps the
// snapshot; a change is reported under its kind only.
func TestVersionCountsChangesByKind(t *testing.T) {
	plain := Pod("web", "uid-web")
	ix := Build(t, index.Config{}, GPUClass(), Node("node-1", 0), plain)
	a := ix.Snapshot()
	heartbeat := Node("node-1", 0)
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(time.Unix(1e9, 0))}}
	Upsert(t, ix, heartbeat, true)
	Upsert(t, ix, Bound(plain, "node-1"), true)
	Upsert(t, ix, Event("e1", plain, "Scheduled", "assigned", time.Unix(1e9, 0)), true)
	Del(t, ix, Pod("gone", "uid-gone"))
	rewritten := Node("node-1", 0) // a write the trimmer drops: only the resourceVersion moves
	rewritten.ResourceVersion = "7"
	Upsert(t, ix, rewritten, true)
	if b := ix.Snapshot(); b != a {
		t.Fatal("updates that change nothing the index holds made a new snapshot")
	}

	Upsert(t, ix, NotReadyNode("node-1"), true)
	b := ix.Snapshot()
	if b == a {
		t.Fatal("a node going NotReady kept the old snapshot")
	}
	if b.Version().Unchanged(a.Version(), index.KindsOf(index.KindNode)) {
		t.Error("the node kind reads as unchanged after a node changed")
	}
	if !b.Version().Unchanged(a.Version(), index.AllKinds&^index.KindsOf(index.KindNode)) {
		t.Error("kinds other than node read as changed after only a node changed")
	}
	gpu := WithLimit(Pod("trainer", "uid-trainer"), "nvidia.com/gpu", 1)
	Upsert(t, ix, gpu, true)
	c := ix.Snapshot()
	again := gpu.DeepCopy()
	again.ResourceVersion = "8"
	Upsert(t, ix, again, true)
	if ix.Snapshot() != c {
		t.Error("a pod written again with only a new resourceVersion made a new snapshot")
	}
	if c.Version().Unchanged(b.Version(), index.KindsOf(index.KindPod)) || !c.Version().Unchanged(b.Version(), index.KindsOf(index.KindClaim, index.KindNode)) {
		t.Error("a GPU pod's upsert is not reported under the pod kind alone")
	}
	other := Build(t, index.Config{}, GPUClass(), Node("node-1", 0), plain)
	if other.Snapshot().Version().Unchanged(a.Version(), index.AllKinds) {
		t.Error("versions of two indexes compare equal")
	}
}

// TestPlacementLeavesOutReadinessAndDeviceStatus checks which writes count
// as a change of placement: a readiness flip and a driver's device status
// do not (only the pod's and the claim's own series read them), a priority
// or a reservation does.
func TestPlacementLeavesOutReadinessAndDeviceStatus(t *testing.T) {
	at := time.Unix(1e9, 0)
	pod := Running(Bound(WithClaimStatus(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "gpu-tmpl"), "gpu", "llm-0-gpu"), "node-1"))
	claim := ReservedFor(Allocated(OwnedBy(Claim("llm-0-gpu", "uid-c", Request("gpu", "gpu.nvidia.com")), pod, "gpu"), "node-1", at, Result("gpu", "node-1", "gpu-0")), pod)
	ix := Build(t, index.Config{}, GPUClass(), Node("node-1", 0), Slice("node-1-gpus", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), pod, claim)
	step := func(what string, obj any, placement bool) {
		t.Helper()
		before := ix.Snapshot().Version()
		Upsert(t, ix, obj, true)
		after := ix.Snapshot().Version()
		if after.Unchanged(before, index.KindsOf(index.KindClaim, index.KindPod)) {
			t.Fatalf("%s: no claim or pod change counted", what)
		}
		if got := !after.Unchanged(before, index.KindsOf(index.KindPlacement)); got != placement {
			t.Errorf("%s: placement changed = %v, want %v", what, got, placement)
		}
	}
	ready := Ready(pod.DeepCopy())
	step("pod turns Ready", ready, false)
	restarted := ready.DeepCopy()
	restarted.Status.ContainerStatuses = append(restarted.Status.ContainerStatuses, corev1.ContainerStatus{Name: "main", RestartCount: 3})
	step("a container restarts", restarted, false)
	status := claim.DeepCopy()
	status.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.NewTime(at)}}}}
	step("the driver reports device status", status, false)
	priority := restarted.DeepCopy()
	priority.Spec.Priority = Ptr(int32(100))
	step("the pod's priority changes", priority, true)
	unreserved := status.DeepCopy()
	unreserved.Status.ReservedFor = nil
	step("the claim is unreserved", unreserved, true)
	finished := Finished(priority.DeepCopy(), corev1.PodSucceeded)
	step("the pod finishes", finished, true)
}
