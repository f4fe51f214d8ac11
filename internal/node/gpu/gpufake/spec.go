// Package gpufake is a simulated GPU node behind the library interfaces of
// internal/node/gpu (gpu.DCGMLib, gpu.NVMLLib): GPUs with MIG instances and
// processes, DCGM's host engine and NVML, each answering as the real
// library does, including where it misbehaves. Every behaviour cites the
// upstream source it follows (DCGM 4.6, go-dcgm v1.4611.0, go-nvml
// v0.13.4-1's nvml.h, dcgm-exporter). A machine is written as JSON (a
// golden node scenario's fake.json), with steps that change it between
// scrapes.
package gpufake

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// Spec is a machine, as fake.json holds it.
type Spec struct {
	Comment string `json:"comment,omitempty"`
	// DCGM is the DCGM install; absent, libdcgm.so.4 is not there.
	DCGM *DCGMSpec `json:"dcgm,omitempty"`
	// NVML says whether libnvidia-ml.so.1 is there (the NVIDIA container
	// toolkit mounts it into GPU pods).
	NVML bool `json:"nvml"`
	// Privileged: the caller may make NVML's privileged MIG calls (root
	// with CAP_SYS_ADMIN). The chart drops every capability: false.
	Privileged bool `json:"privileged,omitempty"`
	// OwnPIDNamespace: the agent runs in a PID namespace of its own (no
	// hostPID). The driver answers a process query with the processes
	// whose PID it can translate into the caller's namespace only
	// (open-gpu-kernel-modules src/nvidia/src/kernel/gpu/gpu_rmapi.c,
	// gpuGetProcWithObject filtering through os_find_ns_pid): the pods'
	// processes, in their own namespaces, are not listed.
	OwnPIDNamespace bool `json:"own_pid_namespace,omitempty"`
	// Hang makes every library call block until a step clears it.
	Hang bool      `json:"hang,omitempty"`
	GPUs []GPUSpec `json:"gpus"`
	// Steps change the machine before each later scrape: the golden test
	// scrapes once, then once after each step.
	Steps []Step `json:"steps,omitempty"`
}

// DCGMSpec is DCGM's host engine.
type DCGMSpec struct {
	// Profiling: "" (supported and free), "unsupported" (the GPUs have
	// no profiling metric groups), "requires_root" (the host engine has
	// no CAP_SYS_ADMIN: fails on GPUs older than Hopper), "held"
	// (another DCGM client holds the profiling hardware: fails on GPUs
	// older than Hopper, -37).
	Profiling string `json:"profiling,omitempty"`
	// Down: nv-hostengine does not accept connections (not started yet,
	// restarting); embedded, DCGM cannot start.
	Down bool `json:"down,omitempty"`
	// Address is where the agent is told nv-hostengine listens
	// (--dcgm.hostengine-address); empty, the agent embeds the engine.
	Address string `json:"address,omitempty"`
}

// GPUSpec is one GPU.
type GPUSpec struct {
	UUID    string `json:"uuid"`
	Product string `json:"product"`
	Index   int    `json:"index"`
	// Minor is /dev/nvidia<minor>; absent, the index.
	Minor *int `json:"minor,omitempty"`
	// PCIBusID is the GPU's PCI address as nvidia-smi prints it
	// (00000000:18:00.0); absent, bus 0x18 plus the index.
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// Fields are the GPU's DCGM field values by name, in DCGM's units; a
	// field absent has no sample (DCGM: blank with NO_DATA; NVML: not
	// supported).
	Fields    map[string]float64 `json:"fields,omitempty"`
	Processes []ProcessSpec      `json:"processes,omitempty"`
	// MIGEnabled turns MIG mode on; MIG lists the GPU instances.
	MIGEnabled bool      `json:"mig_enabled,omitempty"`
	MIG        []MIGSpec `json:"mig,omitempty"`
	// Lost: the GPU fell off the bus (XID 79).
	Lost bool `json:"lost,omitempty"`
	// ReservedMiB is the memory the driver and firmware reserve: NVML's
	// version-1 memory counts it as used, version 2 and DCGM do not.
	ReservedMiB float64 `json:"reserved_mib,omitempty"`
	// NoPermission: the caller may not open the GPU (its device file is
	// not accessible): NVML counts it but its handle answers
	// NO_PERMISSION.
	NoPermission bool `json:"no_permission,omitempty"`
}

