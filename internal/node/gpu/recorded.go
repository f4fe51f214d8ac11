package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// Recording is the file format of the recorded source: the GPUs of a node
// as DCGM reported them, field values keyed by DCGM field name in DCGM's
// units (FB_* in MiB, SM_CLOCK in MHz, GPU_UTIL in percent).
type Recording struct {
	// Comment says where the values come from.
	Comment string        `json:"comment,omitempty"`
	GPUs    []RecordedGPU `json:"gpus"`
}

// RecordedGPU is one GPU and its MIG instances.
type RecordedGPU struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	// Minor is the GPU's minor number; absent, the index.
	Minor     *int               `json:"minor,omitempty"`
	Product   string             `json:"product"`
	Fields    map[string]float64 `json:"fields,omitempty"`
	Processes []RecordedProcess  `json:"processes,omitempty"`
	MIG       []RecordedMIG      `json:"mig,omitempty"`
}

// RecordedMIG is one MIG instance.
type RecordedMIG struct {
	UUID           string             `json:"uuid"`
	GPUInstanceID  int                `json:"gpu_instance_id"`
	Profile        string             `json:"profile"`
	PlacementStart int                `json:"placement_start"`
	Fields         map[string]float64 `json:"fields,omitempty"`
	Processes      []RecordedProcess  `json:"processes,omitempty"`
}

// RecordedProcess is a compute process.
type RecordedProcess struct {
	PID             int     `json:"pid"`
	UsedMemoryBytes float64 `json:"used_memory_bytes"`
}

// ReadRecording parses a recording file.
func ReadRecording(path string) (*Recording, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read GPU recording: %w", err)
	}
	var r Recording
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("parse GPU recording %s: %w", path, err)
	}
	if _, err := r.Reading(); err != nil {
		return nil, fmt.Errorf("GPU recording %s: %w", path, err)
	}
	return &r, nil
}

// Reading converts the recording; an unknown field name is an error, so
// that a typo cannot silently drop a series.
func (r *Recording) Reading() (*Reading, error) {
	out := &Reading{Source: SourceRecorded}
	for _, g := range r.GPUs {
		values, err := fieldValues(g.Fields)
		if err != nil {
			return nil, fmt.Errorf("gpu %s: %w", g.UUID, err)
		}
		minor := g.Index
		if g.Minor != nil {
			minor = *g.Minor
		}
		out.Entities = append(out.Entities, Entity{
			UUID: g.UUID, Product: g.Product, Index: g.Index, Minor: minor, Values: values, Processes: recordedProcesses(g.Processes),
		})
		for _, m := range g.MIG {
			values, err := fieldValues(m.Fields)
			if err != nil {
				return nil, fmt.Errorf("mig %s: %w", m.UUID, err)
			}
			out.Entities = append(out.Entities, Entity{
				UUID: m.UUID, ParentUUID: g.UUID, Product: g.Product, Index: g.Index, Minor: minor,
				MIG:    &MIGInstance{GPUInstanceID: m.GPUInstanceID, Profile: m.Profile, PlacementStart: m.PlacementStart, DeviceIndex: -1},
				Values: values, Processes: recordedProcesses(m.Processes),
			})
		}
	}
	return out, nil
}

func fieldValues(in map[string]float64) (map[FieldID]float64, error) {
	out := make(map[FieldID]float64, len(in))
	for name, v := range in {
		f, ok := FieldByName(name)
		if !ok {
			return nil, fmt.Errorf("unknown DCGM field %q", name)
		}
		out[f.ID] = v
	}
	return out, nil
}

func recordedProcesses(in []RecordedProcess) []Process {
	var out []Process
	for _, p := range in {
		out = append(out, Process{PID: p.PID, UsedMemoryBytes: p.UsedMemoryBytes})
	}
	return out
}

// Recorded is a Source that serves a recording. It re-reads the file on
// every Read, so a test or the demo can change what the "GPU" does.
type Recorded struct {
	path string
}

// NewRecorded returns a source reading path.
func NewRecorded(path string) (*Recorded, error) {
	if _, err := ReadRecording(path); err != nil {
		return nil, err
	}
	return &Recorded{path: path}, nil
}

// Name implements Source.
func (r *Recorded) Name() string { return SourceRecorded }

// Read implements Source.
func (r *Recorded) Read(context.Context) (*Reading, error) {
	rec, err := ReadRecording(r.path)
	if err != nil {
		return nil, err
	}
	return rec.Reading()
}

// Close implements Source.
func (r *Recorded) Close() error { return nil }

// None is the source of a node without GPU telemetry (--gpu.source=none):
// it is never up.
type None struct{ Reason error }

// Name implements Source.
func (n None) Name() string { return SourceNone }

// Read implements Source.
func (n None) Read(context.Context) (*Reading, error) {
	if n.Reason != nil {
		return nil, n.Reason
	}
	return nil, ErrUnavailable
}

// Close implements Source.
func (n None) Close() error { return nil }

// Unavailable is a source that cannot start in this build: it keeps its
// name, so dra_gpu_source_up{source="dcgm"} reads 0.
type Unavailable struct {
	SourceName string
	Reason     error
}

// Name implements Source.
func (u Unavailable) Name() string { return u.SourceName }

// Read implements Source.
func (u Unavailable) Read(context.Context) (*Reading, error) { return nil, u.Reason }

// Close implements Source.
func (u Unavailable) Close() error { return nil }
