//go:build !cgo

package gpu

// CGO says whether this build links go-dcgm and go-nvml: both are cgo
// bindings, so a CGO_ENABLED=0 build has neither.
const CGO = false

// Libraries returns no library: the DCGM and NVML sources of this build
// report themselves unavailable.
func Libraries() (DCGMLib, NVMLLib) { return nil, nil }
