package gpu

// Reading the DCGM session's watched values into entities: latest
// values per GPU and instance, decoded, with the raw values kept.

import (
	"strconv"
	"time"
)

func (s *dcgmSession) read() (*Reading, error) {
	h, err := s.lib.GetGPUInstanceHierarchy()
	if err != nil {
		return nil, dcgmErr("dcgm GPU instance hierarchy", err)
	}
	if key := hierarchyKey(h); key != s.hierarchy {
		s.opts.logger().Info("MIG configuration changed; watching the new GPU instances", "instances", len(h))
		if err := s.rewatch(h); err != nil {
			s.hierarchy = "" // set up again on the next read
			return nil, err
		}
	} else if !s.profStatus.Watched && len(s.profFields) > 0 && !s.opts.now().Before(s.profRetryAt) {
		if err := s.watchProfiling(strconv.FormatInt(time.Now().UnixNano(), 36)); err != nil {
			return nil, err
		}
	}
	if s.nv != nil {
		s.nv.refreshMIG()
	}
	r := &Reading{Source: SourceDCGM, Groups: []GroupStatus{{Name: GroupBasic, Watched: true}, s.profStatus}}
	gpuPairs := make([]EntityPair, len(s.gpus))
	for i, g := range s.gpus {
		gpuPairs[i] = EntityPair{Group: EntityGPU, ID: g.id}
	}
	gpuValues, err := s.values(gpuPairs, s.gpuFields)
	if err != nil {
		return nil, err
	}
	byGPU := map[uint]*Entity{}
	for _, g := range s.gpus {
		e := s.gpuEntity(g, gpuValues[g.id])
		r.Entities = append(r.Entities, e)
		byGPU[g.id] = &r.Entities[len(r.Entities)-1]
	}
	if s.nv != nil {
		// DCGM lists only the GPUs it can use; one NVML counts but
		// cannot open is reported lost under its known UUID.
		r.Entities = append(r.Entities, s.nv.unusableEntities(func(uuid string) bool {
			for _, g := range s.gpus {
				if g.uuid == uuid {
					return true
				}
			}
			return false
		})...)
	}
	if len(s.instances) > 0 {
		pairs := make([]EntityPair, len(s.instances))
		for i, in := range s.instances {
			pairs[i] = EntityPair{Group: EntityGPUInstance, ID: in.entity}
		}
		instValues, err := s.values(pairs, s.instFields)
		if err != nil {
			return nil, err
		}
		if err := s.computeXIDs(instValues); err != nil {
			return nil, err
		}
		for _, in := range s.instances {
			parent := byGPU[in.gpuID]
			if parent == nil {
				continue
			}
			if e, ok := s.instanceEntity(in, parent, instValues[in.entity]); ok {
				r.Entities = append(r.Entities, e)
			}
		}
	}
	return r, nil
}

// computeXIDs adds the last XID of each GPU instance's compute instances to
// the instance's values, keyed by the GPU-instance entity: fill keeps the
// latest of them.
func (s *dcgmSession) computeXIDs(instValues map[uint][]FieldValue) error {
	if len(s.computes) == 0 {
		return nil
	}
	pairs := make([]EntityPair, 0, len(s.computes))
	for ci := range s.computes {
		pairs = append(pairs, EntityPair{Group: EntityGPUCompute, ID: ci})
	}
	values, err := s.values(pairs, []FieldID{FieldXIDErrors})
	if err != nil {
		return err
	}
	for ci, vs := range values {
		gi := s.computes[ci]
		instValues[gi] = append(instValues[gi], vs...)
	}
	return nil
}

// values reads the latest value of fields for entities, by entity ID.
func (s *dcgmSession) values(pairs []EntityPair, fields []FieldID) (map[uint][]FieldValue, error) {
	if len(pairs) == 0 || len(fields) == 0 {
		return nil, nil
	}
	values, err := s.lib.EntitiesGetLatestValues(pairs, fields, 0)
	if err != nil {
		return nil, dcgmErr("dcgm latest values", err)
	}
	out := make(map[uint][]FieldValue, len(pairs))
	for _, v := range values {
		out[v.Entity.ID] = append(out[v.Entity.ID], v)
	}
	return out, nil
}

func (s *dcgmSession) gpuEntity(g dcgmGPU, values []FieldValue) Entity {
	e := Entity{UUID: g.uuid, Product: g.model, Index: int(g.id), Minor: -1, Values: map[FieldID]float64{}}
	if s.nv != nil {
		if ng := s.nv.gpu(g.uuid); ng != nil {
			e.Index, e.Minor = ng.index, ng.minor
			if !ng.mig {
				e.Processes, _ = processes(ng.dev)
			}
		}
	}
	any := s.fill(&e, values, true)
	// A lost GPU (XID 79) answers blanks with status OK
	// (DcgmCacheManager.cpp ~10107-10111); its status says so.
	if !any && s.lib.GetGPUStatus(g.id) == EntityStatusLost {
		e.Lost = true
		e.Values = map[FieldID]float64{}
	}
	return e
}

