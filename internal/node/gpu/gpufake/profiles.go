package gpufake

import (
	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// profile is a row of a GPU's GPU instance profile table: what
// nvmlDeviceGetGpuInstanceProfileInfoV answers for a profile index
// (nvml.h ~13862; the index constants are NVML_GPU_INSTANCE_PROFILE_*).
type profile struct {
	index int
	gpu.GpuInstanceProfileInfo
}

// h100Profiles is the table of an H100 80GB as the driver names its
// profiles. The names carry the driver's own rounding and suffixes
// (+me: the media extensions, GPU_INSTANCE_PROFILE_1_SLICE_REV1), which
// DCGM's own name of an instance does not (DcgmCacheManager.cpp ~380-383
// makes "<slices>g.<ceil(MiB/1024)>gb" from the slice count and memory).
var h100Profiles = []profile{
	{0, gpu.GpuInstanceProfileInfo{ID: 19, SliceCount: 1, MultiprocessorCount: 16, CopyEngineCount: 1, DecoderCount: 1, MemorySizeMB: 9984, Name: "MIG 1g.10gb"}},
	{1, gpu.GpuInstanceProfileInfo{ID: 14, SliceCount: 2, MultiprocessorCount: 32, CopyEngineCount: 2, DecoderCount: 2, MemorySizeMB: 20096, Name: "MIG 2g.20gb"}},
	{2, gpu.GpuInstanceProfileInfo{ID: 9, SliceCount: 3, MultiprocessorCount: 60, CopyEngineCount: 3, DecoderCount: 3, MemorySizeMB: 40320, Name: "MIG 3g.40gb"}},
	{3, gpu.GpuInstanceProfileInfo{ID: 5, SliceCount: 4, MultiprocessorCount: 64, CopyEngineCount: 4, DecoderCount: 4, MemorySizeMB: 40320, Name: "MIG 4g.40gb"}},
	{4, gpu.GpuInstanceProfileInfo{ID: 0, SliceCount: 7, MultiprocessorCount: 132, CopyEngineCount: 8, DecoderCount: 7, JpegCount: 7, OfaCount: 1, MemorySizeMB: 80896, Name: "MIG 7g.80gb"}},
	{7, gpu.GpuInstanceProfileInfo{ID: 20, SliceCount: 1, MultiprocessorCount: 16, CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, OfaCount: 1, MemorySizeMB: 9984, Name: "MIG 1g.10gb+me"}},
	{9, gpu.GpuInstanceProfileInfo{ID: 15, SliceCount: 1, MultiprocessorCount: 26, CopyEngineCount: 1, DecoderCount: 1, MemorySizeMB: 20096, Name: "MIG 1g.20gb"}},
}

// maxMigDevices is nvmlDeviceGetMaxMigDeviceCount of an H100 (7 GPCs): DCGM
// numbers GPU instances gpuId * maxGpcs + their enumeration index
// (DcgmCacheManager.cpp ~919-943).
const maxMigDevices = 7

func profileByName(name string) (profile, bool) {
	for _, p := range h100Profiles {
		if p.Name == "MIG "+name {
			return p, true
		}
	}
	return profile{}, false
}

func profileByIndex(index int) (profile, gpu.NVMLReturn) {
	// NVML_GPU_INSTANCE_PROFILE_COUNT is 18 in go-nvml v0.13.4-1: above
	// it INVALID_ARGUMENT, below it a profile the GPU lacks is
	// NOT_SUPPORTED (the two DCGM's iterator skips, ~356-377).
	if index < 0 || index >= 18 {
		return profile{}, gpu.NVMLInvalidArgument
	}
	for _, p := range h100Profiles {
		if p.index == index {
			return p, gpu.NVMLSuccess
		}
	}
	return profile{}, gpu.NVMLNotSupported
}

// dcgmProfileName is DCGM's own name of a GPU instance's profile, as
// DCGM_FI_DEV_NAME answers it on the GPU-instance entity
// (DcgmCacheManager.cpp ~380-383, ~10313-10334).
func dcgmProfileName(p profile) string {
	return fmt.Sprintf("%dg.%dgb", p.SliceCount, (p.MemorySizeMB+1023)/1024)
}
