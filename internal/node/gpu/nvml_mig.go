package gpu

// NVML's MIG hierarchy: the instances of each GPU and their profile names.

import (
	"strings"
)

type migName struct {
	profile   string
	placement int
}

// refreshMIG reads every GPU's MIG instances again: the DRA driver creates
// and destroys them (dynamic MIG) between two reads.
func (v *nvmlView) refreshMIG() {
	seen := map[string]bool{}
	for _, g := range v.gpus {
		g.instances = g.instances[:0]
		g.lost = false
		current, _, ret := g.dev.GetMigMode()
		if ret == NVMLGPUIsLost {
			g.lost = true
		}
		g.mig = ret == NVMLSuccess && current == nvmlDeviceMigEnable
		if !g.mig {
			continue
		}
		n, ret := g.dev.GetMaxMigDeviceCount()
		if ret != NVMLSuccess {
			continue
		}
		for i := range n {
			// An index without an instance answers NOT_FOUND.
			h, ret := g.dev.GetMigDeviceHandleByIndex(i)
			if ret != NVMLSuccess {
				continue
			}
			m := nvmlMIG{dev: h}
			if m.uuid, ret = h.GetUUID(); ret != NVMLSuccess {
				continue
			}
			if m.gi, ret = h.GetGpuInstanceId(); ret != NVMLSuccess {
				continue
			}
			name, ok := v.named[m.uuid]
			if !ok {
				name = v.nameOf(g, h, m.gi)
				v.named[m.uuid] = name
			}
			m.migName = name
			seen[m.uuid] = true
			g.instances = append(g.instances, m)
		}
	}
	for uuid := range v.named {
		if !seen[uuid] {
			delete(v.named, uuid)
		}
	}
}

// nameOf finds a MIG instance's profile name (the driver's, from the GPU
// instance profile table) and placement. The instance's profile ID and
// placement need GetGpuInstanceById, which NVML gives privileged callers
// only (nvml.h ~14035-14063: NO_PERMISSION otherwise); without it the
// profile is the one whose slices, memory and engines match the MIG
// device's attributes (which any caller may read), and the placement is
// unknown.
func (v *nvmlView) nameOf(g *nvmlGPU, h NVMLDevice, gi int) migName {
	out := migName{placement: -1}
	table := v.profileTable(g)
	profileID := -1
	if v.privileged {
		inst, ret := g.dev.GetGpuInstanceById(gi)
		if ret == NVMLSuccess {
			if info, ret := inst.GetInfo(); ret == NVMLSuccess {
				profileID, out.placement = int(info.ProfileID), int(info.PlacementStart)
			}
		} else if ret == NVMLNoPermission {
			v.privileged = false
		}
	}
	attrs, attrRet := h.GetAttributes()
	for _, p := range table {
		if profileID >= 0 {
			if int(p.ID) == profileID {
				out.profile = profileName(p.Name)
				return out
			}
			continue
		}
		if attrRet == NVMLSuccess && p.SliceCount == attrs.GpuInstanceSliceCount && p.MemorySizeMB == attrs.MemorySizeMB &&
			p.DecoderCount == attrs.SharedDecoderCount && p.JpegCount == attrs.SharedJpegCount && p.OfaCount == attrs.SharedOfaCount {
			out.profile = profileName(p.Name)
			return out
		}
	}
	return out
}

// profileName drops the "MIG " NVML puts before a GPU instance profile's
// name, leaving the driver's name as the DRA driver publishes it.
func profileName(s string) string { return strings.TrimPrefix(s, "MIG ") }

// profileTable lists the GPU instance profiles of a GPU: every profile index
// up to NVML_GPU_INSTANCE_PROFILE_COUNT, skipping the ones the GPU does
// not have (NOT_SUPPORTED, INVALID_ARGUMENT), as DCGM does
// (DcgmCacheManager.cpp ~344-380).
func (v *nvmlView) profileTable(g *nvmlGPU) []GpuInstanceProfileInfo {
	if t, ok := v.profiles[g.uuid]; ok {
		return t
	}
	var t []GpuInstanceProfileInfo
	for i := range nvmlGPUInstanceProfileCount {
		info, ret := g.dev.GetGpuInstanceProfileInfoV3(i)
		if ret == NVMLSuccess {
			t = append(t, info)
		}
	}
	v.profiles[g.uuid] = t
	return t
}
