package gpufake

import (
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// DCGM returns the machine's DCGM library (go-dcgm over libdcgm).
func (m *Machine) DCGM() gpu.DCGMLib { return dcgmLib{m} }

type dcgmLib struct{ m *Machine }

// conn is one client connection of the host engine, with what it created:
// groups, field groups and watches belong to the connection and are freed
// with it (DcgmHostEngineHandler.cpp ~1352-1365, OnConnectionRemove).
type conn struct {
	generation  int
	next        uintptr
	groups      map[gpu.GroupHandle][]gpu.EntityPair
	fieldGroups map[gpu.FieldHandle][]gpu.FieldID
	watched     map[watchKey]bool
}

type watchKey struct {
	entity gpu.EntityPair
	field  gpu.FieldID
}

// Status codes of dcgm_structs.h the fake answers besides those internal/node/gpu
// names.
const (
	stInstanceNotFound = -45
)

func (l dcgmLib) Init(address string) (func(), error) {
	m := l.m
	m.enter("Init")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spec.DCGM == nil {
		// go-dcgm dlopens libdcgm.so.4 on Init and fails without it.
		return nil, errLibNotFound
	}
	// go-dcgm counts Init calls and connects on the first only
	// (api.go ~23-45); the cleanup it returns counts down.
	if m.initCount == 0 {
		if m.spec.DCGM.Down {
			if address == "" {
				return nil, dcgmFail("Init/embedded", gpu.StInitError)
			}
			return nil, dcgmFail("Init/standalone", gpu.StConnectionNotValid)
		}
		// An embedded host engine runs with the caller's privileges. With
		// a GPU in MIG mode its cache manager needs root (euid 0,
		// DcgmCacheManager.cpp:912-917) and reads the GPU instances
		// through NVML's privileged nvmlDeviceGetGpuInstances; the
		// failure aborts GPU init (:1578-1582), the handler throws
		// "CacheManager Init Failed" (DcgmHostEngineHandler.cpp
		// :2464-2471) and dcgmStartEmbedded returns INIT_ERROR
		// (DcgmApi.cpp:6009-6014): dcgm-exporter#34, "Error starting
		// nv-hostengine: DCGM initialization error". A standalone
		// nv-hostengine runs privileged (the GPU Operator's nvidia-dcgm
		// DaemonSet: assets/state-dcgm/0400_dcgm.yml, privileged: true).
		if address == "" && !m.spec.Privileged && m.anyMIG() {
			return nil, dcgmFail("Init/embedded", gpu.StInitError)
		}
		m.conn = &conn{generation: m.generation, groups: map[gpu.GroupHandle][]gpu.EntityPair{}, fieldGroups: map[gpu.FieldHandle][]gpu.FieldID{}, watched: map[watchKey]bool{}}
	}
	m.initCount++
	done := false
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if done {
			return
		}
		done = true
		m.initCount--
		if m.initCount == 0 {
			m.conn = nil
		}
	}, nil
}

// anyMIG reports whether a GPU of the machine has MIG mode on.
func (m *Machine) anyMIG() bool {
	for _, g := range m.spec.GPUs {
		if g.MIGEnabled {
			return true
		}
	}
	return false
}

// connection returns the caller's connection, or CONNECTION_NOT_VALID when
// the host engine restarted since it connected (dcgm-exporter exits on it:
// gpu_collector.go ~101-107). Called with mu held; the status is 0 when
// the connection is good.
func (m *Machine) connection() (*conn, int) {
	if m.initCount == 0 {
		return nil, gpu.StUninitialized
	}
	if m.conn == nil || m.conn.generation != m.generation {
		return nil, gpu.StConnectionNotValid
	}
	return m.conn, gpu.StOK
}

// call counts the call and checks the connection; a failure is returned
// in the call's own go-dcgm error shape (dcgmErrShapes).
func (l dcgmLib) call(name string) (*conn, func(), error) {
	l.m.enter(name)
	l.m.mu.Lock()
	c, st := l.m.connection()
	if st != gpu.StOK {
		l.m.mu.Unlock()
		return nil, func() {}, dcgmFail(name, st)
	}
	return c, l.m.mu.Unlock, nil
}

func (l dcgmLib) GetSupportedDevices() ([]uint, error) {
	_, unlock, err := l.call("GetSupportedDevices")
	defer unlock()
	if err != nil {
		return nil, err
	}
	// dcgmGetAllSupportedDevices lists the active GPUs only
	// (DcgmCacheManager::GetGpuIds with activeOnly): not one lost, nor one
	// the host engine cannot open.
	var ids []uint
	for _, g := range l.m.spec.GPUs {
		if g.Lost || g.NoPermission {
			continue
		}
		ids = append(ids, uint(g.Index))
	}
	return ids, nil
}

func (l dcgmLib) GetDeviceInfo(id uint) (gpu.DCGMDevice, error) {
	_, unlock, err := l.call("GetDeviceInfo")
	defer unlock()
	if err != nil {
		return gpu.DCGMDevice{}, err
	}
	g, ok := l.m.gpuByID(id)
	if !ok {
		return gpu.DCGMDevice{}, dcgmFail("GetDeviceInfo", gpu.StBadParam)
	}
	return gpu.DCGMDevice{GPU: id, UUID: g.UUID, Model: g.Product}, nil
}

func (l dcgmLib) GetGPUStatus(id uint) gpu.EntityStatus {
	l.m.enter("GetGPUStatus")
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if _, st := l.m.connection(); st != gpu.StOK {
		return gpu.EntityStatusUnknown // go-dcgm device_status.go ~134-141
	}
	g, ok := l.m.gpuByID(id)
	switch {
	case !ok:
		return gpu.EntityStatusUnknown
	case g.Lost:
		return gpu.EntityStatusLost // dcgm_structs.h ~429, DcgmEntityStatusLost
	}
	return gpu.EntityStatusOk
}

func (l dcgmLib) GetGPUInstanceHierarchy() ([]gpu.MigHierarchyInfo, error) {
	_, unlock, err := l.call("GetGPUInstanceHierarchy")
	defer unlock()
	if err != nil {
		return nil, err
	}
	var out []gpu.MigHierarchyInfo
	for i := range l.m.spec.GPUs {
		g := &l.m.spec.GPUs[i]
		if !g.MIGEnabled {
			continue
		}
		for n, in := range dcgmInstances(g.Index, g) {
			gi := gpu.EntityPair{Group: gpu.EntityGPUInstance, ID: in.entity}
			out = append(out, gpu.MigHierarchyInfo{
				Entity: gi, Parent: gpu.EntityPair{Group: gpu.EntityGPU, ID: uint(g.Index)},
				ParentUUID: g.UUID, NvmlGpuIndex: uint(g.Index), NvmlInstanceID: uint(in.spec.GI), NvmlProfileID: uint(in.profile.ID),
			})
			// One compute instance per GPU instance, numbered as DCGM
			// numbers them (DcgmCacheManager.cpp ~978).
			out = append(out, gpu.MigHierarchyInfo{
				Entity: gpu.EntityPair{Group: gpu.EntityGPUCompute, ID: uint(g.Index*maxMigDevices + n)}, Parent: gi,
				ParentUUID: g.UUID, NvmlGpuIndex: uint(g.Index), NvmlInstanceID: uint(in.spec.GI), NvmlProfileID: uint(in.profile.ID),
			})
		}
	}
	return out, nil
}
