package gpu

import (
	"errors"
	"fmt"
	"strings"
)

// The library boundary. DCGMLib and NVMLLib are the calls the agent makes
// of go-dcgm v1.4611.0 and go-nvml v0.13.4-1, one method per library call,
// with the libraries' own values (status codes, blank sentinels, entity
// numbers) carried over unchanged but without cgo types. binding_cgo.go
// implements them on the real libraries (a line per call, no logic);
// internal/node/gpu/gpufake on a simulated machine that behaves as the libraries
// do. Everything that decides (which fields to watch, what a blank means,
// when to reconnect) is in this package, cgo-free, and runs in go test.

// DCGMLib is the part of go-dcgm (pkg/dcgm) the agent calls.
type DCGMLib interface {
	// Init is dcgm.Init: the embedded host engine when address is empty,
	// else a connection to nv-hostengine at address (host:port, or
	// unix:///path, which needs DCGM >= 4.5: go-dcgm admin.go ~134-149).
	// The cleanup function closes the connection or stops the engine.
	Init(address string) (cleanup func(), err error)
	GetSupportedDevices() ([]uint, error)
	GetDeviceInfo(gpuID uint) (DCGMDevice, error)
	// GetGPUStatus is dcgm.GetGPUStatus (no error: Unknown on failure).
	GetGPUStatus(gpuID uint) EntityStatus
	// GetGPUInstanceHierarchy returns the hierarchy's valid entries
	// (MigHierarchy_v2.EntityList[:Count]).
	GetGPUInstanceHierarchy() ([]MigHierarchyInfo, error)
	GetSupportedMetricGroups(gpuID uint) ([]MetricGroup, error)
	CreateGroup(name string) (GroupHandle, error)
	AddEntityToGroup(group GroupHandle, entityGroup EntityGroup, entityID uint) error
	DestroyGroup(group GroupHandle) error
	FieldGroupCreate(name string, fields []FieldID) (FieldHandle, error)
	FieldGroupDestroy(fields FieldHandle) error
	WatchFieldsWithGroupEx(fields FieldHandle, group GroupHandle, updateFreqUsec int64, maxKeepAge float64, maxKeepSamples int32) error
	UpdateAllFields() error
	EntitiesGetLatestValues(entities []EntityPair, fields []FieldID, flags uint) ([]FieldValue, error)
}

// GroupHandle and FieldHandle are DCGM's group and field group handles.
type (
	GroupHandle uintptr
	FieldHandle uintptr
)

// EntityGroup is dcgm_field_entity_group_t (dcgm_fields.h).
type EntityGroup uint

// The entity groups the agent uses.
const (
	EntityGPU         EntityGroup = 1 // DCGM_FE_GPU
	EntityGPUInstance EntityGroup = 4 // DCGM_FE_GPU_I
	EntityGPUCompute  EntityGroup = 5 // DCGM_FE_GPU_CI
)

// EntityPair is dcgm.GroupEntityPair.
type EntityPair struct {
	Group EntityGroup
	ID    uint
}

// DCGMDevice is the part of dcgm.Device the agent reads.
type DCGMDevice struct {
	GPU   uint
	UUID  string
	Model string // Identifiers.Model
}

// EntityStatus is dcgm.EntityStatus.
type EntityStatus uint

// The entity statuses the agent tells apart.
const (
	EntityStatusUnknown EntityStatus = 0
	EntityStatusOk      EntityStatus = 1
	EntityStatusLost    EntityStatus = 4
)

// MigHierarchyInfo is dcgm.MigHierarchyInfo_v2.
type MigHierarchyInfo struct {
	Entity EntityPair
	Parent EntityPair
	// The parts of MigEntityInfo the agent reads.
	ParentUUID     string // Info.GpuUuid: the parent GPU's UUID
	NvmlGpuIndex   uint
	NvmlInstanceID uint
	NvmlProfileID  uint // Info.NvmlMigProfileId
}

// MetricGroup is dcgm.MetricGroup.
type MetricGroup struct {
	Major, Minor uint
	FieldIDs     []uint
}

