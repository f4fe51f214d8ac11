package gpufake

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
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

// Status codes of dcgm_structs.h the fake answers besides those internal/gpu
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

// profilingFields are the DCGM_FI_PROF_* fields of an H100's metric
// groups.
var profilingFields = []uint{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012}

func (l dcgmLib) GetSupportedMetricGroups(id uint) ([]gpu.MetricGroup, error) {
	_, unlock, err := l.call("GetSupportedMetricGroups")
	defer unlock()
	if err != nil {
		return nil, err
	}
	if l.m.spec.DCGM.Profiling == "unsupported" {
		// dcgm-exporter logs it as "Not collecting DCP metrics: Error
		// getting supported metrics: Profiling is not supported for
		// this group of GPUs or GPU" (dcgm_structs.h ~383).
		return nil, dcgmFail("GetSupportedMetricGroups", gpu.StProfilingNotSupported)
	}
	return []gpu.MetricGroup{{Major: 1, Minor: 0, FieldIDs: profilingFields}}, nil
}

func (l dcgmLib) CreateGroup(string) (gpu.GroupHandle, error) {
	c, unlock, err := l.call("CreateGroup")
	defer unlock()
	if err != nil {
		return 0, err
	}
	c.next++
	h := gpu.GroupHandle(c.next)
	c.groups[h] = nil
	return h, nil
}

func (l dcgmLib) AddEntityToGroup(g gpu.GroupHandle, eg gpu.EntityGroup, id uint) error {
	c, unlock, err := l.call("AddEntityToGroup")
	defer unlock()
	if err != nil {
		return err
	}
	if _, ok := c.groups[g]; !ok || !l.m.entityExists(gpu.EntityPair{Group: eg, ID: id}) {
		return dcgmFail("AddEntityToGroup", gpu.StBadParam, eg, id)
	}
	c.groups[g] = append(c.groups[g], gpu.EntityPair{Group: eg, ID: id})
	return nil
}

// preHopper reports whether an entity of the list is, or is an instance
// of, a GPU older than Hopper (A100, V100, A30 ...), whose profiling goes
// through the driver's profiling lock, not GPM.
func (m *Machine) preHopper(entities []gpu.EntityPair) bool {
	for _, e := range entities {
		var g *GPUSpec
		switch e.Group {
		case gpu.EntityGPU:
			g, _ = m.gpuByID(e.ID)
		case gpu.EntityGPUInstance:
			g, _, _ = m.instanceByEntity(e.ID)
		}
		if g != nil && !hasGPM(g.Product) {
			return true
		}
	}
	return false
}

// hasGPM says whether a product has GPM, the per-GPU performance monitor
// of Hopper and later (H100, H200, GH200, B100, B200, GB200).
func hasGPM(product string) bool {
	for _, arch := range []string{" H100", " H200", " H20", " GH200", " B100", " B200", " GB200", " GB300", " B300"} {
		if strings.Contains(" "+strings.TrimPrefix(product, "NVIDIA "), arch) {
			return true
		}
	}
	return false
}

func (m *Machine) entityExists(e gpu.EntityPair) bool {
	switch e.Group {
	case gpu.EntityGPU:
		_, ok := m.gpuByID(e.ID)
		return ok
	case gpu.EntityGPUInstance, gpu.EntityGPUCompute:
		// A GPU instance and its one compute instance share their
		// enumeration number (DcgmCacheManager.cpp ~943, ~978).
		_, _, ok := m.instanceByEntity(e.ID)
		return ok
	}
	return false
}

// instanceByEntity resolves a GPU-instance entity ID in today's numbering.
func (m *Machine) instanceByEntity(id uint) (*GPUSpec, dcgmInstance, bool) {
	for i := range m.spec.GPUs {
		g := &m.spec.GPUs[i]
		if !g.MIGEnabled {
			continue
		}
		for _, in := range dcgmInstances(g.Index, g) {
			if in.entity == id {
				return g, in, true
			}
		}
	}
	return nil, dcgmInstance{}, false
}

func (l dcgmLib) DestroyGroup(g gpu.GroupHandle) error {
	c, unlock, err := l.call("DestroyGroup")
	defer unlock()
	if err != nil {
		return err
	}
	delete(c.groups, g)
	return nil
}

