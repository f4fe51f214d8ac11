package allocator_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// placementSteps builds an index of plain GPUs, overlapping partitions of
// one counter set, a network-attached pool, a device a selector fails on
// and a device-plugin node, and returns the changes of placement the
// kept-across-snapshots tests take it through: claims allocated, released,
// deleted or reserved, extended-resource claims, pods only.
func placementSteps(t *testing.T) (*index.Index, []placementStep) {
	fabric := Slice("fabric", "", 1, GPUDevice("gpu-f0", "GPU-F0"), GPUDevice("gpu-f1", "GPU-F1"))
	fabric.Spec.NodeName, fabric.Spec.AllNodes, fabric.Spec.Pool.Name = nil, Ptr(true), "fabric"
	objs := []any{GPUClass(), MIGClass(), Node("node-a", 0), Node("node-b", 0), Node("node-c", 0), Node("node-d", 4), fabric,
		Slice("node-b", "node-b", 1, GPUDevice("gpu-0", "GPU-B0"), GPUDevice("gpu-1", "GPU-B1")),
		Slice("node-c", "node-c", 1, GPUDevice("gpu-0", "GPU-C0"), MIGDevice("gpu-1-mig", "MIG-C1", "GPU-C1", "1g.5gb", "4864Mi"))}
	objs = append(objs, partitionable("node-a", "GPU-A0")...)
	ix := Build(t, index.Config{DevicePluginResources: []string{GPUResource}}, objs...)

	pod, extPod := Bound(Pod("p-1", "uid-p-1"), "node-b"), Bound(Pod("p-3", "uid-p-3"), "node-b")
	claimOn := func(name, pool string, devices ...string) *resourceapi.ResourceClaim {
		results := make([]resourceapi.DeviceRequestAllocationResult, len(devices))
		for i, d := range devices {
			results[i] = Result("gpu", pool, d)
		}
		return Allocated(Claim(name, "uid-"+name), pool, time.Time{}, results...)
	}
	extended := ExtendedFor(claimOn("c-6", "node-b", "gpu-1"), extPod)
	three0, three4, one6 := byProfile("3g.20gb", 0), byProfile("3g.20gb", 4), byProfile("1g.5gb", 6)
	return ix, []placementStep{
		{"a placement allocated", func() { Upsert(t, ix, allocatedTo("c-1", "node-a", three0), true) }},
		{"a plain GPU allocated", func() { Upsert(t, ix, claimOn("c-2", "node-b", "gpu-0"), true) }},
		{"reserved for a pod", func() {
			Upsert(t, ix, pod, true)
			Upsert(t, ix, ReservedFor(claimOn("c-2", "node-b", "gpu-0"), pod), true)
		}},
		{"an overlapping placement allocated (overdrawn)", func() { Upsert(t, ix, allocatedTo("c-3", "node-a", three4, one6), true) }},
		{"a network-attached GPU allocated", func() { Upsert(t, ix, claimOn("c-4", "fabric", "gpu-f0"), true) }},
		{"a placement released", func() { Upsert(t, ix, Deallocated(allocatedTo("c-1", "node-a", three0)), true) }},
		{"the MIG device of node-c allocated", func() { Upsert(t, ix, claimOn("c-5", "node-c", "gpu-1-mig"), true) }},
		{"a claim deleted", func() { Del(t, ix, claimOn("c-2", "node-b", "gpu-0")) }},
		{"only a pod changed", func() { Upsert(t, ix, Running(Bound(Pod("p-2", "uid-p-2"), "node-c")), true) }},
		{"a device-plugin pod bound", func() {
			Upsert(t, ix, Running(Bound(WithLimit(Pod("dp-1", "uid-dp-1"), GPUResource, 3), "node-d")), true)
		}},
		{"an extended-resource claim allocated", func() {
			Upsert(t, ix, WithExtendedClaimStatus(extPod, extended.Name), true)
			Upsert(t, ix, ReservedFor(extended, extPod), true)
		}},
		{"the extended-resource claim deleted", func() { Del(t, ix, extended) }},
		{"everything released", func() {
			for _, c := range []*resourceapi.ResourceClaim{allocatedTo("c-3", "node-a", three4, one6), claimOn("c-4", "fabric", "gpu-f0"), claimOn("c-5", "node-c", "gpu-1-mig")} {
				Del(t, ix, c)
			}
		}},
	}
}

