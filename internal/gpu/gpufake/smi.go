package gpufake

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
)

// NvidiaSMI answers the two nvidia-smi invocations gpu-check makes, as
// nvidia-smi prints them for this machine:
//
//	nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits
//	nvidia-smi -L
//
// A value the GPU does not have reads [N/A] (utilisation of a MIG-enabled
// GPU, ECC of a GPU without it).
func (m *Machine) NvidiaSMI(args []string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.spec.NVML {
		return "", fmt.Errorf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
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
	var query string
	for _, a := range args {
		if q, ok := strings.CutPrefix(a, "--query-gpu="); ok {
			query = q
		}
	}
	if query == "" {
		return "", fmt.Errorf("nvidia-smi fake: unsupported arguments %q", args)
	}
	var b strings.Builder
	for _, g := range m.spec.GPUs {
		var row []string
		for _, f := range strings.Split(query, ",") {
			row = append(row, smiValue(&g, strings.TrimSpace(f)))
		}
		b.WriteString(strings.Join(row, ", ") + "\n")
	}
	return b.String(), nil
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
	case "memory.total":
		return number(gpu.FieldFBTotal)
	case "memory.used":
		return number(gpu.FieldFBUsed)
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
