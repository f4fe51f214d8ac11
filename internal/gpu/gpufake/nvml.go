package gpufake

import (
	"github.com/dra-exporter/dra-exporter/internal/gpu"
)

// NVML returns the machine's NVML library (go-nvml over libnvidia-ml).
func (m *Machine) NVML() gpu.NVMLLib { return nvmlLib{m} }

type nvmlLib struct{ m *Machine }

// nvmlCall counts the call, waits out a hang and checks that NVML is
// loaded and initialised. It returns with mu held on success.
func (l nvmlLib) call(name string) (func(), gpu.NVMLReturn) {
	l.m.enter(name)
	l.m.mu.Lock()
	if !l.m.spec.NVML {
		l.m.mu.Unlock()
		return func() {}, gpu.NVMLLibraryNotFound
	}
	if l.m.nvmlRefs == 0 {
		l.m.mu.Unlock()
		return func() {}, gpu.NVMLUninitialized
	}
	return l.m.mu.Unlock, gpu.NVMLSuccess
}

// Init loads the library; go-nvml answers LIBRARY_NOT_FOUND when
// libnvidia-ml.so.1 cannot be opened (init.go ~20-25). Init and Shutdown
// are counted (refcount.go).
func (l nvmlLib) Init() gpu.NVMLReturn {
	l.m.enter("nvmlInit")
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if !l.m.spec.NVML {
		return gpu.NVMLLibraryNotFound
	}
	l.m.nvmlRefs++
	return gpu.NVMLSuccess
}

func (l nvmlLib) Shutdown() gpu.NVMLReturn {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.m.nvmlRefs == 0 {
		return gpu.NVMLUninitialized
	}
	l.m.nvmlRefs--
	return gpu.NVMLSuccess
}

// DeviceGetCount is nvmlDeviceGetCount_v2: it counts every GPU, those the
// caller cannot open included (nvml.h:5081-5086).
func (l nvmlLib) DeviceGetCount() (int, gpu.NVMLReturn) {
	unlock, ret := l.call("nvmlDeviceGetCount")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	return len(l.m.spec.GPUs), gpu.NVMLSuccess
}

// DeviceGetHandleByIndex is nvmlDeviceGetHandleByIndex_v2: NO_PERMISSION
// for a GPU the caller may not talk to, GPU_IS_LOST for one fallen off the
// bus (nvml.h:5160, :5162).
func (l nvmlLib) DeviceGetHandleByIndex(i int) (gpu.NVMLDevice, gpu.NVMLReturn) {
	unlock, ret := l.call("nvmlDeviceGetHandleByIndex")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	for _, g := range l.m.spec.GPUs {
		if g.Index == i {
			if g.NoPermission {
				return nil, gpu.NVMLNoPermission
			}
			if g.Lost {
				return nil, gpu.NVMLGPUIsLost
			}
			return &device{m: l.m, uuid: g.UUID}, gpu.NVMLSuccess
		}
	}
	return nil, gpu.NVMLInvalidArgument
}

func (l nvmlLib) EventSetCreate() (gpu.NVMLEventSet, gpu.NVMLReturn) {
	unlock, ret := l.call("nvmlEventSetCreate")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	// A new set sees the events from now on.
	return &eventSet{m: l.m, registered: map[string]bool{}, seen: len(l.m.events)}, gpu.NVMLSuccess
}

// device is a GPU handle (mig empty) or a MIG device handle.
type device struct {
	m    *Machine
	uuid string // the GPU's
	mig  string // the MIG device's UUID
}

// resolve finds the handle's GPU and instance; with mu held.
func (d *device) resolve() (*GPUSpec, *MIGSpec, gpu.NVMLReturn) {
	g, ok := d.m.gpuByUUID(d.uuid)
	if !ok {
		return nil, nil, gpu.NVMLNotFound
	}
	if g.Lost {
		// nvml.h ~8026: "GPU_IS_LOST if the target GPU has fallen off
		// the bus or is otherwise inaccessible".
		return g, nil, gpu.NVMLGPUIsLost
	}
	if d.mig == "" {
		return g, nil, gpu.NVMLSuccess
	}
	for i := range g.MIG {
		if g.MIG[i].UUID == d.mig {
			return g, &g.MIG[i], gpu.NVMLSuccess
		}
	}
	return g, nil, gpu.NVMLNotFound // the instance was destroyed
}

