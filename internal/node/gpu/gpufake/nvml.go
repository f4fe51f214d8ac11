package gpufake

import (
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
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
