//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-dcgm/pkg/dcgm"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The binding: each method is one call of go-dcgm or go-nvml with its
// values converted, nothing more. The logic it serves is cgo-free and
// tested on internal/node/gpu/gpufake.

// CGO says whether this build links go-dcgm and go-nvml.
const CGO = true

// Libraries returns the real libraries. Both load their C library
// (libdcgm.so.4, libnvidia-ml.so.1) at run time, when first used.
func Libraries() (DCGMLib, NVMLLib) { return dcgmBinding{}, nvmlBinding{} }

type dcgmBinding struct{}

func convertDCGMError(err error) error {
	var de *dcgm.Error
	if errors.As(err, &de) {
		return &DCGMError{Code: int(de.Code), Msg: de.Error()}
	}
	return err
}

func (dcgmBinding) Init(address string) (cleanup func(), err error) {
	defer func() {
		// A broken libdcgm must not crash the agent.
		if r := recover(); r != nil {
			cleanup, err = nil, fmt.Errorf("dcgm init: panic: %v", r)
		}
	}()
	switch {
	case address == "":
		cleanup, err = dcgm.Init(dcgm.Embedded)
	case strings.Contains(address, "://"):
		cleanup, err = dcgm.Init(dcgm.Standalone, address)
	default:
		cleanup, err = dcgm.Init(dcgm.Standalone, address, "0")
	}
	return cleanup, convertDCGMError(err)
}

func (dcgmBinding) GetSupportedDevices() ([]uint, error) {
	ids, err := dcgm.GetSupportedDevices()
	return ids, convertDCGMError(err)
}

func (dcgmBinding) GetDeviceInfo(id uint) (DCGMDevice, error) {
	d, err := dcgm.GetDeviceInfo(id)
	return DCGMDevice{GPU: d.GPU, UUID: d.UUID, Model: d.Identifiers.Model}, convertDCGMError(err)
}

func (dcgmBinding) GetGPUStatus(id uint) EntityStatus { return EntityStatus(dcgm.GetGPUStatus(id)) }

func (dcgmBinding) GetGPUInstanceHierarchy() ([]MigHierarchyInfo, error) {
	h, err := dcgm.GetGPUInstanceHierarchy()
	if err != nil {
		return nil, convertDCGMError(err)
	}
	out := make([]MigHierarchyInfo, 0, h.Count)
	for i := uint(0); i < h.Count && i < uint(len(h.EntityList)); i++ {
		e := h.EntityList[i]
		out = append(out, MigHierarchyInfo{
			Entity:     EntityPair{Group: EntityGroup(e.Entity.EntityGroupId), ID: e.Entity.EntityId},
			Parent:     EntityPair{Group: EntityGroup(e.Parent.EntityGroupId), ID: e.Parent.EntityId},
			ParentUUID: e.Info.GpuUuid, NvmlGpuIndex: e.Info.NvmlGpuIndex, NvmlInstanceID: e.Info.NvmlInstanceId, NvmlProfileID: e.Info.NvmlMigProfileId,
		})
	}
	return out, nil
}

func (dcgmBinding) GetSupportedMetricGroups(id uint) ([]MetricGroup, error) {
	groups, err := dcgm.GetSupportedMetricGroups(id)
	out := make([]MetricGroup, len(groups))
	for i, g := range groups {
		out[i] = MetricGroup{Major: g.Major, Minor: g.Minor, FieldIDs: g.FieldIds}
	}
	return out, convertDCGMError(err)
}

func (dcgmBinding) CreateGroup(name string) (GroupHandle, error) {
	g, err := dcgm.CreateGroup(name)
	return GroupHandle(g.GetHandle()), convertDCGMError(err)
}

func groupHandle(g GroupHandle) dcgm.GroupHandle {
	var h dcgm.GroupHandle
	h.SetHandle(uintptr(g))
	return h
}

func fieldHandle(f FieldHandle) dcgm.FieldHandle {
	var h dcgm.FieldHandle
	h.SetHandle(uintptr(f))
	return h
}

func (dcgmBinding) AddEntityToGroup(g GroupHandle, eg EntityGroup, id uint) error {
	return convertDCGMError(dcgm.AddEntityToGroup(groupHandle(g), dcgm.Field_Entity_Group(eg), id))
}

func (dcgmBinding) DestroyGroup(g GroupHandle) error {
	return convertDCGMError(dcgm.DestroyGroup(groupHandle(g)))
}

func shorts(ids []FieldID) []dcgm.Short {
	out := make([]dcgm.Short, len(ids))
	for i, id := range ids {
		out[i] = dcgm.Short(id)
	}
	return out
}

func (dcgmBinding) FieldGroupCreate(name string, ids []FieldID) (FieldHandle, error) {
	fg, err := dcgm.FieldGroupCreate(name, shorts(ids))
	return FieldHandle(fg.GetHandle()), convertDCGMError(err)
}