func (d *device) enter(name string) (*GPUSpec, *MIGSpec, func(), gpu.NVMLReturn) {
	l := nvmlLib{d.m}
	unlock, ret := l.call(name)
	if ret != gpu.NVMLSuccess {
		return nil, nil, unlock, ret
	}
	g, in, ret := d.resolve()
	return g, in, unlock, ret
}

func (d *device) GetUUID() (string, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetUUID")
	defer unlock()
	if ret == gpu.NVMLGPUIsLost {
		return d.uuid, gpu.NVMLSuccess // read once into the handle when it was made
	}
	if ret != gpu.NVMLSuccess {
		return "", ret
	}
	if in != nil {
		return in.UUID, gpu.NVMLSuccess
	}
	return d.uuid, gpu.NVMLSuccess
}

func (d *device) GetName() (string, gpu.NVMLReturn) {
	g, _, unlock, ret := d.enter("nvmlDeviceGetName")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return "", ret
	}
	return g.Product, gpu.NVMLSuccess
}

func (d *device) GetMinorNumber() (int, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter("nvmlDeviceGetMinorNumber")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	if in != nil {
		return 0, gpu.NVMLNotSupported
	}
	return g.minor(), gpu.NVMLSuccess
}

func (d *device) GetMigMode() (int, int, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter("nvmlDeviceGetMigMode")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, 0, ret
	}
	if in != nil {
		return 0, 0, gpu.NVMLNotSupported
	}
	mode := 0
	if g.MIGEnabled {
		mode = 1
	}
	return mode, mode, gpu.NVMLSuccess
}

func (d *device) GetMaxMigDeviceCount() (int, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetMaxMigDeviceCount")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	if in != nil {
		return 0, gpu.NVMLNotSupported
	}
	return maxMigDevices, gpu.NVMLSuccess
}

// GetMigDeviceHandleByIndex: an index without an instance is NOT_FOUND
// (nvml.h ~14444).
func (d *device) GetMigDeviceHandleByIndex(i int) (gpu.NVMLDevice, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter("nvmlDeviceGetMigDeviceHandleByIndex")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	if in != nil || !g.MIGEnabled {
		return nil, gpu.NVMLNotSupported
	}
	list := instances(g)
	if i < 0 || i >= maxMigDevices {
		return nil, gpu.NVMLInvalidArgument
	}
	if i >= len(list) {
		return nil, gpu.NVMLNotFound
	}
	return &device{m: d.m, uuid: g.UUID, mig: list[i].UUID}, gpu.NVMLSuccess
}

func (d *device) GetGpuInstanceId() (int, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetGpuInstanceId")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	if in == nil {
		return 0, gpu.NVMLNotSupported
	}
	return in.GI, gpu.NVMLSuccess
}

// GetAttributes of a MIG device: any caller may read them (its profile's
// slices, memory and engines).
func (d *device) GetAttributes() (gpu.DeviceAttributes, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetAttributes")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return gpu.DeviceAttributes{}, ret
	}
	if in == nil {
		return gpu.DeviceAttributes{}, gpu.NVMLNotSupported
	}
	p, _ := profileByName(in.Profile)
	return gpu.DeviceAttributes{MultiprocessorCount: p.MultiprocessorCount, SharedCopyEngineCount: p.CopyEngineCount,
		SharedDecoderCount: p.DecoderCount, SharedEncoderCount: p.EncoderCount, SharedJpegCount: p.JpegCount, SharedOfaCount: p.OfaCount,
		GpuInstanceSliceCount: p.SliceCount, ComputeInstanceSliceCount: p.SliceCount, MemorySizeMB: p.MemorySizeMB}, gpu.NVMLSuccess
}

