package allocator_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// Selector results outlive a snapshot (the next scrape evaluates no CEL for
// unchanged devices), follow a device's change, and do not pile up for
// devices that went.
func TestSelectResultsFollowDeviceChanges(t *testing.T) {
	class := DeviceClass("all", "device.driver == 'gpu.nvidia.com'")
	sel := CEL("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'")
	ix := Build(t, index.Config{}, class, Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")))
	if got := allocator.Of(ix.Snapshot()).Select("all", sel, allocator.Demand{}); len(got.Devices) != 1 {
		t.Fatalf("before the change: %d devices, want 1", len(got.Devices))
	}
	for gen := int64(2); gen <= 20; gen++ {
		other := GPUDevice("gpu-0", "GPU-0")
		name := "NVIDIA B200"
		if gen%2 == 1 {
			name = "NVIDIA H100 80GB HBM3"
		}
		other.Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: &name}
		Upsert(t, ix, Slice("node-1", "node-1", gen, other), false)
		want := 0
		if gen%2 == 1 {
			want = 1
		}
		if got := allocator.Of(ix.Snapshot()).Select("all", sel, allocator.Demand{}); len(got.Devices) != want {
			t.Fatalf("generation %d (%s): %d devices kept, want %d", gen, name, len(got.Devices), want)
		}
	}
	if n := allocator.CachedMatchDevices(ix.Snapshot()); n > 2 {
		t.Errorf("selector results kept for %d device records, want at most 2 (one device)", n)
	}
}
