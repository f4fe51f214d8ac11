package allocator_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// partitionable is a node with one partitionable A100 (whole GPU and the
// overlapping placements of nvidia.A100Placements), published as the API
// requires: a counter slice and a device slice.
func partitionable(node string, uuids ...string) []any {
	var out []any
	for _, s := range nvidia.PartitionableSlices(node, 1, uuids...) {
		out = append(out, s)
	}
	return out
}

var placementNames = func() []string {
	out := []string{nvidia.DeviceName(0)}
	for _, p := range nvidia.A100Placements {
		out = append(out, nvidia.PlacementName(0, p))
	}
	return out
}()

// byProfile names the placement of gpu-0 with the profile and start.
func byProfile(profile string, start int) string {
	for _, p := range nvidia.A100Placements {
		if p.Profile == profile && p.Start == start {
			return nvidia.PlacementName(0, p)
		}
	}
	panic("no placement " + profile)
}

func allocatedTo(name, pool string, devices ...string) *resourceapi.ResourceClaim {
	results := make([]resourceapi.DeviceRequestAllocationResult, len(devices))
	for i, d := range devices {
		results[i] = Result("gpu", pool, d)
	}
	return Allocated(Claim(name, "uid-"+name), pool, time.Time{}, results...)
}

func TestPartitionableDevices(t *testing.T) {
	base := append([]any{GPUClass(), MIGClass(), Node("part-node", 0)}, partitionable("part-node", "GPU-P0")...)
	threeAt0, threeAt4, fourAt0, oneAt6 := byProfile("3g.20gb", 0), byProfile("3g.20gb", 4), byProfile("4g.20gb", 0), byProfile("1g.5gb", 6)
	tests := []struct {
		name      string
		allocated []string
		free      []string // devices Available
		gpuFree   int      // class gpu.nvidia.com free on the node
		migFree   int      // class mig.nvidia.com free: placements allocatable together
	}{
		{
			name: "nothing allocated", free: placementNames, gpuFree: 1,
			// 1g.5gb at slice 6 first, then 3g.20gb at 0; the rest overlap.
			migFree: 2,
		},
		{
			name: "one placement allocated", allocated: []string{threeAt0},
			free: []string{threeAt4, oneAt6}, gpuFree: 0,
			// 3g.20gb at 4 and 1g.5gb at 6 overlap: only one of them.
			migFree: 1,
		},
		{
			name: "whole GPU allocated", allocated: []string{nvidia.DeviceName(0)},
			gpuFree: 0, migFree: 0,
		},
		{
			name: "small placement allocated", allocated: []string{oneAt6},
			free: []string{threeAt0, fourAt0}, gpuFree: 0, migFree: 1,
		},
		{
			name: "two placements fill the GPU", allocated: []string{threeAt0, threeAt4},
			gpuFree: 0, migFree: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := slices.Clone(base)
			for i, d := range tt.allocated {
				objs = append(objs, allocatedTo(fmt.Sprintf("claim-%d", i), "part-node", d))
			}
			s := Build(t, index.Config{}, objs...).Snapshot()
			for _, name := range placementNames {
				want := slices.Contains(tt.free, name)
				if got := allocator.Of(s).Available(s.Device(DevKey("part-node", name))); got != want {
					t.Errorf("%s: Available = %v, want %v", name, got, want)
				}
			}
			for _, row := range allocator.Of(s).ClassCapacity() {
				want := map[string]int{GPUClassName: tt.gpuFree, MIGClassName: tt.migFree}[row.DeviceClass]
				if row.Free != want {
					t.Errorf("class %s: free = %d, want %d (%+v)", row.DeviceClass, row.Free, want, row)
				}
				if wantAlloc := allocatedIn(s, row.DeviceClass, tt.allocated); row.Allocated != wantAlloc {
					t.Errorf("class %s: allocated = %d, want %d", row.DeviceClass, row.Allocated, wantAlloc)
				}
			}
			checkDevicesAgree(t, objs)
		})
	}
}

func allocatedIn(s *index.Snapshot, class string, devices []string) int {
	n := 0
	for _, d := range s.ClassDevices(class) {
		if slices.Contains(devices, d.Key.Device) {
			n++
		}
	}
	return n
}

