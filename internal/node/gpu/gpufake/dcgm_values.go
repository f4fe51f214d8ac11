package gpufake

// The simulated DCGM's latest values: samples and blanks per field type.

import (
	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

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
