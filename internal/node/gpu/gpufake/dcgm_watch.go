package gpufake

// The simulated DCGM's groups, field groups and watches, as DCGM checks
// them (profiling fields per GPU generation).

import (
	"errors"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

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
