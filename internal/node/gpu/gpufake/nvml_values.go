package gpufake

// The simulated NVML's readings: processes, memory, board values.

import (
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

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