// Field value types (dcgm_fields.h DCGM_FT_*).
const (
	FieldTypeDouble byte = 'd'
	FieldTypeInt64  byte = 'i'
	FieldTypeString byte = 's'
)

// FieldValue is dcgm.FieldValue_v2 with its value decoded by type.
type FieldValue struct {
	Entity  EntityPair
	FieldID FieldID
	Type    byte
	// Status is a dcgmReturn_t: 0, or why the value is blank.
	Status int
	// TS is the sample's time (microseconds since the epoch).
	TS      int64
	Int64   int64
	Float64 float64
	String  string
}

// DCGM status codes (dcgm_structs.h dcgmReturn_t) the agent tells apart.
const (
	StOK                    = 0
	StBadParam              = -1
	StNotSupported          = -6
	StInitError             = -7
	StUninitialized         = -10
	StTimeout               = -11
	StNoData                = -14
	StNotWatched            = -16
	StNoPermission          = -17
	StGPUIsLost             = -18
	StConnectionNotValid    = -21
	StLibraryNotFound       = -25
	StRequiresRoot          = -29
	StModuleNotLoaded       = -33
	StInUse                 = -34
	StProfilingNotSupported = -36
	StProfilingLibraryError = -37
)

// DCGM's blank values (dcgm_structs.h DCGM_BLANK_VALUES): a value at or
// above the blank is no value (blank, not found, not supported, not
// permitted).
const (
	Int64Blank = 0x7ffffffffffffff0
	FP64Blank  = 140737488355328.0
	// FieldFlagLiveData is DCGM_FV_FLAG_LIVE_DATA: read the driver now,
	// not the watch's cache.
	FieldFlagLiveData = 1
)

// DCGMError is a *dcgm.Error: a dcgmReturn_t and its message.
type DCGMError struct {
	Code int
	Msg  string
}

func (e *DCGMError) Error() string { return fmt.Sprintf("%s (DCGM %d)", e.Msg, e.Code) }

// dcgmTexts is DCGM's message of each status the agent tells apart, as
// libdcgm's errorString() writes it (dcgmlib/src/dcgm_errors.c,
// errorString). go-dcgm puts it in every error it returns, coded or not.
var dcgmTexts = map[int]string{
	StBadParam:              "Bad parameter passed to function",
	StNotSupported:          "Feature not supported",
	StInitError:             "DCGM initialization error",
	StUninitialized:         "Object is in an undefined state",
	StTimeout:               "Timeout",
	StNoData:                "No data is available",
	StNotWatched:            "Field is not being watched",
	StNoPermission:          "No permission",
	StGPUIsLost:             "GPU is lost",
	StConnectionNotValid:    "Host engine connection invalid/disconnected",
	StLibraryNotFound:       "DCGM library could not be found",
	StRequiresRoot:          "Host engine is running as non-root",
	StModuleNotLoaded:       "This request is serviced by a module of DCGM that is not currently loaded",
	StInUse:                 "The requested operation could not be completed because the affected resource is in use",
	StProfilingNotSupported: "Profiling is not supported for this group of GPUs or GPU",
	StProfilingLibraryError: "The third-party Profiling module returned an unrecoverable error",
}

// DCGMErrorText is libdcgm's errorString(code) for the statuses the agent
// tells apart, "" for the others.
func DCGMErrorText(code int) string { return dcgmTexts[code] }

// dcgmStatus returns the DCGM status an error of go-dcgm tells, 0 when it
// tells none. Only GetSupportedDevices, GetDeviceInfo,
// GetSupportedMetricGroups and EntitiesGetLatestValues return a coded
// *dcgm.Error; the other calls (Init, the group and field group calls,
// WatchFieldsWithGroupEx, UpdateAllFields, GetGPUInstanceHierarchy) return
// plain text, "<what failed>: <errorString(status)>" (go-dcgm utils.go
// ~58-64 and its callers: internal/node/gpu/gpufake/errors.go lists each), so
// the status is read back from DCGM's message at the end of the text.
func dcgmStatus(err error) int {
	if err == nil {
		return StOK
	}
	var de *DCGMError
	if errors.As(err, &de) {
		return de.Code
	}
	msg := err.Error()
	for code, text := range dcgmTexts {
		if msg == text || strings.HasSuffix(msg, ": "+text) {
			return code
		}
	}
	return 0
}

