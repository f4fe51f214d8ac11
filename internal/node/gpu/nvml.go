package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// nvmlView reads what NVML says of the node: the GPUs, their MIG instances
// (each by its own MIG device handle), the instances' profile names and the
// compute processes. Both sources use it: DCGM has no process list and
// names GPU instances by entity numbers, not UUIDs.
type nvmlView struct {
	lib  NVMLLib
	gpus []*nvmlGPU
	// unusable are the GPUs NVML counts but cannot open or identify.
	unusable []unusableGPU
	// profiles caches the GPU instance profile table of each GPU (static).
	profiles map[string][]GpuInstanceProfileInfo
	// named caches each MIG instance's profile and placement by its UUID
	// (a recreated instance has a new UUID).
	named map[string]migName
	// privileged is false once NVML refused a privileged MIG call.
	privileged bool
}

type nvmlGPU struct {
	dev          NVMLDevice
	uuid, name   string
	index, minor int
	mig          bool
	instances    []nvmlMIG
	lost         bool
}

type nvmlMIG struct {
	dev  NVMLDevice
	uuid string
	gi   int
	migName
}

// unusableGPU is a GPU NVML counts whose handle or UUID it cannot give:
// nvmlDeviceGetCount_v2 counts devices whose nvmlDeviceGetHandleByIndex_v2
// then answers NO_PERMISSION or GPU_IS_LOST, and the header asks callers
// to handle it (go-nvml v0.13.4-1 nvml.h:5081-5086, :5137-5142, :5160,
// :5162). It is reported lost under the UUID an earlier session of the
// same source read at its index; without one it cannot be named and is
// only logged.
type unusableGPU struct {
	index int
	ret   NVMLReturn
	known
}

// known is what an earlier session read of the GPU at an NVML index.
type known struct {
	uuid, name string
	minor      int
}

// knownGPUs remembers, for one source across its sessions, each NVML
// index's GPU: a GPU that falls off the bus and is then opened again (a
// reconnect) is still named.
type knownGPUs struct {
	mu      sync.Mutex
	byIndex map[int]known
}

func (k *knownGPUs) get(i int) known {
	if k == nil {
		return known{minor: -1}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if g, ok := k.byIndex[i]; ok {
		return g
	}
	return known{minor: -1}
}

func (k *knownGPUs) set(i int, g known) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byIndex == nil {
		k.byIndex = map[int]known{}
	}
	k.byIndex[i] = g
}

// openNVML initialises NVML and lists its GPUs. A GPU it counts but cannot
// open leaves the others served (unusable).
func openNVML(lib NVMLLib, opts Options) (*nvmlView, error) {
	if lib == nil {
		return nil, fmt.Errorf("nvml: %w", ErrUnavailable)
	}
	if ret := lib.Init(); ret != NVMLSuccess {
		return nil, fmt.Errorf("nvml init: %w", ret)
	}
	v := &nvmlView{lib: lib, profiles: map[string][]GpuInstanceProfileInfo{}, named: map[string]migName{}, privileged: true}
	n, ret := lib.DeviceGetCount()
	if ret != NVMLSuccess {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml device count: %w", ret)
	}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		var uuid string
		if ret == NVMLSuccess {
			uuid, ret = dev.GetUUID()
		}
		if ret != NVMLSuccess {
			u := unusableGPU{index: i, ret: ret, known: opts.known.get(i)}
			opts.logger().Warn("NVML counts a GPU it cannot open; the other GPUs are served", "index", i, "ret", ret.String(), "uuid", u.uuid)
			v.unusable = append(v.unusable, u)
			continue
		}
		g := &nvmlGPU{dev: dev, uuid: uuid, index: i, minor: -1}
		g.name, _ = dev.GetName()
		if m, ret := dev.GetMinorNumber(); ret == NVMLSuccess {
			g.minor = m
		}
		opts.known.set(i, known{uuid: g.uuid, name: g.name, minor: g.minor})
		v.gpus = append(v.gpus, g)
	}
	return v, nil
}

// unusableEntities are the unusable GPUs that can be named: lost, no
// value.
func (v *nvmlView) unusableEntities(skip func(uuid string) bool) []Entity {
	var out []Entity
	for _, u := range v.unusable {
		if u.uuid == "" || (skip != nil && skip(u.uuid)) {
			continue
		}
		out = append(out, Entity{UUID: u.uuid, Product: u.name, Index: u.index, Minor: u.minor, Values: map[FieldID]float64{}, Lost: true})
	}
	return out
}