type placementStep struct {
	name string
	do   func()
}

// TestSelectionsKeptAcrossPlacementChanges: a snapshot taken after each of
// placementSteps patches the last snapshot's selections (recounting the
// nodes of the changed devices' pools) and gets what a snapshot built from
// scratch gets, for requests with and without selectors.
func TestSelectionsKeptAcrossPlacementChanges(t *testing.T) {
	ix, steps := placementSteps(t)
	type request struct {
		class     string
		selectors []resourceapi.DeviceSelector
	}
	requests := []request{
		{GPUClassName, nil},
		{MIGClassName, nil},
		{MIGClassName, CEL("device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")},
		{GPUClassName, CEL("device.attributes['gpu.nvidia.com'].uuid != 'GPU-B0'")},
		// The full GPU of node-c has no profile: the selector fails there.
		{GPUClassName, CEL("device.attributes['gpu.nvidia.com'].profile.startsWith('1g')")},
	}
	nodes := []string{"", "node-a", "node-b", "node-c"}
	view := func(s *index.Snapshot, r request) string {
		sel := allocator.Of(s).Select(r.class, r.selectors, allocator.Demand{})
		free := map[string]int{}
		for _, n := range nodes {
			free[n] = sel.FreeOn(n)
		}
		return fmt.Sprintf("devices %d free %d each %d best %q/%d most %d allfree %v/%q errors %d/%d %v on-error %d nodes %d small %d free-on %v holders %d",
			len(sel.Devices), sel.Free, sel.FreeEach, sel.BestNode, sel.BestNodeFree, sel.MostOnANode, sel.AllFree, sel.AllFreeNode,
			sel.Errors, sel.ClassErrors, sel.ErrorNodes, sel.FreeOnErrorNodes, sel.Nodes, sel.TooSmall, free, len(sel.Holders(allocator.Of(s))))
	}
	s := ix.Snapshot()
	for _, r := range requests {
		view(s, r) // the selections the next snapshot keeps
	}
	kept := 0
	for _, step := range steps {
		step.do()
		s = ix.Snapshot()
		kept += allocator.Of(s).KeptSelections()
		fresh := ix.SnapshotFromScratch()
		for i, r := range requests {
			if got, want := view(s, r), view(fresh, r); got != want {
				t.Errorf("%s, request %d: kept selection\n  %s\nfrom scratch\n  %s", step.name, i, got, want)
			}
		}
	}
	if kept == 0 {
		t.Fatal("no snapshot kept a selection: the test compared fresh selections only")
	}
}

// TestCapacityKeptAcrossPlacementChanges: after each of placementSteps,
// the class and lane capacity rows patched from the last snapshot's (the
// recounted nodes' rows counted again, the device-plugin lane counted
// again) are what a snapshot built from scratch counts.
func TestCapacityKeptAcrossPlacementChanges(t *testing.T) {
	ix, steps := placementSteps(t)
	s := ix.Snapshot()
	allocator.Of(s).ClassCapacity() // the rows the next snapshot patches
	allocator.Of(s).LaneCapacity()
	patched := 0
	for _, step := range steps {
		step.do()
		s = ix.Snapshot()
		if allocator.Of(s).KeptCapacity() {
			patched++
		}
		fresh := ix.SnapshotFromScratch()
		if got, want := allocator.Of(s).ClassCapacity(), allocator.Of(fresh).ClassCapacity(); !slices.Equal(got, want) {
			t.Errorf("%s: class capacity patched\n  %+v\nfrom scratch\n  %+v", step.name, got, want)
		}
		if got, want := allocator.Of(s).LaneCapacity(), allocator.Of(fresh).LaneCapacity(); !slices.Equal(got, want) {
			t.Errorf("%s: lane capacity patched\n  %+v\nfrom scratch\n  %+v", step.name, got, want)
		}
	}
	if patched != len(steps) {
		t.Fatalf("%d of %d snapshots patched the last one's capacity: the test compared fresh rows only", patched, len(steps))
	}
}