// NVMLLib is the part of go-nvml (pkg/nvml) the agent calls.
type NVMLLib interface {
	Init() NVMLReturn
	Shutdown() NVMLReturn
	DeviceGetCount() (int, NVMLReturn)
	DeviceGetHandleByIndex(index int) (NVMLDevice, NVMLReturn)
	EventSetCreate() (NVMLEventSet, NVMLReturn)
}

// NVMLDevice is the part of nvml.Device the agent calls, on a GPU or a
// MIG device handle.
type NVMLDevice interface {
	GetUUID() (string, NVMLReturn)
	GetName() (string, NVMLReturn)
	GetMinorNumber() (int, NVMLReturn)
	GetMigMode() (current, pending int, ret NVMLReturn)
	GetMaxMigDeviceCount() (int, NVMLReturn)
	GetMigDeviceHandleByIndex(index int) (NVMLDevice, NVMLReturn)
	// GetGpuInstanceId is asked of a MIG device handle.
	GetGpuInstanceId() (int, NVMLReturn)
	GetAttributes() (DeviceAttributes, NVMLReturn)
	// GetGpuInstanceProfileInfoV3 is GetGpuInstanceProfileInfoV(profile).V3().
	GetGpuInstanceProfileInfoV3(profile int) (GpuInstanceProfileInfo, NVMLReturn)
	GetGpuInstanceById(id int) (NVMLGpuInstance, NVMLReturn)
	GetComputeRunningProcesses() ([]ProcessInfo, NVMLReturn)
	// GetMPSComputeRunningProcesses lists the MPS clients (v3).
	GetMPSComputeRunningProcesses() ([]ProcessInfo, NVMLReturn)
	GetMemoryInfo() (Memory, NVMLReturn)
	// GetMemoryInfoV2 is GetMemoryInfo_v2 (drivers 510 and later).
	GetMemoryInfoV2() (MemoryV2, NVMLReturn)
	GetUtilizationRates() (Utilization, NVMLReturn)
	GetPowerUsage() (uint32, NVMLReturn)
	GetTemperature(sensor int) (uint32, NVMLReturn)
	GetClockInfo(clock int) (uint32, NVMLReturn)
	GetTotalEccErrors(errorType, counterType int) (uint64, NVMLReturn)
	GetSupportedEventTypes() (uint64, NVMLReturn)
	RegisterEvents(eventTypes uint64, set NVMLEventSet) NVMLReturn
}

// NVMLGpuInstance is the part of nvml.GpuInstance the agent calls.
type NVMLGpuInstance interface {
	GetInfo() (GpuInstanceInfo, NVMLReturn)
}

// NVMLEventSet is the part of nvml.EventSet the agent calls.
type NVMLEventSet interface {
	Wait(timeoutMs uint32) (EventData, NVMLReturn)
	Free() NVMLReturn
}

// NVMLReturn is nvml.Return.
type NVMLReturn int

// The NVML returns the agent tells apart (nvml.h nvmlReturn_t).
const (
	NVMLSuccess                 NVMLReturn = 0
	NVMLUninitialized           NVMLReturn = 1
	NVMLInvalidArgument         NVMLReturn = 2
	NVMLNotSupported            NVMLReturn = 3
	NVMLNoPermission            NVMLReturn = 4
	NVMLNotFound                NVMLReturn = 6
	NVMLTimeout                 NVMLReturn = 10
	NVMLLibraryNotFound         NVMLReturn = 12
	NVMLFunctionNotFound        NVMLReturn = 13
	NVMLGPUIsLost               NVMLReturn = 15
	NVMLDriverNotLoaded         NVMLReturn = 9
	NVMLUnknown                 NVMLReturn = 999
	nvmlDeviceMigEnable                    = 1 // NVML_DEVICE_MIG_ENABLE
	nvmlTemperatureGPU                     = 0 // NVML_TEMPERATURE_GPU
	nvmlClockSM                            = 1 // NVML_CLOCK_SM
	nvmlMemoryErrorCorrected               = 0 // NVML_MEMORY_ERROR_TYPE_CORRECTED
	nvmlMemoryErrorUncorrected             = 1 // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
	nvmlVolatileECC                        = 0 // NVML_VOLATILE_ECC
	nvmlGPUInstanceProfileCount            = 18
	// NVMLEventTypeXidCriticalError is nvmlEventTypeXidCriticalError.
	NVMLEventTypeXidCriticalError uint64 = 8
	// NVMLValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned
	// long long (nvml.h ~156): a process's used memory reads all ones
	// when the driver cannot tell (nvml.h ~355-356).
	NVMLValueNotAvailable uint64 = 1<<64 - 1
)

