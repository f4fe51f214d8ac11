package nvidia

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// The names the driver's own source gives as examples
// (device_state.go:607, partitions.go:142, docs/guides/gpu-health-checking.md)
// and the RFC 1123 rewrite of a +me profile.
func TestMIGName(t *testing.T) {
	for _, c := range []struct {
		minor     int
		profile   string
		id, start int
		want      string
	}{
		{1, "2g.47gb", 14, 0, "gpu-1-mig-2g47gb-14-0"},
		{2, "1g.24gb", 19, 0, "gpu-2-mig-1g24gb-19-0"},
		{0, "1g.12gb", 19, 0, "gpu-0-mig-1g12gb-19-0"},
		{0, "1g.10gb+me", 20, 0, "gpu-0-mig-1g10gb-me-20-0"},
		{3, "3g.20gb", ProfileID(A100, "3g.20gb"), 4, "gpu-3-mig-3g20gb-9-4"},
	} {
		if got := MIGName(c.minor, c.profile, c.id, c.start); got != c.want {
			t.Errorf("MIGName(%d, %q, %d, %d) = %q, want %q", c.minor, c.profile, c.id, c.start, got, c.want)
		}
	}
}

func TestPlacementNamesCarryProfileIDs(t *testing.T) {
	for _, p := range A100Placements {
		if want := ProfileID(A100, p.Profile); p.ProfileID != want {
			t.Errorf("placement %s at %d: profile ID %d, want %d", p.Profile, p.Start, p.ProfileID, want)
		}
	}
	if got := PlacementName(0, A100Placements[0]); got != "gpu-0-mig-4g20gb-5-0" {
		t.Errorf("PlacementName = %q", got)
	}
}

// The attributes of a GPU are those GpuInfo.Attributes publishes: no index
// or minor since v25.12.0.
func TestGPUDeviceAttributes(t *testing.T) {
	d := WithMinor(GPUDevice(DeviceName(2), "GPU-x", H100), 2)
	var got []string
	for k := range d.Attributes {
		got = append(got, string(k))
	}
	slices.Sort(got)
	want := []string{"architecture", "brand", "cudaComputeCapability", "cudaDriverVersion", "driverVersion", "productName", PCIBusIDAttribute, "type", "uuid"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("attributes %v, want %v", got, want)
	}
	if d.Name != "gpu-2" {
		t.Errorf("name %q, want gpu-2", d.Name)
	}
}

func TestHealthTaints(t *testing.T) {
	for _, c := range []struct {
		got  resourceapi.DeviceTaint
		want resourceapi.DeviceTaint
	}{
		{XIDTaint(79), resourceapi.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		{XIDTaint(48), resourceapi.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "48", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		{XIDTaint(13), resourceapi.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "13", Effect: resourceapi.DeviceTaintEffectNone}},
		{GPULostTaint(), resourceapi.DeviceTaint{Key: "gpu.nvidia.com/gpu-lost", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		{UnmonitoredTaint(), resourceapi.DeviceTaint{Key: "gpu.nvidia.com/unmonitored", Effect: resourceapi.DeviceTaintEffectNone}},
	} {
		if c.got != c.want {
			t.Errorf("got %+v, want %+v", c.got, c.want)
		}
	}
}
