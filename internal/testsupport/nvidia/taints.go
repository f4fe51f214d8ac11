package nvidia

import (
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
)

// The health taints the driver's kubelet plugin puts on the devices of its
// ResourceSlice (device_health.go:35-39), one key per health dimension under
// the driver's domain. The driver never removes one: its devices keep their
// taints in memory and republish them with every slice (driver.go:503-575)
// until the plugin restarts and publishes its devices anew. NoSchedule keeps
// new claims off a device but leaves a running pod on it.
const (
	TaintXID         = Driver + "/xid"
	TaintGPULost     = Driver + "/gpu-lost"
	TaintUnmonitored = Driver + "/unmonitored"
)

// NonFatalXIDs are the XIDs the driver taints with effect None unless told
// otherwise (xidsToSkip, device_health.go:417-437: application errors, not
// the GPU's); --additional-xids-to-ignore adds to them. Any other XID is
// fatal and taints NoSchedule.
var NonFatalXIDs = []uint64{13, 31, 43, 45, 68, 109}

// XIDTaint is the taint an XID event puts on a device (healthEventToTaint,
// device_health.go:68-79): key gpu.nvidia.com/xid, the XID in decimal as its
// value, NoSchedule for a fatal XID and None for one the driver skips. A
// device has one xid taint: a later XID replaces the value and effect
// (AddOrUpdateTaint, allocatable.go:329-354), so a non-fatal XID after a
// fatal one lowers the effect to None.
func XIDTaint(xid uint64) resourceapi.DeviceTaint {
	effect := resourceapi.DeviceTaintEffectNoSchedule
	for _, x := range NonFatalXIDs {
		if x == xid {
			effect = resourceapi.DeviceTaintEffectNone
		}
	}
	return resourceapi.DeviceTaint{Key: TaintXID, Value: strconv.FormatUint(xid, 10), Effect: effect}
}

// GPULostTaint is the taint of a GPU NVML reports lost (GPU_IS_LOST, XID 79
// "fallen off the bus"), put on every device of the GPU with no value and
// effect NoSchedule (device_health.go:80-84, 230, 254).
func GPULostTaint() resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: TaintGPULost, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// UnmonitoredTaint marks a device the health monitor cannot watch: no
// value, effect None (device_health.go:85-89).
func UnmonitoredTaint() resourceapi.DeviceTaint {
	return resourceapi.DeviceTaint{Key: TaintUnmonitored, Effect: resourceapi.DeviceTaintEffectNone}
}
