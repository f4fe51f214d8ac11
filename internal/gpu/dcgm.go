package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// dcgmSession is one connection to DCGM (an embedded host engine, or a
// standalone nv-hostengine) with its groups and watches, plus NVML for
// what DCGM does not give: MIG instances' UUIDs and the process list
// (go-dcgm has no call that lists running processes).
//
// The basic fields and the profiling fields are watched in separate
// requests, on separate entity groups for GPUs and GPU instances: when a
// watch request fails the host engine undoes every watch of that request
// (DcgmHostEngineHandler.cpp ~4668 and ~4691), so a profiling field that
// cannot be watched (no CAP_SYS_ADMIN before Hopper, another client
// holding the profiling lock) must not share a request with the basic
// fields. Which profiling fields to ask for comes from
// GetSupportedMetricGroups, as dcgm-exporter does (pkg/cmd/app.go
// ~957-997, counter_config.go ~146-161).
type dcgmSession struct {
	lib     DCGMLib
	nv      *nvmlView // nil: NVML unavailable
	cleanup func()
	opts    Options

	gpus      []dcgmGPU
	instances []dcgmInstance
	// computes maps each compute-instance entity to its GPU-instance
	// entity: DCGM records an XID that carries compute-instance and
	// GPU-instance IDs on the compute instance, one that carries a
	// GPU-instance ID only on the GPU instance, and only one that
	// carries neither on the GPU (DcgmCacheManager.cpp:7874-7893,
	// RecordXidForComputeInstance :7556-7591, RecordXidForGpuInstance
	// :7594-7625); XID's entity level is the compute instance
	// (dcgm_fields.cpp:2323-2331), so it is the instance's own.
	computes map[uint]uint
	// hierarchy identifies the GPU-instance hierarchy the watches were
	// set up for: DCGM renumbers GPU-instance entities on every MIG
	// reconfiguration (DcgmCacheManager.cpp ~943), so a change means new
	// groups and watches, and entities are keyed by UUID, never by
	// entity number.
	hierarchy string

	groups      []GroupHandle
	fieldGroups []FieldHandle
	gpuGroup    GroupHandle
	instGroup   GroupHandle
	hasInst     bool

	// profFields are the profiling fields every GPU supports.
	profFields  []FieldID
	profStatus  GroupStatus
	profRetryAt time.Time
	profFG      FieldHandle
	hasProfFG   bool

	gpuFields, instFields []FieldID
}

type dcgmGPU struct {
	id          uint
	uuid, model string
}

type dcgmInstance struct {
	entity, gpuID  uint
	parentUUID     string
	nvmlInstanceID uint
	// dcgmName is DCGM's name of the instance's profile
	// (DCGM_FI_DEV_NAME), used when NVML cannot name it.
	dcgmName string
}

// errConnectionLost marks a read whose DCGM connection is gone: the
// supervisor closes the session and connects again.
var errConnectionLost = errors.New("DCGM connection lost")

