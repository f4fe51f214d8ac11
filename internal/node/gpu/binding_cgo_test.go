//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"testing"
)

// The binding's translation on go-dcgm's own error values, made without
// libdcgm: EntitiesGetLatestValues with no entity returns go-dcgm's coded
// newBadParameterError (fields.go:336-338, :256-260); FieldGroupCreate with
// no field returns its plain errors.New (fields.go:83-85). The coded one
// keeps its status through the binding, the plain one tells none.
func TestBindingTranslatesGoDCGMErrors(t *testing.T) {
	b := dcgmBinding{}
	_, err := b.EntitiesGetLatestValues(nil, nil, 0)
	var de *DCGMError
	if !errors.As(err, &de) || de.Code != StBadParam || de.Msg != DCGMErrorText(StBadParam) {
		t.Errorf("coded go-dcgm error through the binding: %#v, want *DCGMError{%d, %q}", err, StBadParam, DCGMErrorText(StBadParam))
	}
	if got := dcgmStatus(err); got != StBadParam {
		t.Errorf("status of %v: %d, want %d", err, got, StBadParam)
	}
	_, err = b.FieldGroupCreate("dra-exporter-test", nil)
	if err == nil || errors.As(err, &de) {
		t.Fatalf("plain go-dcgm error through the binding: %#v, want plain text", err)
	}
	if got := dcgmStatus(err); got != 0 {
		t.Errorf("status of %q: %d, want 0 (it names no DCGM status)", err, got)
	}
}

// goDCGMPlain builds a plain error as go-dcgm builds it for a failed
// status: errorString(result) is fmt.Errorf("%v", C.errorString(result))
// (utils.go:58-64), which the caller formats with %s after its prefix.
func goDCGMPlain(prefix string, code int) error {
	inner := fmt.Errorf("%v", DCGMErrorText(code))
	if prefix == "" {
		return inner
	}
	return fmt.Errorf(prefix+"%s", inner)
}

// The agent tells statuses from go-dcgm's plain text as from its codes:
// the profiling reasons and a lost host engine.
func TestStatusFromGoDCGMText(t *testing.T) {
	for _, c := range []struct {
		prefix string
		code   int
		reason string
	}{
		{"error watching fields: ", StRequiresRoot, ReasonNoPermission},
		{"error watching fields: ", StNoPermission, ReasonNoPermission},
		{"error watching fields: ", StProfilingLibraryError, ReasonProfilingModule},
		{"error watching fields: ", StProfilingNotSupported, ReasonUnsupported},
		{"error watching fields: ", StModuleNotLoaded, ReasonUnsupported},
		{"error watching fields: ", StInUse, ReasonFailed},
		{"error retrieving DCGM MIG hierarchy: ", StConnectionNotValid, ReasonFailed},
		{"", StConnectionNotValid, ReasonFailed},
	} {
		err := goDCGMPlain(c.prefix, c.code)
		if got := dcgmStatus(err); got != c.code {
			t.Errorf("status of %q: %d, want %d", err, got, c.code)
		}
		if got := unwatchedReason(err); got != c.reason {
			t.Errorf("reason of %q: %s, want %s", err, got, c.reason)
		}
		lost := errors.Is(dcgmErr("read", err), errConnectionLost)
		if lost != (c.code == StConnectionNotValid) {
			t.Errorf("%q: connection lost %v", err, lost)
		}
	}
	if got := dcgmStatus(errors.New("libdcgm.so.4 not found")); got != 0 {
		t.Errorf("go-dcgm's missing-library error (admin.go:68) read as status %d", got)
	}
}