// MIGSpec is one GPU instance (with one compute instance).
type MIGSpec struct {
	UUID string `json:"uuid"`
	// GI is NVML's GPU instance ID.
	GI int `json:"gpu_instance_id"`
	// Profile is the driver's profile name (1g.10gb, 1g.10gb+me): a row
	// of the GPU's profile table.
	Profile   string             `json:"profile"`
	Placement int                `json:"placement_start"`
	Fields    map[string]float64 `json:"fields,omitempty"`
	Processes []ProcessSpec      `json:"processes,omitempty"`
}

// ProcessSpec is a compute process.
type ProcessSpec struct {
	PID             int    `json:"pid"`
	UsedMemoryBytes uint64 `json:"used_memory_bytes"`
	// MemoryNotAvailable: NVML reports NVML_VALUE_NOT_AVAILABLE.
	MemoryNotAvailable bool `json:"memory_not_available,omitempty"`
	// MPSClient: the process is a client of the GPU's MPS server (the
	// server is listed as a process of its own): NVML's compute list
	// leaves it out, its MPS list has it.
	MPSClient bool `json:"mps_client,omitempty"`
}

// Step changes the machine between scrapes.
type Step struct {
	Comment string `json:"comment,omitempty"`
	// RestartHostEngine restarts nv-hostengine: every connection made
	// before is invalid, and its groups and watches are gone.
	RestartHostEngine bool `json:"restart_hostengine,omitempty"`
	// DCGM replaces the DCGM spec (null: left as is).
	DCGM *DCGMSpec `json:"dcgm,omitempty"`
	// GPUs replaces the GPUs (MIG instances created or destroyed,
	// values changed); absent, left as is.
	GPUs []GPUSpec `json:"gpus,omitempty"`
	// XIDs are XID errors the driver reports now.
	XIDs []XID `json:"xids,omitempty"`
	// Hang sets or clears the hang.
	Hang *bool `json:"hang,omitempty"`
}

// XID is one XID error of a GPU.
type XID struct {
	UUID string `json:"uuid"`
	Code uint64 `json:"code"`
}

// Load reads a machine file.
func Load(path string) (*Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fake GPU machine: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("parse fake GPU machine %s: %w", path, err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("fake GPU machine %s: %w", path, err)
	}
	return &s, nil
}

func (s *Spec) validate() error {
	check := func(gpus []GPUSpec) error {
		for _, g := range gpus {
			if err := fieldNames(g.Fields); err != nil {
				return fmt.Errorf("gpu %s: %w", g.UUID, err)
			}
			for _, m := range g.MIG {
				if _, ok := profileByName(m.Profile); !ok {
					return fmt.Errorf("mig %s: unknown profile %q", m.UUID, m.Profile)
				}
				if err := fieldNames(m.Fields); err != nil {
					return fmt.Errorf("mig %s: %w", m.UUID, err)
				}
			}
		}
		return nil
	}
	if err := check(s.GPUs); err != nil {
		return err
	}
	for i, st := range s.Steps {
		if err := check(st.GPUs); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		if st.DCGM != nil && !slices.Contains(profilingModes, st.DCGM.Profiling) {
			return fmt.Errorf("step %d: dcgm.profiling %q", i+1, st.DCGM.Profiling)
		}
	}
	if s.DCGM != nil && !slices.Contains(profilingModes, s.DCGM.Profiling) {
		return fmt.Errorf("dcgm.profiling %q", s.DCGM.Profiling)
	}
	return nil
}

// profilingModes are the values of DCGMSpec.Profiling.
var profilingModes = []string{"", "unsupported", "requires_root", "held"}

// fieldNames rejects an unknown field name, so that a typo cannot
// silently drop a series.
func fieldNames(fields map[string]float64) error {
	for name := range fields {
		if _, ok := gpu.FieldByName(name); !ok {
			return fmt.Errorf("unknown DCGM field %q", name)
		}
	}
	return nil
}

func (g GPUSpec) minor() int {
	if g.Minor != nil {
		return *g.Minor
	}
	return g.Index
}

func (g GPUSpec) busID() string {
	if g.PCIBusID != "" {
		return g.PCIBusID
	}
	return fmt.Sprintf("00000000:%02X:00.0", 0x18+g.Index)
}