func (d *device) GetGpuInstanceProfileInfoV3(index int) (gpu.GpuInstanceProfileInfo, gpu.NVMLReturn) {
	_, in, unlock, ret := d.enter("nvmlDeviceGetGpuInstanceProfileInfoV")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return gpu.GpuInstanceProfileInfo{}, ret
	}
	if in != nil {
		return gpu.GpuInstanceProfileInfo{}, gpu.NVMLNotSupported
	}
	p, ret := profileByIndex(index)
	return p.GpuInstanceProfileInfo, ret
}

// GetGpuInstanceById requires a privileged user (nvml.h ~14035-14063).
func (d *device) GetGpuInstanceById(id int) (gpu.NVMLGpuInstance, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter("nvmlDeviceGetGpuInstanceById")
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	if in != nil || !g.MIGEnabled {
		return nil, gpu.NVMLNotSupported
	}
	if !d.m.spec.Privileged {
		return nil, gpu.NVMLNoPermission
	}
	for _, mi := range g.MIG {
		if mi.GI == id {
			p, _ := profileByName(mi.Profile)
			return gpuInstance{info: gpu.GpuInstanceInfo{ID: uint32(mi.GI), ProfileID: p.ID, PlacementStart: uint32(mi.Placement), PlacementSize: p.SliceCount}}, gpu.NVMLSuccess
		}
	}
	return nil, gpu.NVMLNotFound
}

type gpuInstance struct{ info gpu.GpuInstanceInfo }

func (g gpuInstance) GetInfo() (gpu.GpuInstanceInfo, gpu.NVMLReturn) { return g.info, gpu.NVMLSuccess }

// processInfos lists processes as nvmlDeviceGetComputeRunningProcesses
// does; a memory the driver cannot tell is NVML_VALUE_NOT_AVAILABLE, all
// ones as an unsigned long long (nvml.h ~156, ~355-356).
func processInfos(ps []ProcessSpec, gi int, mps bool) []gpu.ProcessInfo {
	out := make([]gpu.ProcessInfo, 0, len(ps))
	for _, p := range ps {
		if p.MPSClient != mps {
			continue
		}
		used := p.UsedMemoryBytes
		if p.MemoryNotAvailable {
			used = gpu.NVMLValueNotAvailable
		}
		out = append(out, gpu.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: used, GpuInstanceId: uint32(gi)})
	}
	return out
}

// GetComputeRunningProcesses: on a MIG-enabled GPU's own handle NVML lists
// every instance's processes only to a privileged caller (nvml.h
// ~8008-8010), NO_PERMISSION otherwise; a MIG device handle lists its
// instance's.
func (d *device) GetComputeRunningProcesses() ([]gpu.ProcessInfo, gpu.NVMLReturn) {
	return d.processes("nvmlDeviceGetComputeRunningProcesses", false)
}

// GetMPSComputeRunningProcesses lists the MPS clients only; the compute
// list has the server instead (nvml.h:8078-8118). The same privilege rule
// holds for a MIG parent.
func (d *device) GetMPSComputeRunningProcesses() ([]gpu.ProcessInfo, gpu.NVMLReturn) {
	return d.processes("nvmlDeviceGetMPSComputeRunningProcesses", true)
}

func (d *device) processes(call string, mps bool) ([]gpu.ProcessInfo, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter(call)
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return nil, ret
	}
	if d.m.spec.OwnPIDNamespace {
		// Every process of the machine belongs to a pod: none is in
		// the agent's own PID namespace (Spec.OwnPIDNamespace).
		if in == nil && g.MIGEnabled && !d.m.spec.Privileged {
			return nil, gpu.NVMLNoPermission
		}
		return []gpu.ProcessInfo{}, gpu.NVMLSuccess
	}
	if in != nil {
		return processInfos(in.Processes, in.GI, mps), gpu.NVMLSuccess
	}
	if !g.MIGEnabled {
		return processInfos(g.Processes, 0xffffffff, mps), gpu.NVMLSuccess
	}
	if !d.m.spec.Privileged {
		return nil, gpu.NVMLNoPermission
	}
	var out []gpu.ProcessInfo
	for _, mi := range instances(g) {
		out = append(out, processInfos(mi.Processes, mi.GI, mps)...)
	}
	return out, gpu.NVMLSuccess
}

