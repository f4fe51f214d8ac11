package agent

// The device-plugin lane: which resources are GPUs, and the GPU (or MIG
// instance) each plugin's device ID names.

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// nvidiaDevice is the device-plugin ID of a GPU by its device file, as
// some plugins (GKE's) name GPUs.
var nvidiaDevice = regexp.MustCompile(`^nvidia([0-9]+)$`)

// GKE's plugin names a MIG instance nvidia<minor>/gi<GPU instance>, with
// /vgpu<n> under time-sharing, and a time-shared GPU nvidia<minor>/vgpu<n>
// (dcgm-exporter kubernetes.go, gkeMigDeviceIDRegex and "/vgpu").
var gkeMIG = regexp.MustCompile(`^nvidia([0-9]+)/gi([0-9]+)(/vgpu[0-9]+)?$`)

// NVIDIA's plugin with DEVICE_ID_STRATEGY=index names a GPU by its NVML
// index and a MIG device <gpu index>:<its position among the GPU's MIG
// devices> (k8s-device-plugin, setMigDeviceMapEntry: "%v:%v").
var (
	indexGPU = regexp.MustCompile(`^([0-9]+)$`)
	indexMIG = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
)

// devicePluginResource reports whether a device-plugin resource is a GPU
// one: a configured resource, or, with nvidia.com/gpu configured, the
// NVIDIA plugin's other names for its GPUs: nvidia.com/gpu.shared
// (time-slicing or MPS with renameByDefault) and nvidia.com/mig-<profile>
// (the mixed MIG strategy; dcgm-exporter takes the nvidia.com/mig- prefix
// the same way, kubernetes.go iterateGPUDevices).
func devicePluginResource(configured dra.Resources, name string) bool {
	if configured.Has(name) {
		return true
	}
	return configured.Has("nvidia.com/gpu") && (name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-"))
}

// devicePluginGPU returns the GPU or MIG UUID of a device-plugin device ID,
// "" when it names none. NVIDIA's device plugin uses the UUID, and with
// time-slicing or MPS the UUID and a replica number, GPU-<uuid>::<n>
// (dcgm-exporter strips it the same way: kubernetes.go ~697-701); other
// plugins name the device file, nvidia<minor>, which the GPU source maps.
func devicePluginGPU(id string, entities []gpu.Entity) string {
	id, _, _ = strings.Cut(id, "::")
	if n, ok := numbers(gkeMIG, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG != nil && e.Minor == n[0] && e.MIG.GPUInstanceID == n[1] })
	}
	id, _, _ = strings.Cut(id, "/vgpu")
	if n, ok := numbers(indexMIG, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG != nil && e.Index == n[0] && e.MIG.DeviceIndex == n[1] })
	}
	if n, ok := numbers(indexGPU, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG == nil && e.Index == n[0] })
	}
	if n, ok := numbers(nvidiaDevice, id); ok {
		return entityUUID(entities, func(e gpu.Entity) bool { return e.MIG == nil && e.Minor == n[0] })
	}
	if strings.HasPrefix(id, "GPU-") || strings.HasPrefix(id, "MIG-") {
		return id
	}
	return ""
}

// numbers returns the numbers re's groups capture in s.
func numbers(re *regexp.Regexp, s string) ([]int, bool) {
	m := re.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	out := make([]int, 0, len(m)-1)
	for _, g := range m[1:] {
		if g == "" || !unicode.IsDigit(rune(g[0])) {
			continue // an optional suffix such as /vgpu<n>
		}
		n, err := strconv.Atoi(g)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// entityUUID returns the UUID of the first entity that matches, "" when
// none does.
func entityUUID(entities []gpu.Entity, match func(gpu.Entity) bool) string {
	for _, e := range entities {
		if match(e) {
			return e.UUID
		}
	}
	return ""
}
