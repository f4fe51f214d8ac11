//go:build cgo

package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DCGMAvailable says whether this build links go-dcgm (cgo builds do).
const DCGMAvailable = true

// fp64Blank is DCGM_FP64_BLANK: DCGM's "no value" for a double field; every
// larger value is a sentinel too (not found, not supported, not permitted).
const fp64Blank = 140737488355328.0

// DCGM reads field values from DCGM (embedded host engine, or a standalone
// nv-hostengine) and the compute processes from NVML: go-dcgm v1.4611.0 has
// no call that lists the running processes (GetProcessInfo needs a PID and
// reports accounting, not the live list), while NVML's
// nvmlDeviceGetComputeRunningProcesses lists PID, used memory and GPU
// instance for every process, MIG instances included.
type DCGM struct {
	mu       sync.Mutex
	cleanup  func()
	group    dcgm.GroupHandle
	fields   dcgm.FieldHandle
	entities []dcgm.GroupEntityPair
	// entity describes each DCGM entity (GPU or GPU instance).
	entity map[dcgm.GroupEntityPair]Entity
	nvmlOK bool
}

// NewDCGM starts DCGM: embedded when hostengine is empty, otherwise
// connected to the nv-hostengine at that address (host:port or a socket).
// It fails when libdcgm cannot be loaded; the caller keeps serving the
// Kubernetes series and reports the source down.
func NewDCGM(hostengine string) (src *DCGM, err error) {
	defer func() {
		// go-dcgm calls into C; a broken library must not crash the agent.
		if r := recover(); r != nil {
			src, err = nil, fmt.Errorf("dcgm init: panic: %v", r)
		}
	}()
	var cleanup func()
	if hostengine == "" {
		cleanup, err = dcgm.Init(dcgm.Embedded)
	} else {
		cleanup, err = dcgm.Init(dcgm.Standalone, hostengine, "0")
	}
	if err != nil {
		return nil, fmt.Errorf("dcgm init: %w", err)
	}
	d := &DCGM{cleanup: cleanup, entity: map[dcgm.GroupEntityPair]Entity{}}
	if err := d.discover(); err != nil {
		cleanup()
		return nil, err
	}
	d.nvmlOK = nvml.Init() == nvml.SUCCESS
	return d, nil
}

func (d *DCGM) discover() error {
	gpus, err := dcgm.GetSupportedDevices()
	if err != nil {
		return fmt.Errorf("dcgm devices: %w", err)
	}
	group, err := dcgm.CreateGroup(fmt.Sprintf("dra-exporter-%d", time.Now().UnixNano()))
	if err != nil {
		return fmt.Errorf("dcgm group: %w", err)
	}
	d.group = group
	byIndex := map[uint]Entity{}
	for _, id := range gpus {
		info, err := dcgm.GetDeviceInfo(id)
		if err != nil {
			return fmt.Errorf("dcgm device %d: %w", id, err)
		}
		e := Entity{UUID: info.UUID, Product: info.Identifiers.Model, Index: int(id)}
		pair := dcgm.GroupEntityPair{EntityGroupId: dcgm.FE_GPU, EntityId: id}
		if err := dcgm.AddEntityToGroup(group, dcgm.FE_GPU, id); err != nil {
			return fmt.Errorf("dcgm group add gpu %d: %w", id, err)
		}
		d.entities = append(d.entities, pair)
		d.entity[pair] = e
		byIndex[id] = e
	}
	hierarchy, err := dcgm.GetGPUInstanceHierarchy()
	if err == nil {
		for i := uint(0); i < hierarchy.Count; i++ {
			h := hierarchy.EntityList[i]
			if h.Entity.EntityGroupId != dcgm.FE_GPU_I {
				continue
			}
			parent := byIndex[h.Info.NvmlGpuIndex]
			e := Entity{
				ParentUUID: parent.UUID, Product: parent.Product, Index: parent.Index,
				MIG: &MIGInstance{GPUInstanceID: int(h.Info.NvmlInstanceId)},
			}
			if err := dcgm.AddEntityToGroup(group, dcgm.FE_GPU_I, h.Entity.EntityId); err != nil {
				return fmt.Errorf("dcgm group add gpu instance %d: %w", h.Entity.EntityId, err)
			}
			d.entities = append(d.entities, h.Entity)
			d.entity[h.Entity] = e
		}
	}
	ids := make([]dcgm.Short, len(Fields))
	for i, f := range Fields {
		ids[i] = dcgm.Short(f.ID)
	}
	fg, err := dcgm.FieldGroupCreate(fmt.Sprintf("dra-exporter-%d", time.Now().UnixNano()), ids)
	if err != nil {
		return fmt.Errorf("dcgm field group: %w", err)
	}
	d.fields = fg
	// Once a second, keeping a minute: profiling fields need the watch.
	if err := dcgm.WatchFieldsWithGroupEx(fg, group, int64(time.Second/time.Microsecond), 60, 0); err != nil {
		return fmt.Errorf("dcgm watch: %w", err)
	}
	return nil
}