func (l dcgmLib) FieldGroupCreate(_ string, ids []gpu.FieldID) (gpu.FieldHandle, error) {
	c, unlock, err := l.call("FieldGroupCreate")
	defer unlock()
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, errors.New("at least one field must be provided") // go-dcgm fields.go:84
	}
	c.next++
	h := gpu.FieldHandle(c.next)
	c.fieldGroups[h] = append([]gpu.FieldID(nil), ids...)
	return h, nil
}

func (l dcgmLib) FieldGroupDestroy(fg gpu.FieldHandle) error {
	c, unlock, err := l.call("FieldGroupDestroy")
	defer unlock()
	if err != nil {
		return err
	}
	delete(c.fieldGroups, fg)
	return nil
}

// WatchFieldsWithGroupEx watches every field of the field group on every
// entity of the group. Profiling fields go to the profiling module, which
// fails without CAP_SYS_ADMIN on a pre-Hopper GPU (REQUIRES_ROOT: "Host
// engine is running as non-root", dcgm-exporter#407) or while another
// client holds the profiling lock (IN_USE); the host engine then removes
// every watch this request added, basic fields included
// (DcgmHostEngineHandler.cpp ~4660-4695).
func (l dcgmLib) WatchFieldsWithGroupEx(fg gpu.FieldHandle, g gpu.GroupHandle, _ int64, _ float64, _ int32) error {
	c, unlock, err := l.call("WatchFieldsWithGroupEx")
	defer unlock()
	if err != nil {
		return err
	}
	entities, okG := c.groups[g]
	fields, okF := c.fieldGroups[fg]
	if !okG || !okF {
		return dcgmFail("WatchFieldsWithGroupEx", gpu.StBadParam)
	}
	var added []watchKey
	profiling := false
	for _, e := range entities {
		for _, id := range fields {
			k := watchKey{e, id}
			if !c.watched[k] {
				c.watched[k] = true
				added = append(added, k)
			}
			if f, ok := gpu.FieldByID(id); ok && f.Profiling {
				profiling = true
			}
		}
	}
	if !profiling {
		return nil
	}
	var fail error
	switch l.m.spec.DCGM.Profiling {
	case "unsupported":
		fail = dcgmFail("WatchFieldsWithGroupEx", gpu.StProfilingNotSupported)
	case "requires_root":
		// Hopper and later profile through GPM (DcgmCacheManager.cpp
		// ~3674, EntityPairSupportsGpm): no root needed.
		if l.m.preHopper(entities) {
			fail = dcgmFail("WatchFieldsWithGroupEx", gpu.StRequiresRoot)
		}
	case "held":
		// Another DCGM (the GPU Operator's dcgm-exporter or
		// nv-hostengine) holds the profiling hardware of a pre-Hopper
		// GPU: the profiling module fails with -37 (DCGM#106,
		// dcgm-exporter#148: "Error watching fields: The third-party
		// Profiling module returned an unrecoverable error"). GPM
		// has no such lock.
		if l.m.preHopper(entities) {
			fail = dcgmFail("WatchFieldsWithGroupEx", gpu.StProfilingLibraryError)
		}
	}
	if fail != nil {
		for _, k := range added {
			delete(c.watched, k)
		}
	}
	return fail
}

func (l dcgmLib) UpdateAllFields() error {
	_, unlock, err := l.call("UpdateAllFields")
	defer unlock()
	return err
}

// fieldType is each field's DCGM type (dcgm_fields.h).
func fieldType(id gpu.FieldID) byte {
	switch id {
	case gpu.FieldPowerUsage, gpu.FieldProfGrEngine, gpu.FieldProfSMActive, gpu.FieldProfTensor, gpu.FieldProfDRAMActive:
		return gpu.FieldTypeDouble
	case gpu.FieldName:
		return gpu.FieldTypeString
	}
	return gpu.FieldTypeInt64
}

// blank is a value with no sample: the type's blank and a status.
func blank(e gpu.EntityPair, id gpu.FieldID, status int) gpu.FieldValue {
	v := gpu.FieldValue{Entity: e, FieldID: id, Type: fieldType(id), Status: status}
	switch v.Type {
	case gpu.FieldTypeInt64:
		v.Int64 = gpu.Int64Blank
	case gpu.FieldTypeDouble:
		v.Float64 = gpu.FP64Blank
	default:
		v.String = "<<<NULL>>>"
	}
	return v
}