var nvmlReturnNames = map[NVMLReturn]string{
	NVMLSuccess: "SUCCESS", NVMLUninitialized: "ERROR_UNINITIALIZED", NVMLInvalidArgument: "ERROR_INVALID_ARGUMENT",
	NVMLNotSupported: "ERROR_NOT_SUPPORTED", NVMLNoPermission: "ERROR_NO_PERMISSION", NVMLNotFound: "ERROR_NOT_FOUND",
	NVMLTimeout: "ERROR_TIMEOUT", NVMLLibraryNotFound: "ERROR_LIBRARY_NOT_FOUND", NVMLFunctionNotFound: "ERROR_FUNCTION_NOT_FOUND",
	NVMLGPUIsLost: "ERROR_GPU_IS_LOST", NVMLDriverNotLoaded: "ERROR_DRIVER_NOT_LOADED", NVMLUnknown: "ERROR_UNKNOWN",
}

func (r NVMLReturn) String() string {
	if s, ok := nvmlReturnNames[r]; ok {
		return s
	}
	return fmt.Sprintf("NVML return %d", int(r))
}

// Error makes a failed return an error.
func (r NVMLReturn) Error() string { return "nvml: " + r.String() }

// DeviceAttributes is nvml.DeviceAttributes.
type DeviceAttributes struct {
	MultiprocessorCount       uint32
	SharedCopyEngineCount     uint32
	SharedDecoderCount        uint32
	SharedEncoderCount        uint32
	SharedJpegCount           uint32
	SharedOfaCount            uint32
	GpuInstanceSliceCount     uint32
	ComputeInstanceSliceCount uint32
	MemorySizeMB              uint64
}

// GpuInstanceProfileInfo is the part of nvml.GpuInstanceProfileInfo_v3 the
// agent reads; Name is the profile's name as the driver gives it
// ("MIG 1g.10gb", "MIG 1g.10gb+me").
type GpuInstanceProfileInfo struct {
	ID                  uint32
	SliceCount          uint32
	MultiprocessorCount uint32
	CopyEngineCount     uint32
	DecoderCount        uint32
	EncoderCount        uint32
	JpegCount           uint32
	OfaCount            uint32
	MemorySizeMB        uint64
	Name                string
}

// GpuInstanceInfo is nvml.GpuInstanceInfo without its device.
type GpuInstanceInfo struct {
	ID             uint32
	ProfileID      uint32
	PlacementStart uint32
	PlacementSize  uint32
}

// ProcessInfo is nvml.ProcessInfo.
type ProcessInfo struct {
	Pid               uint32
	UsedGpuMemory     uint64
	GpuInstanceId     uint32
	ComputeInstanceId uint32
}

// Memory is nvml.Memory (bytes), version 1: Used is reserved plus
// allocated memory (nvml.h:262-265).
type Memory struct {
	Total, Free, Used uint64
}

// MemoryV2 is nvml.Memory_v2 (bytes): Used is allocated memory only,
// Reserved the driver's and firmware's (nvml.h:272-279).
type MemoryV2 struct {
	Total, Reserved, Free, Used uint64
}

// Utilization is nvml.Utilization (percent).
type Utilization struct {
	Gpu, Memory uint32
}

// EventData is nvml.EventData.
type EventData struct {
	Device        NVMLDevice
	EventType     uint64
	EventData     uint64
	GpuInstanceId uint32
}
