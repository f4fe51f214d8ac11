// Package gpu reads GPU telemetry and GPU processes: from DCGM (field
// values, profiling included) or NVML alone (the basic fields), both
// through the narrow library interfaces of lib.go, from a recorded file
// (tests, the demo), or nothing. It knows DCGM field IDs and units and the
// libraries' behaviour, not Kubernetes.
package gpu

import (
	"context"
	"errors"
)

// Source reads the GPUs of one node.
type Source interface {
	// Name is the configured source (auto, dcgm, nvml, recorded, none).
	Name() string
	// Read returns the GPUs and MIG instances with their latest values.
	Read(ctx context.Context) (*Reading, error)
	// Close releases the source.
	Close() error
}

// ErrUnavailable is returned by a source that this build or machine cannot
// provide (a non-cgo build, a library missing).
var ErrUnavailable = errors.New("GPU source unavailable")

// Reading is one read of every GPU entity of the node.
type Reading struct {
	// Source is the source that served the read (dcgm, nvml, recorded):
	// with --gpu.source=auto, the one that could start.
	Source   string
	Entities []Entity
	// Groups says which field groups are watched (DCGM: basic and
	// profiling; NVML: basic).
	Groups []GroupStatus
}

// Field groups.
const (
	GroupBasic     = "basic"
	GroupProfiling = "profiling"
)

// Why a field group is not watched: a closed set, each told from what
// go-dcgm returns (a status code, or DCGM's message in plain text).
const (
	// The GPUs or the source have no such fields (NVML has no profiling;
	// DCGM: NOT_SUPPORTED, PROFILING_NOT_SUPPORTED, MODULE_NOT_LOADED).
	ReasonUnsupported = "unsupported"
	// DCGM refused (REQUIRES_ROOT, NO_PERMISSION): before Hopper the host
	// engine needs CAP_SYS_ADMIN to profile.
	ReasonNoPermission = "no_permission"
	// DCGM's profiling module failed (PROFILING_LIBRARY_ERROR, -37): on a
	// GPU older than Hopper most often another DCGM (the GPU Operator's
	// dcgm-exporter or nv-hostengine) holds its profiling hardware
	// (DCGM#106, dcgm-exporter#148).
	ReasonProfilingModule = "profiling_module_error"
	// Any other error.
	ReasonFailed = "failed"
)

// UnwatchedReasons lists the reasons of an unwatched field group.
var UnwatchedReasons = []string{ReasonUnsupported, ReasonNoPermission, ReasonProfilingModule, ReasonFailed}

// GroupStatus is whether a field group is watched; Reason says why not.
type GroupStatus struct {
	Name    string
	Watched bool
	Reason  string
}

// Entity is a GPU or a MIG instance, each with its own UUID.
type Entity struct {
	// UUID is GPU-... for a GPU, MIG-... for a MIG instance.
	UUID string
	// ParentUUID is the GPU of a MIG instance; empty for a GPU.
	ParentUUID string
	Product    string
	// Index is the GPU's NVML index (the parent's for a MIG instance).
	Index int
	// Minor is the GPU's minor number (/dev/nvidia<minor>), -1 unknown.
	Minor int
	// MIG identifies a MIG instance; nil for a GPU.
	MIG *MIGInstance
	// Values holds the latest value of each field, in DCGM's own unit
	// (see Fields); a field without a value is absent. A MIG instance
	// holds only its own fields (framebuffer, profiling), never the
	// board's.
	Values map[FieldID]float64
	// Processes are the compute processes on this entity. For a GPU with
	// MIG enabled they are listed on its instances.
	Processes []Process
	// Lost: the GPU fell off the bus (XID 79) or is otherwise gone; a MIG
	// instance of a lost GPU is lost too.
	Lost bool
	// Raw holds every field as the library answered it, blanks and
	// errors included (only when the source was asked for it: gpu-check).
	Raw []RawValue
}

// MIGInstance names a MIG GPU instance.
type MIGInstance struct {
	GPUInstanceID int
	// Profile is the instance's profile as the driver names it (NVML's
	// GPU instance profile name, "1g.10gb+me"), which is what the DRA
	// driver publishes as the device's profile attribute.
	Profile string
	// PlacementStart is the first memory slice of the instance; -1 when
	// unknown (NVML gives it to privileged callers only).
	PlacementStart int
	// DeviceIndex is the instance's position among its GPU's MIG devices
	// in NVML's handle order (what NVIDIA's device plugin numbers
	// <gpu>:<n> with DEVICE_ID_STRATEGY=index); -1 when unknown.
	DeviceIndex int
}

// Process is a compute process holding GPU memory.
type Process struct {
	PID             int
	UsedMemoryBytes float64
	// MemoryUnknown: the driver reported NVML_VALUE_NOT_AVAILABLE.
	MemoryUnknown bool
	// MPSClient: a client of an MPS server, listed by NVML's MPS process
	// call (the compute list shows the server instead).
	MPSClient bool
}

// RawValue is one field of one entity as the library returned it.
type RawValue struct {
	Field string `json:"field"`
	// Type is DCGM's field type (int64, double, string) or NVML's call.
	Type   string `json:"type"`
	Status string `json:"status"`
	Value  string `json:"value"`
}