func sample(e gpu.EntityPair, id gpu.FieldID, x float64) gpu.FieldValue {
	v := gpu.FieldValue{Entity: e, FieldID: id, Type: fieldType(id), Status: gpu.StOK}
	if v.Type == gpu.FieldTypeDouble {
		v.Float64 = x
	} else {
		v.Int64 = int64(x)
	}
	return v
}

// EntitiesGetLatestValues answers from the watch cache (flags 0) or the
// driver (DCGM_FV_FLAG_LIVE_DATA, for the instance's name). Per value:
//   - a field not watched: blank, NOT_WATCHED; a watched field with no
//     sample yet (the last XID before the first XID): blank, NO_DATA
//     (GetLatestSample, DcgmCacheManager.cpp ~5116-5126);
//   - a lost GPU: blanks with status OK (~10107-10111);
//   - a GPU-level field on a GPU-instance entity: the parent GPU's value,
//     the watch translated to the GPU (~2330-2357);
//   - an entity ID no instance has any more: INSTANCE_NOT_FOUND.
func (l dcgmLib) EntitiesGetLatestValues(entities []gpu.EntityPair, fields []gpu.FieldID, flags uint) ([]gpu.FieldValue, error) {
	c, unlock, err := l.call("EntitiesGetLatestValues")
	defer unlock()
	if err != nil {
		return nil, err
	}
	if len(entities) == 0 || len(fields) == 0 {
		return nil, dcgmFail("EntitiesGetLatestValues", gpu.StBadParam) // go-dcgm fields.go:336-338, newBadParameterError
	}
	live := flags&gpu.FieldFlagLiveData != 0
	var out []gpu.FieldValue
	for _, e := range entities {
		for _, id := range fields {
			out = append(out, l.m.latest(c, e, id, live))
		}
	}
	return out, nil
}

func (m *Machine) latest(c *conn, e gpu.EntityPair, id gpu.FieldID, live bool) gpu.FieldValue {
	var g *GPUSpec
	var fields map[string]float64
	switch e.Group {
	case gpu.EntityGPU:
		var ok bool
		if g, ok = m.gpuByID(e.ID); !ok {
			return blank(e, id, gpu.StBadParam)
		}
		fields = g.Fields
	case gpu.EntityGPUInstance, gpu.EntityGPUCompute:
		pg, in, ok := m.instanceByEntity(e.ID)
		if !ok {
			return blank(e, id, stInstanceNotFound)
		}
		g = pg
		if id == gpu.FieldXIDErrors {
			// An XID that carries the instance's GPU- and
			// compute-instance IDs is stored on the compute
			// instance (DcgmCacheManager.cpp:7885-7888, :7556-7591);
			// the fake's instance XIDs all do.
			if e.Group == gpu.EntityGPUCompute {
				fields = in.spec.Fields
			} else {
				fields = nil
			}
			break
		}
		if id == gpu.FieldName {
			if live {
				return gpu.FieldValue{Entity: e, FieldID: id, Type: gpu.FieldTypeString, Status: gpu.StOK, String: dcgmProfileName(in.profile)}
			}
			return blank(e, id, gpu.StNotWatched)
		}
		fields = in.spec.Fields
		if f, ok := gpu.FieldByID(id); ok && !f.Instance {
			// Translated to the parent GPU: its watch, its value.
			fields = g.Fields
			if !live && !c.watched[watchKey{e, id}] && !c.watched[watchKey{gpu.EntityPair{Group: gpu.EntityGPU, ID: uint(g.Index)}, id}] {
				return blank(e, id, gpu.StNotWatched)
			}
			live = true // the watch check is done
		}
	default:
		return blank(e, id, gpu.StBadParam)
	}
	if !live && !c.watched[watchKey{e, id}] {
		return blank(e, id, gpu.StNotWatched)
	}
	if g.Lost {
		v := blank(e, id, gpu.StOK)
		return v
	}
	x, ok := value(fields, id)
	if !ok {
		return blank(e, id, gpu.StNoData)
	}
	v := sample(e, id, x)
	v.TS = int64(m.step)
	if id == gpu.FieldXIDErrors {
		v.TS = m.xidAt[xidKey(g, e)]
	}
	return v
}

// xidKey names the entity an XID sample belongs to: the GPU, or the
// instance of a GPU-instance or compute-instance entity.
func xidKey(g *GPUSpec, e gpu.EntityPair) string {
	if e.Group == gpu.EntityGPU {
		return g.UUID
	}
	return fmt.Sprintf("%s/%d", g.UUID, e.ID%maxMigDevices)
}
