package gpufake

import (
	"errors"
	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// errShape is how go-dcgm v1.4611.0 returns a failed status from one of
// its calls: most wrap DCGM's message in plain text
// (fmt.Errorf("<prefix>%s", errorString(result)), where errorString is
// fmt.Errorf("%v", C.errorString(result)): utils.go ~58-64), so that no
// status code survives; a few return a coded *dcgm.Error (its Code and
// DCGM's message, Error() the message alone: utils.go ~50-56).
type errShape struct {
	coded bool
	// prefix is what go-dcgm writes before DCGM's message in a plain
	// error.
	prefix string
	// source is the upstream line that builds the error.
	source string
}

// dcgmErrShapes is the shape of each call the agent makes, as go-dcgm
// v1.4611.0 (pkg/dcgm) builds it. A call absent here is a programming
// error of the fake.
var dcgmErrShapes = map[string]errShape{
	// Init: plain on every path. Embedded: dcgmInit, then
	// dcgmStartEmbedded (admin.go:103, admin.go:109); standalone: dcgmInit
	// and dcgmConnect_v2 (admin.go:179, admin.go:194) or, for a
	// connection string, dcgmConnect_v3 (admin.go:214, admin.go:223).
	"Init/embedded":   {prefix: "error starting nv-hostengine: ", source: "admin.go:109"},
	"Init/standalone": {prefix: "error connecting to nv-hostengine: ", source: "admin.go:194"},
	// Coded: &Error{msg, Code} (device_info.go:95).
	"GetSupportedDevices": {coded: true, source: "device_info.go:95"},
	// Coded when dcgmGetDeviceAttributes fails (device_info.go:219);
	// later steps of the call (CPU affinity, PCIe bandwidth) fail plain
	// (device_info.go:199, device_info.go:135), which the fake never
	// reaches.
	"GetDeviceInfo":            {coded: true, source: "device_info.go:219"},
	"GetGPUInstanceHierarchy":  {prefix: "error retrieving DCGM MIG hierarchy: ", source: "mig.go:127"},
	"GetSupportedMetricGroups": {coded: true, source: "profile.go:34"},
	"CreateGroup":              {prefix: "error creating group: ", source: "gpu_group.go:59"},
	// The entity group and ID are printed with %v (gpu_group.go:109):
	// the fake's prefix is completed by the call.
	"AddEntityToGroup":  {prefix: "error adding entity group type %v, entity %v to group: ", source: "gpu_group.go:109"},
	"DestroyGroup":      {prefix: "error destroying group: ", source: "gpu_group.go:119"},
	"FieldGroupCreate":  {prefix: "error creating DCGM fields group: ", source: "fields.go:98"},
	"FieldGroupDestroy": {prefix: "error destroying DCGM fields group: ", source: "fields.go:110"},
	// dcgmWatchFields failing (fields.go:168); once it succeeds the call
	// runs UpdateAllFields and returns its error as is (fields.go:171-173).
	"WatchFieldsWithGroupEx": {prefix: "error watching fields: ", source: "fields.go:168"},
	// The bare errorString (fields.go:365, utils.go:63).
	"UpdateAllFields":         {source: "fields.go:365"},
	"EntitiesGetLatestValues": {coded: true, source: "fields.go:353"},
}

// dcgmFail returns status code as go-dcgm's call returns it; args complete
// a prefix that prints the call's arguments.
func dcgmFail(call string, code int, args ...any) error {
	shape, ok := dcgmErrShapes[call]
	if !ok {
		panic("gpufake: no go-dcgm error shape for " + call)
	}
	msg := gpu.DCGMErrorText(code)
	if shape.coded {
		return &gpu.DCGMError{Code: code, Msg: msg}
	}
	prefix := shape.prefix
	if len(args) > 0 {
		prefix = fmt.Sprintf(prefix, args...)
	}
	return errors.New(prefix + msg)
}