// dcgmErr wraps a DCGM error with what was being done, and marks the
// connection errors.
func dcgmErr(what string, err error) error {
	if dcgmStatus(err) == StConnectionNotValid {
		return fmt.Errorf("%s: %w: %w", what, errConnectionLost, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func openDCGMSession(lib DCGMLib, nvml NVMLLib, opts Options) (session, error) {
	if lib == nil {
		return nil, fmt.Errorf("dcgm: %w", ErrUnavailable)
	}
	cleanup, err := lib.Init(opts.HostEngine)
	if err != nil {
		if opts.HostEngine == "" && dcgmStatus(err) == StInitError && nvmlHasMIG(nvml, opts) {
			return nil, fmt.Errorf("dcgm init: %w: %w", errEmbeddedMIG, err)
		}
		return nil, fmt.Errorf("dcgm init: %w", err)
	}
	s := &dcgmSession{lib: lib, cleanup: cleanup, opts: opts}
	if s.nv, err = openNVML(nvml, opts); err != nil {
		opts.logger().Warn("DCGM serves without NVML", "err", err, "effect", errNoNVML.Error())
		s.nv = nil
	}
	if err := s.discover(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// nvmlHasMIG reports whether NVML sees a GPU with MIG mode on (any caller
// may read the mode).
func nvmlHasMIG(lib NVMLLib, opts Options) bool {
	v, err := openNVML(lib, opts)
	if err != nil {
		return false
	}
	defer v.close()
	for _, g := range v.gpus {
		if current, _, ret := g.dev.GetMigMode(); ret == NVMLSuccess && current == nvmlDeviceMigEnable {
			return true
		}
	}
	return false
}

func (s *dcgmSession) name() string { return SourceDCGM }

func (s *dcgmSession) close() {
	s.unwatch()
	if s.nv != nil {
		s.nv.close()
	}
	if s.cleanup != nil {
		s.cleanup()
		s.cleanup = nil
	}
}

// discover reads the GPUs, which profiling fields they support, and the
// GPU-instance hierarchy, and sets up the watches.
func (s *dcgmSession) discover() error {
	ids, err := s.lib.GetSupportedDevices()
	if err != nil {
		return dcgmErr("dcgm devices", err)
	}
	s.gpus = s.gpus[:0]
	for _, id := range ids {
		info, err := s.lib.GetDeviceInfo(id)
		if err != nil {
			return dcgmErr(fmt.Sprintf("dcgm device %d", id), err)
		}
		s.gpus = append(s.gpus, dcgmGPU{id: id, uuid: info.UUID, model: info.Model})
	}
	s.profFields, s.profStatus = s.supportedProfiling()
	h, err := s.lib.GetGPUInstanceHierarchy()
	if err != nil {
		return dcgmErr("dcgm GPU instance hierarchy", err)
	}
	return s.rewatch(h)
}

// supportedProfiling returns the profiling fields of Fields that every
// GPU supports.
func (s *dcgmSession) supportedProfiling() ([]FieldID, GroupStatus) {
	want := fieldIDs(func(f Field) bool { return f.Profiling })
	st := GroupStatus{Name: GroupProfiling}
	if len(s.gpus) == 0 {
		st.Reason = ReasonUnsupported
		return nil, st
	}
	for _, g := range s.gpus {
		groups, err := s.lib.GetSupportedMetricGroups(g.id)
		if err != nil {
			st.Reason = unwatchedReason(err)
			return nil, st
		}
		var supported []FieldID
		for _, mg := range groups {
			for _, id := range mg.FieldIDs {
				supported = append(supported, FieldID(id))
			}
		}
		want = slices.DeleteFunc(want, func(id FieldID) bool { return !slices.Contains(supported, id) })
	}
	if len(want) == 0 {
		st.Reason = ReasonUnsupported
	}
	return want, st
}

// unwatchedReason classifies a failed profiling query or watch by its
// DCGM status: GetSupportedMetricGroups carries a code, the watch's
// plain text names it (dcgmStatus).
func unwatchedReason(err error) string {
	switch dcgmStatus(err) {
	case StNotSupported, StProfilingNotSupported, StModuleNotLoaded:
		return ReasonUnsupported
	case StNoPermission, StRequiresRoot:
		return ReasonNoPermission
	case StProfilingLibraryError:
		return ReasonProfilingModule
	}
	return ReasonFailed
}

func hierarchyKey(h []MigHierarchyInfo) string {
	parts := make([]string, 0, len(h))
	for _, e := range h {
		parts = append(parts, fmt.Sprintf("%d:%d:%d:%d:%d:%s", e.Entity.Group, e.Entity.ID, e.Parent.Group, e.Parent.ID, e.NvmlInstanceID, e.ParentUUID))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// unwatch destroys the session's groups and field groups (their watches
// go with them).
func (s *dcgmSession) unwatch() {
	for _, g := range s.groups {
		_ = s.lib.DestroyGroup(g)
	}
	for _, fg := range s.fieldGroups {
		_ = s.lib.FieldGroupDestroy(fg)
	}
	s.groups, s.fieldGroups, s.hasInst, s.hasProfFG = nil, nil, false, false
}

// rewatch sets up groups and watches for the GPUs and this hierarchy's GPU
// instances.
func (s *dcgmSession) rewatch(h []MigHierarchyInfo) error {
	s.unwatch()
	s.hierarchy = hierarchyKey(h)
	s.instances = s.instances[:0]
	s.computes = map[uint]uint{}
	for _, e := range h {
		if e.Entity.Group == EntityGPUCompute && e.Parent.Group == EntityGPUInstance {
			s.computes[e.Entity.ID] = e.Parent.ID
			continue
		}
		if e.Entity.Group != EntityGPUInstance || e.Parent.Group != EntityGPU {
			continue
		}
		s.instances = append(s.instances, dcgmInstance{entity: e.Entity.ID, gpuID: e.Parent.ID, parentUUID: e.ParentUUID, nvmlInstanceID: e.NvmlInstanceID})
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	var err error
	if s.gpuGroup, err = s.newGroup("dra-exporter-gpus-"+stamp, EntityGPU, s.gpuIDs()); err != nil {
		return err
	}
	if err := s.watch("dra-exporter-basic-"+stamp, gpuBasic(), s.gpuGroup); err != nil {
		return err
	}
	s.gpuFields = gpuBasic()
	s.instFields = nil
	if len(s.instances) > 0 {
		ids := make([]uint, len(s.instances))
		for i, in := range s.instances {
			ids[i] = in.entity
		}
		if s.instGroup, err = s.newGroup("dra-exporter-instances-"+stamp, EntityGPUInstance, ids); err != nil {
			return err
		}
		s.hasInst = true
		if err := s.watch("dra-exporter-instance-basic-"+stamp, instanceBasic(), s.instGroup); err != nil {
			return err
		}
		s.instFields = instanceBasic()
		s.nameInstances()
	}
	if len(s.computes) > 0 {
		ids := make([]uint, 0, len(s.computes))
		for ci := range s.computes {
			ids = append(ids, ci)
		}
		slices.Sort(ids)
		g, err := s.newGroup("dra-exporter-compute-instances-"+stamp, EntityGPUCompute, ids)
		if err != nil {
			return err
		}
		if err := s.watch("dra-exporter-compute-xid-"+stamp, []FieldID{FieldXIDErrors}, g); err != nil {
			return err
		}
	}
	s.profStatus.Watched = false
	if len(s.profFields) > 0 {
		if err := s.watchProfiling(stamp); err != nil {
			return err
		}
	}
	// Wait for a first sample of every watched field (dcgmUpdateAllFields
	// with wait=1), so that the first read is complete.
	if err := s.lib.UpdateAllFields(); err != nil && dcgmStatus(err) == StConnectionNotValid {
		return dcgmErr("dcgm update", err)
	}
	return nil
}

func (s *dcgmSession) gpuIDs() []uint {
	ids := make([]uint, len(s.gpus))
	for i, g := range s.gpus {
		ids[i] = g.id
	}
	return ids
}

func (s *dcgmSession) newGroup(name string, eg EntityGroup, ids []uint) (GroupHandle, error) {
	g, err := s.lib.CreateGroup(name)
	if err != nil {
		return 0, dcgmErr("dcgm group", err)
	}
	s.groups = append(s.groups, g)
	for _, id := range ids {
		if err := s.lib.AddEntityToGroup(g, eg, id); err != nil {
			return 0, dcgmErr(fmt.Sprintf("dcgm group add entity %d/%d", eg, id), err)
		}
	}
	return g, nil
}

// The watch keeps samples at this frequency for a minute; ratios
// (utilisation, profiling) cover the update period.
const (
	watchMaxAge     = 60.0
	watchMaxSamples = 0
)

func (s *dcgmSession) watch(name string, ids []FieldID, group GroupHandle) error {
	fg, err := s.lib.FieldGroupCreate(name, ids)
	if err != nil {
		return dcgmErr("dcgm field group", err)
	}
	s.fieldGroups = append(s.fieldGroups, fg)
	if err := s.lib.WatchFieldsWithGroupEx(fg, group, s.opts.updateInterval().Microseconds(), watchMaxAge, watchMaxSamples); err != nil {
		return dcgmErr("dcgm watch "+name, err)
	}
	return nil
}

// watchProfiling watches the profiling fields in requests of their own. A
// failure leaves the basic watches in place and is reported as the
// profiling group's status; it is tried again later (the lock's holder
// may go away). Only a lost connection is an error.
func (s *dcgmSession) watchProfiling(stamp string) error {
	if !s.hasProfFG {
		fg, err := s.lib.FieldGroupCreate("dra-exporter-profiling-"+stamp, s.profFields)
		if err != nil {
			return s.profilingFailed(err)
		}
		s.fieldGroups = append(s.fieldGroups, fg)
		s.profFG, s.hasProfFG = fg, true
	}
	groups := []GroupHandle{s.gpuGroup}
	if s.hasInst {
		groups = append(groups, s.instGroup)
	}
	for _, g := range groups {
		if err := s.lib.WatchFieldsWithGroupEx(s.profFG, g, s.opts.updateInterval().Microseconds(), watchMaxAge, watchMaxSamples); err != nil {
			return s.profilingFailed(err)
		}
	}
	s.profStatus = GroupStatus{Name: GroupProfiling, Watched: true}
	s.gpuFields = append(gpuBasic(), s.profFields...)
	if s.hasInst {
		s.instFields = append(instanceBasic(), s.profFields...)
	}
	return nil
}

// gpuBasic are the basic fields of a GPU.
func gpuBasic() []FieldID { return fieldIDs(func(f Field) bool { return !f.Profiling }) }

// instanceBasic are the basic fields of a GPU instance: its own only, since
// a board field on a GPU-instance entity answers the parent's value.
func instanceBasic() []FieldID {
	return fieldIDs(func(f Field) bool { return f.Instance && !f.Profiling })
}

// profRetry is how long an unwatched profiling group waits before it is
// tried again.
const profRetry = 5 * time.Minute

func (s *dcgmSession) profilingFailed(err error) error {
	if dcgmStatus(err) == StConnectionNotValid {
		return dcgmErr("dcgm profiling watch", err)
	}
	reason := unwatchedReason(err)
	if s.profStatus.Reason != reason {
		s.opts.logger().Warn("DCGM profiling fields not watched; the basic fields are", "reason", reason, "err", err)
	}
	s.profStatus = GroupStatus{Name: GroupProfiling, Reason: reason}
	s.profRetryAt = s.opts.now().Add(profRetry)
	return nil
}

// nameInstances reads DCGM's name of each instance's profile (live), the
// fallback where NVML cannot name it.
func (s *dcgmSession) nameInstances() {
	pairs := make([]EntityPair, len(s.instances))
	for i, in := range s.instances {
		pairs[i] = EntityPair{Group: EntityGPUInstance, ID: in.entity}
	}
	values, err := s.lib.EntitiesGetLatestValues(pairs, []FieldID{FieldName}, FieldFlagLiveData)
	if err != nil {
		return
	}
	for _, v := range values {
		if v.Status != StOK || v.Type != FieldTypeString || strings.HasPrefix(v.String, "<<<") {
			continue
		}
		for i := range s.instances {
			if s.instances[i].entity == v.Entity.ID {
				s.instances[i].dcgmName = v.String
			}
		}
	}
}

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
