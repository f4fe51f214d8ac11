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

// Field describes a DCGM field: its name and unit as DCGM documents them,
// and the factor that turns its value into the base unit of the metric.
type Field struct {
	ID    FieldID
	Name  string
	Unit  string
	Scale float64
}

// Fields lists every field the agent reads, in exposition order.
var Fields = []Field{
	{FieldGPUUtil, "DCGM_FI_DEV_GPU_UTIL", "percent", 0.01},
	{FieldFBUsed, "DCGM_FI_DEV_FB_USED", "MiB", 1 << 20},
	{FieldFBFree, "DCGM_FI_DEV_FB_FREE", "MiB", 1 << 20},
	{FieldFBTotal, "DCGM_FI_DEV_FB_TOTAL", "MiB", 1 << 20},
	{FieldPowerUsage, "DCGM_FI_DEV_POWER_USAGE", "W", 1},
	{FieldGPUTemp, "DCGM_FI_DEV_GPU_TEMP", "°C", 1},
	{FieldSMClock, "DCGM_FI_DEV_SM_CLOCK", "MHz", 1e6},
	{FieldXIDErrors, "DCGM_FI_DEV_XID_ERRORS", "XID code", 1},
	{FieldECCSBEVolTotal, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "errors", 1},
	{FieldECCDBEVolTotal, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "errors", 1},
	{FieldProfGrEngine, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio", 1},
	{FieldProfSMActive, "DCGM_FI_PROF_SM_ACTIVE", "ratio", 1},
	{FieldProfTensor, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", 1},
	{FieldProfDRAMActive, "DCGM_FI_PROF_DRAM_ACTIVE", "ratio", 1},
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