// TestPartitionsAgreeWithAllocator allocates every subset of the GPU's
// devices (overlapping ones too: an overdrawn counter set, as after a
// double allocation or a driver that shrank its counters) and compares
// each device's verdict, and how many placements a claim may take at once,
// with the scheduler's allocator.
func TestPartitionsAgreeWithAllocator(t *testing.T) {
	base := append([]any{GPUClass(), MIGClass(), Node("part-node", 0)}, partitionable("part-node", "GPU-P0")...)
	for mask := 0; mask < 1<<len(placementNames); mask++ {
		var taken []string
		for i, name := range placementNames {
			if mask&(1<<i) != 0 {
				taken = append(taken, name)
			}
		}
		t.Run(strings.Join(append([]string{"alloc"}, taken...), "+"), func(t *testing.T) {
			objs := slices.Clone(base)
			for i, d := range taken {
				objs = append(objs, allocatedTo(fmt.Sprintf("claim-%d", i), "part-node", d))
			}
			checkDevicesAgree(t, objs)
			s := Build(t, index.Config{}, objs...).Snapshot()
			a := newScheduler(t, objs)
			sel := allocator.Of(s).Select(MIGClassName, nil, allocator.Demand{})
			for n := int64(1); n <= int64(len(nvidia.A100Placements)); n++ {
				want := a.allocates("part-node", countClaim(MIGClassName, n, nil))
				if got := int64(sel.FreeOn("part-node")) >= n; got != want {
					t.Errorf("%d placements at once: selection says %v (%d free), the allocator %v", n, got, sel.FreeOn("part-node"), want)
				}
			}
		})
	}
}

func TestPoolProblems(t *testing.T) {
	slicesOf := func() []*resourceapi.ResourceSlice { return nvidia.PartitionableSlices("part-node", 1, "GPU-P0") }
	tests := []struct {
		name    string
		objs    func() []any
		problem string
	}{
		{"complete", func() []any { s := slicesOf(); return []any{s[0], s[1]} }, ""},
		{"counter slice not yet published", func() []any { return []any{slicesOf()[1]} }, "incomplete: 1 of 2 slices published"},
		{"counter set missing", func() []any {
			s := slicesOf()
			s[0].Spec.SharedCounters[0].Name = "other"
			return []any{s[0], s[1]}
		}, "invalid: device gpu-0 consumes counter set gpu-0-counter-set, which the pool does not publish"},
		{"counter missing", func() []any {
			s := slicesOf()
			delete(s[0].Spec.SharedCounters[0].Counters, "memory-slice-7")
			return []any{s[0], s[1]}
		}, "invalid: device gpu-0 consumes counter memory-slice-7, which counter set gpu-0-counter-set does not have"},
		{"counter set published twice", func() []any {
			s := slicesOf()
			dup := s[0].DeepCopy()
			dup.Name += "-dup"
			for _, sl := range []*resourceapi.ResourceSlice{s[0], s[1], dup} {
				sl.Spec.Pool.ResourceSliceCount = 3
			}
			return []any{s[0], s[1], dup}
		}, "invalid: counter set gpu-0-counter-set is published twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]any{GPUClass(), MIGClass(), Node("part-node", 0)}, tt.objs()...)
			s := Build(t, index.Config{}, objs...).Snapshot()
			k := DevKey("part-node", "gpu-0")
			if got := s.PoolProblem(k); got != tt.problem {
				t.Errorf("PoolProblem = %q, want %q", got, tt.problem)
			}
			if got := allocator.Of(s).Available(s.Device(k)); got != (tt.problem == "") {
				t.Errorf("Available = %v with pool problem %q", got, tt.problem)
			}
			checkDevicesAgree(t, objs)
		})
	}
}

