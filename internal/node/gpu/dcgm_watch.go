package gpu

// What the DCGM session watches: the field groups of GPUs and MIG
// instances, rewatched when the MIG hierarchy changes, profiling fields
// where the GPU supports them (retried after a failure).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