// GetMemoryInfo is version 1: used is reserved plus allocated memory
// (nvml.h:262-265), so the GPU's reserved memory is added to the DCGM
// (version 2) figure its fields hold.
func (d *device) GetMemoryInfo() (gpu.Memory, gpu.NVMLReturn) {
	m, ret := d.memory("nvmlDeviceGetMemoryInfo")
	return gpu.Memory{Total: m.Total, Free: m.Free, Used: m.Used + m.Reserved}, ret
}

// GetMemoryInfoV2 is version 2: reserved apart, used allocated memory only
// (nvml.h:272-279), which DCGM reads (DcgmCacheManager.cpp:14186-14230).
func (d *device) GetMemoryInfoV2() (gpu.MemoryV2, gpu.NVMLReturn) {
	return d.memory("nvmlDeviceGetMemoryInfo_v2")
}

// memory answers both versions. In MIG mode a GPU handle answers the
// aggregate only to a privileged caller (nvml.h:7252-7254), NO_PERMISSION
// otherwise; a MIG device handle answers its instance's.
func (d *device) memory(call string) (gpu.MemoryV2, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter(call)
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return gpu.MemoryV2{}, ret
	}
	if in == nil && g.MIGEnabled && !d.m.spec.Privileged {
		return gpu.MemoryV2{}, gpu.NVMLNoPermission
	}
	fields := g.Fields
	if in != nil {
		fields = in.Fields
	}
	total, ok1 := value(fields, gpu.FieldFBTotal)
	free, ok2 := value(fields, gpu.FieldFBFree)
	used, ok3 := value(fields, gpu.FieldFBUsed)
	if !ok1 || !ok2 || !ok3 {
		return gpu.MemoryV2{}, gpu.NVMLNotSupported
	}
	const mib = 1 << 20
	reserved := 0.0
	if in == nil {
		reserved = g.ReservedMiB
	}
	return gpu.MemoryV2{Total: uint64(total * mib), Reserved: uint64(reserved * mib), Free: uint64(free * mib), Used: uint64(used * mib)}, gpu.NVMLSuccess
}

// board answers a GPU-level query: NOT_SUPPORTED on a MIG device handle
// and, for utilisation, on a MIG-enabled GPU.
func (d *device) board(name string, id gpu.FieldID) (float64, gpu.NVMLReturn) {
	g, in, unlock, ret := d.enter(name)
	defer unlock()
	if ret != gpu.NVMLSuccess {
		return 0, ret
	}
	if in != nil || (id == gpu.FieldGPUUtil && g.MIGEnabled) {
		return 0, gpu.NVMLNotSupported
	}
	v, ok := value(g.Fields, id)
	if !ok {
		return 0, gpu.NVMLNotSupported
	}
	return v, gpu.NVMLSuccess
}

func (d *device) GetUtilizationRates() (gpu.Utilization, gpu.NVMLReturn) {
	v, ret := d.board("nvmlDeviceGetUtilizationRates", gpu.FieldGPUUtil)
	return gpu.Utilization{Gpu: uint32(v)}, ret
}

func (d *device) GetPowerUsage() (uint32, gpu.NVMLReturn) {
	v, ret := d.board("nvmlDeviceGetPowerUsage", gpu.FieldPowerUsage)
	return uint32(v * 1000), ret // milliwatts
}

func (d *device) GetTemperature(int) (uint32, gpu.NVMLReturn) {
	v, ret := d.board("nvmlDeviceGetTemperature", gpu.FieldGPUTemp)
	return uint32(v), ret
}

func (d *device) GetClockInfo(int) (uint32, gpu.NVMLReturn) {
	v, ret := d.board("nvmlDeviceGetClockInfo", gpu.FieldSMClock)
	return uint32(v), ret
}

func (d *device) GetTotalEccErrors(errType, _ int) (uint64, gpu.NVMLReturn) {
	id := gpu.FieldECCSBEVolTotal
	if errType == 1 {
		id = gpu.FieldECCDBEVolTotal
	}
	v, ret := d.board("nvmlDeviceGetTotalEccErrors", id)
	return uint64(v), ret
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