// instanceEntity names a GPU instance by the MIG device NVML lists for its
// parent and GPU instance ID; without one (NVML unavailable, or the
// instance was destroyed between the two reads) it has no UUID and is
// left out.
func (s *dcgmSession) instanceEntity(in dcgmInstance, parent *Entity, values []FieldValue) (Entity, bool) {
	if s.nv == nil {
		return Entity{}, false
	}
	ng := s.nv.gpu(parent.UUID)
	if ng == nil {
		return Entity{}, false
	}
	for j, m := range ng.instances {
		if m.gi != int(in.nvmlInstanceID) {
			continue
		}
		profile := m.profile
		if profile == "" {
			profile = in.dcgmName
		}
		e := Entity{UUID: m.uuid, ParentUUID: parent.UUID, Product: parent.Product, Index: parent.Index, Minor: parent.Minor,
			MIG: &MIGInstance{GPUInstanceID: m.gi, Profile: profile, PlacementStart: m.placement, DeviceIndex: j}, Values: map[FieldID]float64{}, Lost: parent.Lost}
		e.Processes, _ = processes(m.dev)
		s.fill(&e, values, false)
		if e.Lost {
			e.Values = map[FieldID]float64{}
		}
		return e, true
	}
	return Entity{}, false
}

// fill stores the values of an entity, and reports whether any was not
// blank. A blank (status NO_DATA, or a blank sentinel) is no value, except
// the last XID: DCGM has no sample of it until the first XID since the
// driver loaded (GetLatestSample, DcgmCacheManager.cpp ~5116-5126), which
// is what 0 says. Board fields are never stored on an instance.
func (s *dcgmSession) fill(e *Entity, values []FieldValue, gpu bool) bool {
	any := false
	// An instance's XID comes from its GPU-instance entity and each of
	// its compute instances: the latest sample wins.
	var xidTS int64 = -1
	for _, v := range values {
		f, ok := FieldByID(v.FieldID)
		if !ok || (!gpu && !f.Instance) {
			continue
		}
		x, present := decode(v)
		if s.opts.Raw {
			e.Raw = append(e.Raw, rawOf(f, v))
		}
		if present {
			if f.ID == FieldXIDErrors {
				if v.TS < xidTS {
					continue
				}
				xidTS = v.TS
			}
			e.Values[f.ID] = x
			any = true
			continue
		}
		if _, seen := e.Values[f.ID]; f.ID == FieldXIDErrors && !seen && (v.Status == StNoData || (v.Status == StOK && v.Int64 == Int64Blank)) {
			e.Values[f.ID] = 0
		}
	}
	return any
}

// decode returns a value that is not blank.
func decode(v FieldValue) (float64, bool) {
	if v.Status != StOK {
		return 0, false
	}
	switch v.Type {
	case FieldTypeInt64:
		if v.Int64 >= Int64Blank {
			return 0, false
		}
		return float64(v.Int64), true
	case FieldTypeDouble:
		if v.Float64 >= FP64Blank {
			return 0, false
		}
		return v.Float64, true
	}
	return 0, false
}

var dcgmStatusNames = map[int]string{
	StOK: "OK", StNotSupported: "NOT_SUPPORTED", StTimeout: "TIMEOUT", StNoData: "NO_DATA", StNotWatched: "NOT_WATCHED",
	StNoPermission: "NO_PERMISSION", StGPUIsLost: "GPU_IS_LOST", StConnectionNotValid: "CONNECTION_NOT_VALID",
	StRequiresRoot: "REQUIRES_ROOT", StInUse: "IN_USE", StProfilingNotSupported: "PROFILING_NOT_SUPPORTED",
}

func rawOf(f Field, v FieldValue) RawValue {
	status, ok := dcgmStatusNames[v.Status]
	if !ok {
		status = strconv.Itoa(v.Status)
	}
	out := RawValue{Field: f.Name, Status: status}
	switch v.Type {
	case FieldTypeInt64:
		out.Type = "int64"
		out.Value = strconv.FormatInt(v.Int64, 10)
		if v.Int64 >= Int64Blank {
			out.Value = "blank(" + out.Value + ")"
		}
	case FieldTypeDouble:
		out.Type = "double"
		out.Value = strconv.FormatFloat(v.Float64, 'g', -1, 64)
		if v.Float64 >= FP64Blank {
			out.Value = "blank(" + out.Value + ")"
		}
	default:
		out.Type = string(rune(v.Type))
		out.Value = v.String
	}
	return out
}
