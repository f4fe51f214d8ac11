package gpufake

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// NvidiaSMI answers the nvidia-smi invocations gpu-check makes, as
// nvidia-smi prints them for this machine:
//
//	nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits
//	nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits
//	nvidia-smi -q
//	nvidia-smi -L
//
// A value the GPU does not have reads [N/A] (utilisation of a MIG-enabled
// GPU, ECC of a GPU without it). Memory is in MiB as the driver (510 and
// later) reports it: used leaves out the reserved memory, printed apart.
// Anything else is refused, as gpu-check must ask nothing else.
func (m *Machine) NvidiaSMI(args []string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.spec.NVML {
		return "", fmt.Errorf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
	}
	if len(args) == 0 {
		return "", fmt.Errorf("nvidia-smi fake: no arguments (the status table is not simulated)")
	}
	if len(args) == 1 && args[0] == "-L" {
		var b strings.Builder
		for _, g := range m.spec.GPUs {
			fmt.Fprintf(&b, "GPU %d: %s (UUID: %s)\n", g.Index, g.Product, g.UUID)
			for i, in := range instances(&g) {
				fmt.Fprintf(&b, "  MIG %-14s Device %2d: (UUID: %s)\n", in.Profile, i, in.UUID)
			}
		}
		return b.String(), nil
	}
	if len(args) == 1 && args[0] == "-q" {
		return m.query(), nil
	}
	csv := len(args) == 2 && args[1] == "--format=csv,noheader,nounits"
	if q, ok := strings.CutPrefix(args[0], "--query-gpu="); ok && csv {
		var b strings.Builder
		for _, g := range m.spec.GPUs {
			var row []string
			for _, f := range strings.Split(q, ",") {
				row = append(row, smiValue(&g, strings.TrimSpace(f)))
			}
			b.WriteString(strings.Join(row, ", ") + "\n")
		}
		return b.String(), nil
	}
	if args[0] == "--query-compute-apps=pid,gpu_uuid,used_memory" && csv {
		return m.computeApps(), nil
	}
	return "", fmt.Errorf("nvidia-smi fake: unsupported arguments %q", args)
}

// computeApps lists what NVML's compute list holds (an MPS client is not
// in it, its server is), a MIG instance's processes under the GPU's UUID.
func (m *Machine) computeApps() string {
	var b strings.Builder
	row := func(g *GPUSpec, ps []ProcessSpec) {
		for _, p := range ps {
			if p.MPSClient {
				continue
			}
			used := strconv.FormatUint(p.UsedMemoryBytes>>20, 10)
			if p.MemoryNotAvailable {
				used = "[N/A]"
			}
			fmt.Fprintf(&b, "%d, %s, %s\n", p.PID, g.UUID, used)
		}
	}
	for i := range m.spec.GPUs {
		g := &m.spec.GPUs[i]
		if g.Lost {
			continue
		}
		if !g.MIGEnabled {
			row(g, g.Processes)
			continue
		}
		for _, in := range instances(g) {
			row(g, in.Processes)
		}
	}
	return b.String()
}

// query is nvidia-smi -q, the lines gpu-check reads and the sections
// around them.
func (m *Machine) query() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n==============NVSMI LOG==============\n\nDriver Version                            : fake\n\nAttached GPUs                             : %d\n", len(m.spec.GPUs))
	for _, g := range m.spec.GPUs {
		fmt.Fprintf(&b, "GPU %s\n", g.busID())
		fmt.Fprintf(&b, "    Product Name                          : %s\n", g.Product)
		fmt.Fprintf(&b, "    GPU UUID                              : %s\n", g.UUID)
		fmt.Fprintf(&b, "    Minor Number                          : %d\n", g.minor())
		fmt.Fprintf(&b, "    PCI\n        Bus Id                            : %s\n", g.busID())
		fmt.Fprintf(&b, "    FB Memory Usage\n")
		for _, f := range []string{"memory.total", "memory.reserved", "memory.used", "memory.free"} {
			fmt.Fprintf(&b, "        %-34s: %s MiB\n", strings.ToUpper(f[7:8])+f[8:], smiValue(&g, f))
		}
	}
	return b.String()
}

// DriverProc writes the kernel driver's /proc/driver/nvidia/gpus tree of
// this machine under dir: one directory per PCI address (the domain in
// four digits, lower case) holding the information file.
func (m *Machine) DriverProc(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.spec.GPUs {
		bus := strings.ToLower(g.busID())
		bus = bus[len(bus)-12:]
		d := filepath.Join(dir, "gpus", bus)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		info := fmt.Sprintf("Model: \t\t %s\nIRQ:   \t\t 0\nGPU UUID: \t %s\nBus Type: \t PCIe\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
			g.Product, g.UUID, bus, g.minor())
		if err := os.WriteFile(filepath.Join(d, "information"), []byte(info), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func smiValue(g *GPUSpec, field string) string {
	number := func(id gpu.FieldID) string {
		v, ok := value(g.Fields, id)
		if !ok {
			return "[N/A]"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	switch field {
	case "uuid":
		return g.UUID
	case "name":
		return g.Product
	case "index":
		return strconv.Itoa(g.Index)
	case "pci.bus_id":
		return g.busID()
	case "memory.total":
		return number(gpu.FieldFBTotal)
	case "memory.used":
		return number(gpu.FieldFBUsed)
	case "memory.free":
		return number(gpu.FieldFBFree)
	case "memory.reserved":
		return strconv.FormatFloat(g.ReservedMiB, 'f', -1, 64)
	case "power.draw":
		return number(gpu.FieldPowerUsage)
	case "temperature.gpu":
		return number(gpu.FieldGPUTemp)
	case "clocks.sm":
		return number(gpu.FieldSMClock)
	case "utilization.gpu":
		if g.MIGEnabled {
			return "[N/A]"
		}
		return number(gpu.FieldGPUUtil)
	case "ecc.errors.corrected.volatile.total":
		return number(gpu.FieldECCSBEVolTotal)
	case "ecc.errors.uncorrected.volatile.total":
		return number(gpu.FieldECCDBEVolTotal)
	}
	return "[N/A]"
}
