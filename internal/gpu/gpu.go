// Package gpu reads GPU telemetry and GPU processes from a source: DCGM on
// a GPU node (cgo builds), a recorded file in tests and the demo, or
// nothing. It knows DCGM field IDs and units, not Kubernetes.
package gpu

import (
	"context"
	"errors"
)

// Source reads the GPUs of one node.
type Source interface {
	// Name is the source's value of dra_gpu_source_up{source}.
	Name() string
	// Read returns the GPUs and MIG instances with their latest values.
	Read(ctx context.Context) (*Reading, error)
	// Close releases the source.
	Close() error
}

// ErrUnavailable is returned by a source that this build or machine cannot
// provide (a non-cgo build, libdcgm missing).
var ErrUnavailable = errors.New("GPU source unavailable")

// Reading is one read of every GPU entity of the node.
type Reading struct {
	Entities []Entity
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
	// MIG identifies a MIG instance; nil for a GPU.
	MIG *MIGInstance
	// Values holds the latest value of each field DCGM returned, in
	// DCGM's own unit (see Fields); a field DCGM has no value for is absent.
	Values map[FieldID]float64
	// Processes are the compute processes on this entity. For a GPU with
	// MIG enabled they are listed on its instances.
	Processes []Process
}

// MIGInstance names a MIG GPU instance.
type MIGInstance struct {
	GPUInstanceID int
	// Profile is the placement's profile, as the DRA driver writes it
	// (e.g. 1g.10gb).
	Profile string
	// PlacementStart is the first memory slice of the instance.
	PlacementStart int
}

// Process is a compute process holding GPU memory.
type Process struct {
	PID             int
	UsedMemoryBytes float64
}