// Name implements Source.
func (d *DCGM) Name() string { return "dcgm" }

// Read implements Source.
func (d *DCGM) Read(context.Context) (r *Reading, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("dcgm read: panic: %v", p)
		}
	}()
	if len(d.entities) == 0 {
		return &Reading{}, nil
	}
	ids := make([]dcgm.Short, len(Fields))
	for i, f := range Fields {
		ids[i] = dcgm.Short(f.ID)
	}
	values, err := dcgm.EntitiesGetLatestValues(d.entities, ids, 0)
	if err != nil {
		return nil, fmt.Errorf("dcgm latest values: %w", err)
	}
	out := map[dcgm.GroupEntityPair]*Entity{}
	order := make([]*Entity, 0, len(d.entities))
	for _, pair := range d.entities {
		e := d.entity[pair]
		e.Values = map[FieldID]float64{}
		out[pair] = &e
		order = append(order, &e)
	}
	for _, v := range values {
		e := out[dcgm.GroupEntityPair{EntityGroupId: v.EntityGroupId, EntityId: v.EntityID}]
		if e == nil || v.Status != 0 {
			continue
		}
		switch v.FieldType {
		case dcgm.DCGM_FT_INT64:
			if x := v.Int64(); !dcgm.IsInt64Blank(x) {
				e.Values[FieldID(v.FieldID)] = float64(x)
			}
		case dcgm.DCGM_FT_DOUBLE:
			if x := v.Float64(); x < fp64Blank {
				e.Values[FieldID(v.FieldID)] = x
			}
		}
	}
	if d.nvmlOK {
		d.addNVML(order)
	}
	r = &Reading{}
	for _, e := range order {
		if e.UUID != "" {
			r.Entities = append(r.Entities, *e)
		}
	}
	return r, nil
}

// addNVML fills MIG UUIDs, profiles and placements and the process lists.
// NVML lists a MIG-enabled GPU's processes on the parent, each with its GPU
// instance ID.
func (d *DCGM) addNVML(entities []*Entity) {
	migs := map[string]map[int]*Entity{}
	for _, e := range entities {
		if e.MIG != nil {
			if migs[e.ParentUUID] == nil {
				migs[e.ParentUUID] = map[int]*Entity{}
			}
			migs[e.ParentUUID][e.MIG.GPUInstanceID] = e
		}
	}
	for _, e := range entities {
		if e.MIG != nil {
			continue
		}
		dev, ret := nvml.DeviceGetHandleByUUID(e.UUID)
		if ret != nvml.SUCCESS {
			continue
		}
		if n, ret := dev.GetMaxMigDeviceCount(); ret == nvml.SUCCESS {
			for i := 0; i < n; i++ {
				mig, ret := dev.GetMigDeviceHandleByIndex(i)
				if ret != nvml.SUCCESS {
					continue
				}
				gi, ret := mig.GetGpuInstanceId()
				if ret != nvml.SUCCESS || migs[e.UUID][gi] == nil {
					continue
				}
				m := migs[e.UUID][gi]
				if uuid, ret := mig.GetUUID(); ret == nvml.SUCCESS {
					m.UUID = uuid
				}
				if attrs, ret := mig.GetAttributes(); ret == nvml.SUCCESS {
					m.MIG.Profile = fmt.Sprintf("%dg.%dgb", attrs.GpuInstanceSliceCount, (attrs.MemorySizeMB+1023)/1024)
				}
				if inst, ret := dev.GetGpuInstanceById(gi); ret == nvml.SUCCESS {
					if info, ret := inst.GetInfo(); ret == nvml.SUCCESS {
						m.MIG.PlacementStart = int(info.Placement.Start)
					}
				}
			}
		}
		procs, ret := dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			continue
		}
		for _, p := range procs {
			proc := Process{PID: int(p.Pid), UsedMemoryBytes: float64(p.UsedGpuMemory)}
			if m := migs[e.UUID][int(p.GpuInstanceId)]; m != nil && len(migs[e.UUID]) > 0 {
				m.Processes = append(m.Processes, proc)
				continue
			}
			e.Processes = append(e.Processes, proc)
		}
	}
}

// Close implements Source.
func (d *DCGM) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.nvmlOK {
		nvml.Shutdown()
	}
	if d.cleanup != nil {
		d.cleanup()
		d.cleanup = nil
	}
	return nil
}