// TestOverdrawnPool: a counter below zero in one counter set keeps the
// allocator from every counter-consuming device of the pool, the other
// GPU's too.
func TestOverdrawnPool(t *testing.T) {
	objs := append([]any{GPUClass(), MIGClass(), Node("part-node", 0)}, partitionable("part-node", "GPU-P0", "GPU-P1")...)
	objs = append(objs,
		allocatedTo("a", "part-node", byProfile("3g.20gb", 0)),
		allocatedTo("b", "part-node", byProfile("4g.20gb", 0)))
	s := Build(t, index.Config{}, objs...).Snapshot()
	if allocator.Of(s).Available(s.Device(DevKey("part-node", "gpu-1"))) {
		t.Errorf("gpu-1 available although the pool's gpu-0 counter set is overdrawn")
	}
	if got := allocator.Of(s).CounterShortfall(s.Device(DevKey("part-node", "gpu-1"))); !strings.Contains(got, "overdrawn") {
		t.Errorf("CounterShortfall = %q, want it to name the overdrawn pool", got)
	}
	checkDevicesAgree(t, objs)
}

func TestCounterSiblingsAndShortfall(t *testing.T) {
	objs := append([]any{GPUClass(), MIGClass(), Node("part-node", 0)}, partitionable("part-node", "GPU-P0")...)
	threeAt0 := byProfile("3g.20gb", 0)
	objs = append(objs, allocatedTo("a", "part-node", threeAt0))
	s := Build(t, index.Config{}, objs...).Snapshot()
	gpu := s.Device(DevKey("part-node", "gpu-0"))
	if got := allocator.Of(s).CounterSiblings(gpu); !slices.Equal(got, []index.DeviceKey{DevKey("part-node", threeAt0)}) {
		t.Errorf("CounterSiblings = %v, want the allocated placement", got)
	}
	if got, want := allocator.Of(s).CounterShortfall(gpu), "counter set gpu-0-counter-set: 20Gi left of 40Gi memory, the device needs 40Gi"; got != want {
		t.Errorf("CounterShortfall = %q, want %q", got, want)
	}
	if got := allocator.Of(s).CounterShortfall(s.Device(DevKey("part-node", byProfile("3g.20gb", 4)))); got != "" {
		t.Errorf("CounterShortfall of a free placement = %q, want empty", got)
	}
}

// sharedGPU is a GPU that allows multiple allocations, its memory a
// consumable capacity with the policy (nil: any amount).
func sharedGPU(name string, policy *resourceapi.CapacityRequestPolicy) resourceapi.Device {
	d := GPUDevice(name, "GPU-"+name)
	d.AllowMultipleAllocations = Ptr(true)
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi"), RequestPolicy: policy}}
	return d
}

// share is a shared allocation of the device taking memory.
func share(claim, device, memory string) *resourceapi.ResourceClaim {
	r := Result("gpu", "node-1", device)
	id := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", len(claim)*7919+len(device)))
	r.ShareID = &id
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
	return Allocated(Claim(claim, "uid-"+claim), "node-1", time.Time{}, r)
}

func mem(q string) map[resourceapi.QualifiedName]resource.Quantity {
	return map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}
}

