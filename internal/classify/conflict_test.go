package classify_test

import (
	"slices"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	. "github.com/dra-exporter/dra-exporter/internal/testobj"
)

// Two claims holding one device is a conflict only when the device cannot be
// shared and both really hold it.
func TestDoubleAllocations(t *testing.T) {
	oldPod, newPod := Pod("llm-0", "uid-old"), Pod("llm-0", "uid-new")
	gpu0 := Result("gpu", "node-1", "gpu-0")
	shareable := GPUDevice("gpu-0", "GPU-0")
	shareable.AllowMultipleAllocations = Ptr(true)
	admin := Allocated(Claim("dcgm", "uid-dcgm", Request("gpu", GPUClassName)), "node-1", T0, gpu0)
	admin.Status.Allocation.Devices.Results[0].AdminAccess = Ptr(true)
	twice := Allocated(Claim("twice", "uid-twice", Request("gpu", GPUClassName)), "node-1", T0, gpu0, gpu0)

	oldClaim := ReservedFor(Allocated(Claim("old", "uid-claim-old", Request("gpu", GPUClassName)), "node-1", T0, gpu0), oldPod)
	newClaim := ReservedFor(Allocated(Claim("new", "uid-claim-new", Request("gpu", GPUClassName)), "node-1", T0, gpu0), newPod)
	idle := Allocated(Claim("idle", "uid-idle", Request("gpu", GPUClassName)), "node-1", T0, gpu0)

	tests := []struct {
		name string
		objs []any
		want []string // claim/pod of each conflict series
	}{
		{"two claims, each reserved for a pod", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, oldClaim, newClaim},
			[]string{"old/llm-0", "new/llm-0"}},
		{"a claim reserving nobody still holds the device", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, newClaim, idle},
			[]string{"idle/", "new/llm-0"}},
		{"a shareable device", []any{GPUClass(), Slice("node-1", "node-1", 1, shareable), newPod, oldClaim, newClaim}, nil},
		{"an admin-access claim does not hold the device", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, newClaim, admin}, nil},
		{"one claim naming the device twice", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), twice}, nil},
		{"a device no slice publishes", []any{GPUClass(), newPod, oldClaim, newClaim}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range classify.DoubleAllocations(snapshotOf(t, tt.objs...)) {
				got = append(got, c.Claim.Key.Name+"/"+c.Pod)
				if c.Device.Key.Device != "gpu-0" || len(c.Others) != 1 {
					t.Errorf("conflict %+v: want device gpu-0 and one other claim", c)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("conflicts = %v, want %v", got, want)
			}
		})
	}
}