func (v *nvmlView) close() { v.lib.Shutdown() }

func (v *nvmlView) gpu(uuid string) *nvmlGPU {
	for _, g := range v.gpus {
		if g.uuid == uuid {
			return g
		}
	}
	return nil
}

// processes lists a GPU's or MIG instance's compute processes. A MIG
// parent lists its instances' processes only to privileged callers
// (nvml.h ~8008-8010), so instances are always asked by their own handles
// and a MIG-enabled GPU itself never.
//
// Under MPS the compute list shows the MPS server (nvidia-cuda-mps-server),
// and its clients appear only through nvmlDeviceGetMPSComputeRunningProcesses
// (nvml.h:8078-8118), which is read too: its processes are the clients.
func processes(dev NVMLDevice) ([]Process, NVMLReturn) {
	infos, ret := dev.GetComputeRunningProcesses()
	if ret != NVMLSuccess {
		return nil, ret
	}
	out := make([]Process, 0, len(infos))
	listed := map[int]bool{}
	add := func(p ProcessInfo, client bool) {
		if listed[int(p.Pid)] {
			return
		}
		listed[int(p.Pid)] = true
		proc := Process{PID: int(p.Pid), UsedMemoryBytes: float64(p.UsedGpuMemory), MPSClient: client}
		if p.UsedGpuMemory == NVMLValueNotAvailable {
			proc.UsedMemoryBytes, proc.MemoryUnknown = 0, true
		}
		out = append(out, proc)
	}
	for _, p := range infos {
		add(p, false)
	}
	if clients, ret := dev.GetMPSComputeRunningProcesses(); ret == NVMLSuccess {
		for _, p := range clients {
			add(p, true)
		}
	}
	return out, NVMLSuccess
}

// nvmlSession is the NVML source: the basic fields from NVML calls, the
// last XID from NVML's event set.
type nvmlSession struct {
	view *nvmlView
	raw  bool
	xid  *xidWatch
}

func openNVMLSession(lib NVMLLib, opts Options) (session, error) {
	v, err := openNVML(lib, opts)
	if err != nil {
		return nil, err
	}
	s := &nvmlSession{view: v, raw: opts.Raw}
	s.xid = watchXIDs(lib, v.gpus, opts)
	return s, nil
}

func (s *nvmlSession) name() string { return SourceNVML }

func (s *nvmlSession) close() {
	s.xid.stop()
	s.view.close()
}

// NVML units are converted to DCGM's (the Fields table): bytes to MiB,
// milliwatts to watts.
const mib = 1 << 20