func (dcgmBinding) FieldGroupDestroy(fg FieldHandle) error {
	return convertDCGMError(dcgm.FieldGroupDestroy(fieldHandle(fg)))
}

func (dcgmBinding) WatchFieldsWithGroupEx(fg FieldHandle, g GroupHandle, freq int64, maxAge float64, maxSamples int32) error {
	return convertDCGMError(dcgm.WatchFieldsWithGroupEx(fieldHandle(fg), groupHandle(g), freq, maxAge, maxSamples))
}

func (dcgmBinding) UpdateAllFields() error { return convertDCGMError(dcgm.UpdateAllFields()) }

func (dcgmBinding) EntitiesGetLatestValues(entities []EntityPair, ids []FieldID, flags uint) ([]FieldValue, error) {
	pairs := make([]dcgm.GroupEntityPair, len(entities))
	for i, e := range entities {
		pairs[i] = dcgm.GroupEntityPair{EntityGroupId: dcgm.Field_Entity_Group(e.Group), EntityId: e.ID}
	}
	values, err := dcgm.EntitiesGetLatestValues(pairs, shorts(ids), flags)
	if err != nil {
		return nil, convertDCGMError(err)
	}
	out := make([]FieldValue, len(values))
	for i, v := range values {
		fv := FieldValue{Entity: EntityPair{Group: EntityGroup(v.EntityGroupId), ID: v.EntityID}, FieldID: FieldID(v.FieldID), Type: byte(v.FieldType), Status: v.Status, TS: v.TS}
		switch fv.Type {
		case FieldTypeInt64:
			fv.Int64 = v.Int64()
		case FieldTypeDouble:
			fv.Float64 = v.Float64()
		case FieldTypeString:
			fv.String = v.String()
		}
		out[i] = fv
	}
	return out, nil
}

type nvmlBinding struct{}

func (nvmlBinding) Init() (ret NVMLReturn) {
	defer func() {
		if r := recover(); r != nil {
			ret = NVMLLibraryNotFound
		}
	}()
	return NVMLReturn(nvml.Init())
}

func (nvmlBinding) Shutdown() NVMLReturn { return NVMLReturn(nvml.Shutdown()) }

func (nvmlBinding) DeviceGetCount() (int, NVMLReturn) {
	n, ret := nvml.DeviceGetCount()
	return n, NVMLReturn(ret)
}

func (nvmlBinding) DeviceGetHandleByIndex(i int) (NVMLDevice, NVMLReturn) {
	d, ret := nvml.DeviceGetHandleByIndex(i)
	return nvmlDevice{d}, NVMLReturn(ret)
}

func (nvmlBinding) EventSetCreate() (NVMLEventSet, NVMLReturn) {
	s, ret := nvml.EventSetCreate()
	return nvmlEventSet{s}, NVMLReturn(ret)
}

type nvmlDevice struct{ d nvml.Device }

func (n nvmlDevice) GetUUID() (string, NVMLReturn) {
	s, ret := n.d.GetUUID()
	return s, NVMLReturn(ret)
}

func (n nvmlDevice) GetName() (string, NVMLReturn) {
	s, ret := n.d.GetName()
	return s, NVMLReturn(ret)
}

func (n nvmlDevice) GetMinorNumber() (int, NVMLReturn) {
	m, ret := n.d.GetMinorNumber()
	return m, NVMLReturn(ret)
}

func (n nvmlDevice) GetMigMode() (int, int, NVMLReturn) {
	c, p, ret := n.d.GetMigMode()
	return c, p, NVMLReturn(ret)
}

func (n nvmlDevice) GetMaxMigDeviceCount() (int, NVMLReturn) {
	c, ret := n.d.GetMaxMigDeviceCount()
	return c, NVMLReturn(ret)
}

func (n nvmlDevice) GetMigDeviceHandleByIndex(i int) (NVMLDevice, NVMLReturn) {
	d, ret := n.d.GetMigDeviceHandleByIndex(i)
	return nvmlDevice{d}, NVMLReturn(ret)
}

func (n nvmlDevice) GetGpuInstanceId() (int, NVMLReturn) {
	id, ret := n.d.GetGpuInstanceId()
	return id, NVMLReturn(ret)
}

func (n nvmlDevice) GetAttributes() (DeviceAttributes, NVMLReturn) {
	a, ret := n.d.GetAttributes()
	return DeviceAttributes(a), NVMLReturn(ret)
}

