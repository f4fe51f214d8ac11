package gpu

// XID errors from NVML's event set: the last XID per GPU and MIG instance.

import (
	"strconv"
)

// xidWatch keeps the last XID of each GPU from NVML's event set. A GPU
// whose XID events are registered reads 0 until its first XID (none since
// the agent started watching); one that cannot register them has no value.
// The set is drained at each read (Wait with no timeout until TIMEOUT):
// the driver queues the events in between.
type xidWatch struct {
	set  NVMLEventSet
	last map[string]uint64
}

func watchXIDs(lib NVMLLib, gpus []*nvmlGPU, opts Options) *xidWatch {
	w := &xidWatch{last: map[string]uint64{}}
	set, ret := lib.EventSetCreate()
	if ret != NVMLSuccess {
		opts.logger().Info("NVML event set unavailable: no last-XID series", "err", ret)
		return w
	}
	w.set = set
	for _, g := range gpus {
		types, ret := g.dev.GetSupportedEventTypes()
		if ret != NVMLSuccess || types&NVMLEventTypeXidCriticalError == 0 {
			continue
		}
		if g.dev.RegisterEvents(NVMLEventTypeXidCriticalError, set) == NVMLSuccess {
			w.last[g.uuid] = 0
		}
	}
	return w
}

// maxEventsPerRead bounds one drain.
const maxEventsPerRead = 1024

// drain reads the queued events and returns the last XID of each GPU.
func (w *xidWatch) drain() map[string]uint64 {
	for i := 0; w.set != nil && i < maxEventsPerRead; i++ {
		ev, ret := w.set.Wait(0)
		if ret != NVMLSuccess {
			break
		}
		if ev.EventType&NVMLEventTypeXidCriticalError == 0 || ev.Device == nil {
			continue
		}
		uuid, r := ev.Device.GetUUID()
		if r != NVMLSuccess {
			continue
		}
		// An event attributable to a MIG instance carries its GPU
		// instance ID, 0xFFFFFFFF otherwise (nvml.h:3497-3502): it is
		// the instance's, not the whole GPU's.
		if ev.GpuInstanceId != nvmlNoInstance {
			w.last[instanceKey(uuid, int(ev.GpuInstanceId))] = ev.EventData
			continue
		}
		w.last[uuid] = ev.EventData
	}
	return w.last
}

// nvmlNoInstance is the GPU instance ID of an event that is not an
// instance's (nvml.h:3497-3499).
const nvmlNoInstance = 0xFFFFFFFF

// instanceKey keys a MIG instance's last XID by its GPU and GPU instance.
func instanceKey(gpuUUID string, gi int) string { return gpuUUID + "/" + strconv.Itoa(gi) }

func (w *xidWatch) stop() {
	if w.set != nil {
		w.set.Free()
		w.set = nil
	}
}