func TestConsumableCapacity(t *testing.T) {
	steps := &resourceapi.CapacityRequestPolicy{
		Default:    Ptr(resource.MustParse("4Gi")),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: Ptr(resource.MustParse("4Gi")), Max: Ptr(resource.MustParse("40Gi")), Step: Ptr(resource.MustParse("4Gi"))},
	}
	values := &resourceapi.CapacityRequestPolicy{
		Default:     Ptr(resource.MustParse("10Gi")),
		ValidValues: []resource.Quantity{resource.MustParse("10Gi"), resource.MustParse("20Gi")},
	}
	tests := []struct {
		name      string
		policy    *resourceapi.CapacityRequestPolicy
		shares    []string // memory each claim consumed
		remaining string
		free      bool
		// fits maps a request for memory ("" for none) to whether it fits now.
		fits map[string]bool
	}{
		{name: "unused", remaining: "40Gi", free: true,
			fits: map[string]bool{"": true, "40Gi": true, "41Gi": false}},
		{name: "two shares", shares: []string{"16Gi", "16Gi"}, remaining: "8Gi", free: true,
			// Without capacity.requests a claim takes the whole memory.
			fits: map[string]bool{"": false, "8Gi": true, "9Gi": false, "1": true}},
		{name: "used up", shares: []string{"24Gi", "16Gi"}, remaining: "0", free: false,
			fits: map[string]bool{"": false, "1": false}},
		{name: "steps round up", policy: steps, shares: []string{"32Gi"}, remaining: "8Gi", free: true,
			fits: map[string]bool{"": true, "5Gi": true, "8Gi": true, "9Gi": false, "41Gi": false}},
		{name: "steps left too little", policy: steps, shares: []string{"36Gi", "2Gi"}, remaining: "2Gi", free: false,
			fits: map[string]bool{"": false, "1": false}},
		{name: "valid values", policy: values, shares: []string{"20Gi"}, remaining: "20Gi", free: true,
			fits: map[string]bool{"": true, "15Gi": true, "20Gi": true, "21Gi": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, sharedGPU("gpu-0", tt.policy))}
			for i, m := range tt.shares {
				objs = append(objs, share(fmt.Sprintf("share-%d", i), "gpu-0", m))
			}
			s := Build(t, index.Config{}, objs...).Snapshot()
			d := s.Device(DevKey("node-1", "gpu-0"))
			left := allocator.Of(s).RemainingCapacity(d)["memory"]
			if want := resource.MustParse(tt.remaining); left.Cmp(want) != 0 {
				t.Errorf("RemainingCapacity = %s, want %s", left.String(), tt.remaining)
			}
			if got := allocator.Of(s).Available(d); got != tt.free {
				t.Errorf("Available = %v, want %v", got, tt.free)
			}
			wantRow := allocator.Capacity{DeviceClass: GPUClassName, Node: "node-1", Total: 1, Allocated: min(len(tt.shares), 1), Free: 0}
			if tt.free {
				wantRow.Free = 1
			}
			if got := allocator.Of(s).ClassCapacity(); !slices.Equal(got, []allocator.Capacity{wantRow}) {
				t.Errorf("ClassCapacity = %+v, want %+v", got, wantRow)
			}
			a := newScheduler(t, objs)
			for q, want := range tt.fits {
				var c map[resourceapi.QualifiedName]resource.Quantity
				dm := allocator.Demand{}
				if q != "" {
					c = mem(q)
					dm.Capacity = &resourceapi.CapacityRequirements{Requests: c}
				}
				sel := allocator.Of(s).Select(GPUClassName, nil, dm)
				if got := sel.FreeOn("node-1") == 1; got != want {
					t.Errorf("request for %q memory: fits = %v, want %v (%s)", q, got, want, allocator.Of(s).CapacityShortfall(d, dm))
				}
				if alloc := a.allocates("node-1", countClaim(GPUClassName, 1, c)); alloc != want {
					t.Errorf("request for %q memory: the scheduler's allocator says %v, the test %v", q, alloc, want)
				}
			}
			checkDevicesAgree(t, objs)
		})
	}
}

func TestShareableWithoutShareID(t *testing.T) {
	// An allocation without a shareID takes the whole device, as the
	// scheduler reads it, even if the device allows multiple allocations.
	objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, sharedGPU("gpu-0", nil)),
		Allocated(Claim("whole", "uid-whole"), "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0"))}
	s := Build(t, index.Config{}, objs...).Snapshot()
	if allocator.Of(s).Available(s.Device(DevKey("node-1", "gpu-0"))) {
		t.Errorf("a shareable device held without a shareID is available")
	}
	checkDevicesAgree(t, objs)
}

func TestCapacityTooSmallIsNotKept(t *testing.T) {
	s := Build(t, index.Config{}, GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, sharedGPU("gpu-0", nil), GPUDevice("gpu-1", "GPU-1"))).Snapshot()
	sel := allocator.Of(s).Select(GPUClassName, nil, allocator.Demand{Capacity: &resourceapi.CapacityRequirements{Requests: mem("100Gi")}})
	if len(sel.Devices) != 0 || sel.TooSmall != 2 {
		t.Errorf("Select for 100Gi: kept %d, too small %d; want 0 and 2", len(sel.Devices), sel.TooSmall)
	}
	// A non-shareable device serves a capacity request it covers, whole.
	sel = allocator.Of(s).Select(GPUClassName, nil, allocator.Demand{Capacity: &resourceapi.CapacityRequirements{Requests: mem("60Gi")}})
	if len(sel.Devices) != 1 || sel.Devices[0].Key.Device != "gpu-1" || sel.Free != 1 {
		t.Errorf("Select for 60Gi: %v (%d free), want the 80Gi H100 free", sel.Devices, sel.Free)
	}
}
