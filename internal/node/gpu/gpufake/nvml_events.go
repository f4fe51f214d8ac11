package gpufake

// The simulated NVML's event set: XID events as NVML delivers them.

import (
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

func (l nvmlLib) EventSetCreate() (gpu.NVMLEventSet, gpu.NVMLReturn) {
	unlock, ret := l.call("nvmlEventSetCreate")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	// A new set sees the events from now on.
	return &eventSet{m: l.m, registered: map[string]bool{}, seen: len(l.m.events)}, gpu.NVMLSuccess
}

func (d *device) GetSupportedEventTypes() (uint64, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetSupportedEventTypes")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	if in != nil {
		// Per-instance events are not supported on MIG device handles
		// (nvml.h ~10735).
		return 0, gpu.NVMLNotSupported
	}
	return gpu.NVMLEventTypeXidCriticalError, gpu.NVMLSuccess
}

func (d *device) RegisterEvents(types uint64, set gpu.NVMLEventSet) gpu.NVMLReturn {
	_, in, unlock, ret := d.enter("nvmlDeviceRegisterEvents")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return ret
	}
	es, ok := set.(*eventSet)
	if !ok || in != nil {
		return gpu.NVMLInvalidArgument
	}
	if types&gpu.NVMLEventTypeXidCriticalError != 0 {
		es.registered[d.uuid] = true
	}
	return gpu.NVMLSuccess
}

// eventSet delivers the XIDs the steps report, to the devices registered.
type eventSet struct {
	m          *Machine
	registered map[string]bool
	seen       int
}

// Wait returns the next queued XID event of a registered device or, once
// timeoutMs passed without one, TIMEOUT (nvml.h:10725-10753). The fake's
// events are queued by the steps, so it never needs to wait. In MIG mode
// an event attributable to an instance carries its GPU instance ID and is
// reported to privileged callers only; others see only the events that
// affect the whole device (nvml.h:10733-10735, :3497-3502).
func (e *eventSet) Wait(uint32) (gpu.EventData, gpu.NVMLReturn) {
	e.m.enter("nvmlEventSetWait")
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	for e.seen < len(e.m.events) {
		ev := e.m.events[e.seen]
		e.seen++
		if !e.registered[ev.uuid] || (ev.gi >= 0 && !e.m.spec.Privileged) {
			continue
		}
		gi := uint32(0xFFFFFFFF)
		if ev.gi >= 0 {
			gi = uint32(ev.gi)
		}
		return gpu.EventData{Device: &device{m: e.m, uuid: ev.uuid}, EventType: gpu.NVMLEventTypeXidCriticalError, EventData: ev.code, GpuInstanceId: gi}, gpu.NVMLSuccess
	}
	return gpu.EventData{}, gpu.NVMLTimeout
}

func (e *eventSet) Free() gpu.NVMLReturn { return gpu.NVMLSuccess }