func (s *nvmlSession) read() (*Reading, error) {
	v := s.view
	v.refreshMIG()
	r := &Reading{Source: SourceNVML, Groups: []GroupStatus{
		{Name: GroupBasic, Watched: true},
		{Name: GroupProfiling, Reason: ReasonUnsupported},
	}}
	xids := s.xid.drain()
	for _, g := range v.gpus {
		e := Entity{UUID: g.uuid, Product: g.name, Index: g.index, Minor: g.minor, Values: map[FieldID]float64{}}
		rec := recorder{raw: s.raw, e: &e}
		rec.utilization(g.dev)
		rec.memory(g.dev)
		w, ret := g.dev.GetPowerUsage()
		rec.value(FieldPowerUsage, "nvmlDeviceGetPowerUsage", ret, float64(w)/1000)
		t, ret := g.dev.GetTemperature(nvmlTemperatureGPU)
		rec.value(FieldGPUTemp, "nvmlDeviceGetTemperature", ret, float64(t))
		c, ret := g.dev.GetClockInfo(nvmlClockSM)
		rec.value(FieldSMClock, "nvmlDeviceGetClockInfo", ret, float64(c))
		sbe, ret := g.dev.GetTotalEccErrors(nvmlMemoryErrorCorrected, nvmlVolatileECC)
		rec.value(FieldECCSBEVolTotal, "nvmlDeviceGetTotalEccErrors", ret, float64(sbe))
		dbe, ret := g.dev.GetTotalEccErrors(nvmlMemoryErrorUncorrected, nvmlVolatileECC)
		rec.value(FieldECCDBEVolTotal, "nvmlDeviceGetTotalEccErrors", ret, float64(dbe))
		if code, ok := xids[g.uuid]; ok {
			rec.value(FieldXIDErrors, "nvmlEventSetWait", NVMLSuccess, float64(code))
		}
		e.Lost = e.Lost || g.lost
		if !g.mig {
			e.Processes, _ = processes(g.dev)
		}
		if e.Lost {
			e.Values = map[FieldID]float64{}
		}
		r.Entities = append(r.Entities, e)
		for j, m := range g.instances {
			me := Entity{UUID: m.uuid, ParentUUID: g.uuid, Product: g.name, Index: g.index, Minor: g.minor,
				MIG: &MIGInstance{GPUInstanceID: m.gi, Profile: m.profile, PlacementStart: m.placement, DeviceIndex: j}, Values: map[FieldID]float64{}, Lost: e.Lost}
			mrec := recorder{raw: s.raw, e: &me}
			mrec.memory(m.dev)
			// An instance's XIDs reach privileged callers only
			// (nvml.h:10733-10735): without privileges its last XID
			// is unknown, not 0.
			if code, ok := xids[instanceKey(g.uuid, m.gi)]; ok {
				mrec.value(FieldXIDErrors, "nvmlEventSetWait", NVMLSuccess, float64(code))
			} else if _, registered := xids[g.uuid]; registered && v.privileged {
				mrec.value(FieldXIDErrors, "nvmlEventSetWait", NVMLSuccess, 0)
			}
			me.Processes, _ = processes(m.dev)
			r.Entities = append(r.Entities, me)
		}
	}
	r.Entities = append(r.Entities, v.unusableEntities(nil)...)
	return r, nil
}

// recorder stores NVML answers as field values (and raw readings).
type recorder struct {
	raw bool
	e   *Entity
}

func (r recorder) value(id FieldID, call string, ret NVMLReturn, x float64) {
	f, _ := FieldByID(id)
	if r.raw {
		val := ""
		if ret == NVMLSuccess {
			val = strconv.FormatFloat(x, 'g', -1, 64)
		}
		r.e.Raw = append(r.e.Raw, RawValue{Field: f.Name, Type: call, Status: ret.String(), Value: val})
	}
	switch ret {
	case NVMLSuccess:
		r.e.Values[id] = x
	case NVMLGPUIsLost:
		r.e.Lost = true
	}
}

func (r recorder) utilization(dev NVMLDevice) {
	u, ret := dev.GetUtilizationRates()
	r.value(FieldGPUUtil, "nvmlDeviceGetUtilizationRates", ret, float64(u.Gpu))
}

// memory reads the framebuffer as DCGM does (DcgmCacheManager.cpp
// :14186-14230): version 2, whose used memory leaves out what the driver
// and firmware reserve, so that used memory means the same on both sources
// (version 1 counts the reserved memory as used: about 0.5 GiB on an idle
// H100). A driver older than 510 has version 1 only, as DCGM falls back.
func (r recorder) memory(dev NVMLDevice) {
	m2, ret := dev.GetMemoryInfoV2()
	if ret == NVMLSuccess {
		r.value(FieldFBTotal, "nvmlDeviceGetMemoryInfo_v2", ret, float64(m2.Total)/mib)
		r.value(FieldFBFree, "nvmlDeviceGetMemoryInfo_v2", ret, float64(m2.Free)/mib)
		r.value(FieldFBUsed, "nvmlDeviceGetMemoryInfo_v2", ret, float64(m2.Used)/mib)
		return
	}
	if ret != NVMLNotSupported && ret != NVMLFunctionNotFound {
		r.value(FieldFBUsed, "nvmlDeviceGetMemoryInfo_v2", ret, 0)
		return
	}
	m, ret := dev.GetMemoryInfo()
	r.value(FieldFBTotal, "nvmlDeviceGetMemoryInfo", ret, float64(m.Total)/mib)
	r.value(FieldFBFree, "nvmlDeviceGetMemoryInfo", ret, float64(m.Free)/mib)
	r.value(FieldFBUsed, "nvmlDeviceGetMemoryInfo", ret, float64(m.Used)/mib)
}

// errNoNVML is what a DCGM source without NVML says of its MIG instances.
var errNoNVML = errors.New("NVML unavailable: MIG instances have no UUID and processes are not listed")
