package gpu

// FieldID is a DCGM field identifier (dcgm_fields.h). The numbers are
// stable across DCGM releases; go-dcgm v1.4611.0 renamed some of them
// (DCGM_FI_DEV_GPU_UTIL is an alias of DCGM_FI_DEV_GPU_UTIL_RATIO, with the
// same ID 203 and the same unit, percent).
type FieldID uint16

// The fields the agent reads.
const (
	FieldSMClock        FieldID = 100  // DCGM_FI_DEV_SM_CLOCK, MHz
	FieldGPUTemp        FieldID = 150  // DCGM_FI_DEV_GPU_TEMP, °C
	FieldPowerUsage     FieldID = 155  // DCGM_FI_DEV_POWER_USAGE, W
	FieldGPUUtil        FieldID = 203  // DCGM_FI_DEV_GPU_UTIL, percent
	FieldXIDErrors      FieldID = 230  // DCGM_FI_DEV_XID_ERRORS, last XID code
	FieldFBTotal        FieldID = 250  // DCGM_FI_DEV_FB_TOTAL, MiB
	FieldFBFree         FieldID = 251  // DCGM_FI_DEV_FB_FREE, MiB
	FieldFBUsed         FieldID = 252  // DCGM_FI_DEV_FB_USED, MiB
	FieldECCSBEVolTotal FieldID = 310  // DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, count
	FieldECCDBEVolTotal FieldID = 311  // DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, count
	FieldProfGrEngine   FieldID = 1001 // DCGM_FI_PROF_GR_ENGINE_ACTIVE, ratio
	FieldProfSMActive   FieldID = 1002 // DCGM_FI_PROF_SM_ACTIVE, ratio
	FieldProfTensor     FieldID = 1004 // DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, ratio
	FieldProfDRAMActive FieldID = 1005 // DCGM_FI_PROF_DRAM_ACTIVE, ratio
)

// FieldName is DCGM_FI_DEV_NAME: on a GPU-instance entity, the name of its
// profile (DcgmCacheManager.cpp ~10313-10334; dcgm-exporter reads it so,
// device_info.go ~349-363).
const FieldName FieldID = 50

// Field describes a DCGM field: its name and unit as DCGM documents them,
// and the factor that turns its value into the base unit of the metric.
type Field struct {
	ID    FieldID
	Name  string
	Unit  string
	Scale float64
	// Instance marks a field a MIG instance has of its own (framebuffer,
	// profiling). The others are the board's: DCGM answers them on a
	// GPU-instance entity with the parent GPU's value
	// (DcgmCacheManager.cpp ~2330-2357), so they are read on GPUs only.
	Instance bool
	// Profiling marks a DCGM_FI_PROF_* field: it needs DCGM's profiling
	// module and lock, and is watched apart from the basic fields.
	Profiling bool
}

// Fields lists every field the agent reads, in exposition order.
var Fields = []Field{
	{ID: FieldGPUUtil, Name: "DCGM_FI_DEV_GPU_UTIL", Unit: "percent", Scale: 0.01},
	{ID: FieldFBUsed, Name: "DCGM_FI_DEV_FB_USED", Unit: "MiB", Scale: 1 << 20, Instance: true},
	{ID: FieldFBFree, Name: "DCGM_FI_DEV_FB_FREE", Unit: "MiB", Scale: 1 << 20, Instance: true},
	{ID: FieldFBTotal, Name: "DCGM_FI_DEV_FB_TOTAL", Unit: "MiB", Scale: 1 << 20, Instance: true},
	{ID: FieldPowerUsage, Name: "DCGM_FI_DEV_POWER_USAGE", Unit: "W", Scale: 1},
	{ID: FieldGPUTemp, Name: "DCGM_FI_DEV_GPU_TEMP", Unit: "°C", Scale: 1},
	{ID: FieldSMClock, Name: "DCGM_FI_DEV_SM_CLOCK", Unit: "MHz", Scale: 1e6},
	// XID's entity level is the compute instance (dcgm_fields.cpp
	// :2323-2331): an instance's XIDs are its own, not the board's.
	{ID: FieldXIDErrors, Name: "DCGM_FI_DEV_XID_ERRORS", Unit: "XID code", Scale: 1, Instance: true},
	{ID: FieldECCSBEVolTotal, Name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Unit: "errors", Scale: 1},
	{ID: FieldECCDBEVolTotal, Name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Unit: "errors", Scale: 1},
	{ID: FieldProfGrEngine, Name: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", Unit: "ratio", Scale: 1, Instance: true, Profiling: true},
	{ID: FieldProfSMActive, Name: "DCGM_FI_PROF_SM_ACTIVE", Unit: "ratio", Scale: 1, Instance: true, Profiling: true},
	{ID: FieldProfTensor, Name: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Unit: "ratio", Scale: 1, Instance: true, Profiling: true},
	{ID: FieldProfDRAMActive, Name: "DCGM_FI_PROF_DRAM_ACTIVE", Unit: "ratio", Scale: 1, Instance: true, Profiling: true},
}

// fieldIDs returns the IDs of the fields that pass keep.
func fieldIDs(keep func(Field) bool) []FieldID {
	var out []FieldID
	for _, f := range Fields {
		if keep(f) {
			out = append(out, f.ID)
		}
	}
	return out
}

// FieldByName finds a field by its DCGM name.
func FieldByName(name string) (Field, bool) {
	for _, f := range Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// FieldByID finds a field by its ID.
func FieldByID(id FieldID) (Field, bool) {
	for _, f := range Fields {
		if f.ID == id {
			return f, true
		}
	}
	return Field{}, false
}