func (n nvmlDevice) GetGpuInstanceProfileInfoV3(profile int) (GpuInstanceProfileInfo, NVMLReturn) {
	p, ret := n.d.GetGpuInstanceProfileInfoV(profile).V3()
	name := make([]byte, 0, len(p.Name))
	for _, c := range p.Name {
		if c == 0 {
			break
		}
		name = append(name, byte(c))
	}
	return GpuInstanceProfileInfo{ID: p.Id, SliceCount: p.SliceCount, MultiprocessorCount: p.MultiprocessorCount,
		CopyEngineCount: p.CopyEngineCount, DecoderCount: p.DecoderCount, EncoderCount: p.EncoderCount,
		JpegCount: p.JpegCount, OfaCount: p.OfaCount, MemorySizeMB: p.MemorySizeMB, Name: string(name)}, NVMLReturn(ret)
}

func (n nvmlDevice) GetGpuInstanceById(id int) (NVMLGpuInstance, NVMLReturn) {
	gi, ret := n.d.GetGpuInstanceById(id)
	return nvmlGpuInstance{gi}, NVMLReturn(ret)
}

func processInfos(ps []nvml.ProcessInfo, ret nvml.Return) ([]ProcessInfo, NVMLReturn) {
	out := make([]ProcessInfo, len(ps))
	for i, p := range ps {
		out[i] = ProcessInfo(p)
	}
	return out, NVMLReturn(ret)
}

func (n nvmlDevice) GetComputeRunningProcesses() ([]ProcessInfo, NVMLReturn) {
	return processInfos(n.d.GetComputeRunningProcesses())
}

func (n nvmlDevice) GetMPSComputeRunningProcesses() ([]ProcessInfo, NVMLReturn) {
	return processInfos(n.d.GetMPSComputeRunningProcesses())
}

func (n nvmlDevice) GetMemoryInfo() (Memory, NVMLReturn) {
	m, ret := n.d.GetMemoryInfo()
	return Memory{Total: m.Total, Free: m.Free, Used: m.Used}, NVMLReturn(ret)
}

func (n nvmlDevice) GetMemoryInfoV2() (MemoryV2, NVMLReturn) {
	m, ret := n.d.GetMemoryInfo_v2()
	return MemoryV2{Total: m.Total, Reserved: m.Reserved, Free: m.Free, Used: m.Used}, NVMLReturn(ret)
}

func (n nvmlDevice) GetUtilizationRates() (Utilization, NVMLReturn) {
	u, ret := n.d.GetUtilizationRates()
	return Utilization{Gpu: u.Gpu, Memory: u.Memory}, NVMLReturn(ret)
}

func (n nvmlDevice) GetPowerUsage() (uint32, NVMLReturn) {
	p, ret := n.d.GetPowerUsage()
	return p, NVMLReturn(ret)
}

func (n nvmlDevice) GetTemperature(sensor int) (uint32, NVMLReturn) {
	t, ret := n.d.GetTemperature(nvml.TemperatureSensors(sensor))
	return t, NVMLReturn(ret)
}

func (n nvmlDevice) GetClockInfo(clock int) (uint32, NVMLReturn) {
	c, ret := n.d.GetClockInfo(nvml.ClockType(clock))
	return c, NVMLReturn(ret)
}

func (n nvmlDevice) GetTotalEccErrors(errType, counter int) (uint64, NVMLReturn) {
	c, ret := n.d.GetTotalEccErrors(nvml.MemoryErrorType(errType), nvml.EccCounterType(counter))
	return c, NVMLReturn(ret)
}

func (n nvmlDevice) GetSupportedEventTypes() (uint64, NVMLReturn) {
	t, ret := n.d.GetSupportedEventTypes()
	return t, NVMLReturn(ret)
}

func (n nvmlDevice) RegisterEvents(types uint64, set NVMLEventSet) NVMLReturn {
	s, ok := set.(nvmlEventSet)
	if !ok {
		return NVMLInvalidArgument
	}
	return NVMLReturn(n.d.RegisterEvents(types, s.s))
}

type nvmlGpuInstance struct{ gi nvml.GpuInstance }

func (g nvmlGpuInstance) GetInfo() (GpuInstanceInfo, NVMLReturn) {
	info, ret := g.gi.GetInfo()
	return GpuInstanceInfo{ID: info.Id, ProfileID: info.ProfileId, PlacementStart: info.Placement.Start, PlacementSize: info.Placement.Size}, NVMLReturn(ret)
}

type nvmlEventSet struct{ s nvml.EventSet }

func (e nvmlEventSet) Wait(timeoutMs uint32) (EventData, NVMLReturn) {
	ev, ret := e.s.Wait(timeoutMs)
	out := EventData{EventType: ev.EventType, EventData: ev.EventData, GpuInstanceId: ev.GpuInstanceId}
	if ev.Device != nil {
		out.Device = nvmlDevice{ev.Device}
	}
	return out, NVMLReturn(ret)
}

func (e nvmlEventSet) Free() NVMLReturn { return NVMLReturn(e.s.Free()) }
