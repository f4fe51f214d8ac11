package classify_test

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// placement names gpu-0's placement of the profile at the start slice.
func placement(profile string, start int) string {
	for _, p := range nvidia.A100Placements {
		if p.Profile == profile && p.Start == start {
			return nvidia.PlacementName(0, p)
		}
	}
	panic(profile)
}

// partWorld: node-1 has one partitionable A100 (whole GPU and overlapping
// MIG placements on one counter set); held are placements other pods hold.
func partWorld(held []string, extra ...any) []any {
	objs := []any{GPUClass(), MIGClass(), Node("node-1", 0)}
	for _, s := range nvidia.PartitionableSlices("node-1", 1, "GPU-A100-0") {
		objs = append(objs, s)
	}
	for i, d := range held {
		objs = append(objs, holder(fmt.Sprintf("mig-%d", i), d))
	}
	return append(objs, extra...)
}

func countRequest(class string, n int64, exprs ...string) resourceapi.DeviceRequest {
	r := Request("gpu", class)
	r.Exactly.Count = n
	if len(exprs) > 0 {
		r = withSelectors(r, exprs...)
	}
	return r
}

func hasEvidence(v classify.Verdict, substr string) bool {
	for _, l := range v.Links {
		for _, e := range l.Evidence {
			if strings.Contains(e, substr) {
				return true
			}
		}
	}
	return false
}

func allEvidence(v classify.Verdict) string {
	var out []string
	for _, l := range v.Links {
		out = append(out, l.Evidence...)
	}
	return strings.Join(out, "\n")
}

// Partitionable devices (KEP-4815): a whole GPU whose counters a MIG
// placement drew on is not free, and overlapping placements count once.
func TestPartitionableRequests(t *testing.T) {
	threeAt0 := placement("3g.20gb", 0)
	profile3g := "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
	tests := []struct {
		name     string
		held     []string
		request  resourceapi.DeviceRequest
		reason   classify.Reason
		evidence string
	}{
		{"whole GPU, nothing held", nil, Request("gpu", GPUClassName), classify.Unallocated, "1 of 1 matching devices are free"},
		{"whole GPU, a placement held", []string{threeAt0}, Request("gpu", GPUClassName), classify.CapacityExhausted,
			"shares counters with allocated partitions " + threeAt0 + " (claim " + NS + "/mig-0)"},
		{"one 3g.20gb, the other held", []string{threeAt0}, countRequest(MIGClassName, 1, profile3g), classify.Unallocated, "1 of 2 matching devices are free"},
		{"two 3g.20gb, one held", []string{threeAt0}, countRequest(MIGClassName, 2, profile3g), classify.CapacityExhausted, "1 of 2 matching devices are free, the request needs 2"},
		// 3g.20gb at 4 and 1g.5gb at 6 are each free, but overlap.
		{"two placements, the free ones overlap", []string{threeAt0}, countRequest(MIGClassName, 2), classify.CapacityExhausted, "1 of 4 matching devices are free, the request needs 2"},
		{"two placements, nothing held", nil, countRequest(MIGClassName, 2), classify.Unallocated, "2 of 4 matching devices are free"},
		{"three placements, nothing held", nil, countRequest(MIGClassName, 3), classify.CapacityExhausted, "2 of 4 matching devices are free, the request needs 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, partWorld(tt.held, statusPod(), genClaim(tt.request))...)
			if !v.Blocked || v.Reason != tt.reason {
				t.Fatalf("reason = %s (blocked %v), want %s: %s", v.Reason, v.Blocked, tt.reason, linkSummary(v))
			}
			if !hasEvidence(v, tt.evidence) {
				t.Errorf("no evidence %q in:\n%s", tt.evidence, allEvidence(v))
			}
		})
	}
}

// A lower-priority pod on a sibling partition holds the whole GPU too:
// preemption would not free it either.
func TestPartitionHolderIsAHolder(t *testing.T) {
	objs := partWorld([]string{placement("1g.5gb", 6)}, statusPod(), genClaim(Request("gpu", GPUClassName)))
	p := statusPod()
	p.Spec.Priority = Ptr(int32(1000))
	objs[len(objs)-2] = p
	objs = append(objs, Running(Bound(WithNamedClaim(Pod("holder-mig-0", "uid-holder-mig-0"), "gpu", "mig-0"), "node-1")))
	v := verdictOf(t, podName, objs...)
	if v.Reason != classify.CapacityExhausted || v.LowerPriorityHolders != 1 {
		t.Errorf("reason %s, lower-priority holders %d; want capacity_exhausted and 1: %s", v.Reason, v.LowerPriorityHolders, allEvidence(v))
	}
}

// sharedGPU allows multiple allocations; its 40Gi of memory is consumable.
func sharedGPU() resourceapi.Device {
	d := GPUDevice("gpu-0", "GPU-shared")
	d.AllowMultipleAllocations = Ptr(true)
	d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}}
	return d
}

func shareOf(name, memory string) *resourceapi.ResourceClaim {
	c := holder(name, "gpu-0")
	r := &c.Status.Allocation.Devices.Results[0]
	id := types.UID("00000000-0000-4000-8000-0000000000" + fmt.Sprintf("%02d", len(name)))
	r.ShareID = &id
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
	return c
}

func memoryRequest(q string) resourceapi.DeviceRequest {
	r := Request("gpu", GPUClassName)
	r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}}
	return r
}

// Consumable capacity (KEP-5075): a shared GPU with 8Gi of its 40Gi left.
func TestConsumableCapacityRequests(t *testing.T) {
	tests := []struct {
		name     string
		request  resourceapi.DeviceRequest
		reason   classify.Reason
		evidence string
	}{
		{"fits what is left", memoryRequest("8Gi"), classify.Unallocated, "1 of 1 matching devices are free"},
		{"more than is left", memoryRequest("16Gi"), classify.CapacityExhausted, "is shared by 2 claims: 8Gi of 40Gi memory left, the request needs 16Gi"},
		// Without capacity.requests a claim takes the whole memory.
		{"no capacity request", Request("gpu", GPUClassName), classify.CapacityExhausted, "8Gi of 40Gi memory left, the request needs 40Gi"},
		{"more than the device has", memoryRequest("64Gi"), classify.SelectorMatchesNothing, "capacity requests (memory=64Gi) exceed what 1 devices have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, sharedGPU()),
				shareOf("a", "16Gi"), shareOf("bb", "16Gi"), statusPod(), genClaim(tt.request)}
			v := verdictOf(t, podName, objs...)
			if !v.Blocked || v.Reason != tt.reason {
				t.Fatalf("reason = %s (blocked %v), want %s: %s", v.Reason, v.Blocked, tt.reason, linkSummary(v))
			}
			if !hasEvidence(v, tt.evidence) {
				t.Errorf("no evidence %q in:\n%s", tt.evidence, allEvidence(v))
			}
		})
	}
}
