package celmatch

import (
	"errors"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
)

const (
	gpuClassExpr = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
	migClassExpr = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
)

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }

func version(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: &s}
}

func selectors(exprs ...string) []resourceapi.DeviceSelector {
	out := make([]resourceapi.DeviceSelector, len(exprs))
	for i, e := range exprs {
		out[i] = resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}}
	}
	return out
}

// published is a device as a ResourceSlice publishes it.
type published struct {
	Driver     string
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
}

func (p published) compact() Device {
	return Device{Driver: p.Driver, Attributes: devattr.FromMap(p.Attributes), Capacity: p.Capacity}
}

// h100 is a full GPU as the NVIDIA DRA driver publishes it (bare attribute
// names, in the driver's domain).
func h100() published {
	return published{
		Driver: "gpu.nvidia.com",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":          str("gpu"),
			"uuid":          str("GPU-b5934649-3623-97fb-5b4f-8b87f2c54026"),
			"productName":   str("NVIDIA H100 80GB HBM3"),
			"driverVersion": version("580.65.6"),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("80Gi")},
		},
	}
}

func mig1g5gb() published {
	return published{
		Driver: "gpu.nvidia.com",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":        str("mig"),
			"uuid":        str("MIG-294fd434-9d22-6ff4-f6cc-d081dbef94c7"),
			"parentUUID":  str("GPU-70ec5640-0ec6-fa32-23f4-36522095143d"),
			"profile":     str("1g.5gb"),
			"productName": str("NVIDIA A100-SXM4-40GB"),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("4864Mi")},
		},
	}
}

func TestMatch(t *testing.T) {
	otherDriver := h100()
	otherDriver.Driver = "gpu.example.com"

	qualified := published{
		Driver: "gpu.nvidia.com",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"gpu.nvidia.com/type": str("gpu"),
			"gpu.nvidia.com/uuid": str("GPU-1"),
		},
	}
	small := h100()
	small.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("20Gi")}}

	tests := []struct {
		name      string
		selectors []resourceapi.DeviceSelector
		dev       published
		want      bool
	}{
		{"gpu class selects a full GPU", selectors(gpuClassExpr), h100(), true},
		{"gpu class does not select a MIG partition", selectors(gpuClassExpr), mig1g5gb(), false},
		{"mig class selects a MIG partition", selectors(migClassExpr), mig1g5gb(), true},
		{"mig class does not select a full GPU", selectors(migClassExpr), h100(), false},
		{"another driver's device is not selected", selectors(gpuClassExpr), otherDriver, false},
		{"qualified attribute names are the driver's domain", selectors(gpuClassExpr), qualified, true},
		{"no selectors select everything", nil, mig1g5gb(), true},
		{"a selector without CEL is ignored", []resourceapi.DeviceSelector{{}}, h100(), true},
		{"capacity at least 40Gi, device has 80Gi",
			selectors("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"), h100(), true},
		{"capacity at least 40Gi, device has 20Gi",
			selectors("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"), small, false},
		{"capacity exactly 80Gi written in bytes",
			selectors("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('85899345920')) == 0"), h100(), true},
		{"version attribute compared with semver",
			selectors("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))"), h100(), true},
		{"both selectors true",
			selectors(gpuClassExpr, "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"), h100(), true},
		{"first selector false, second true",
			selectors(migClassExpr, "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"), h100(), false},
		{"first selector true, second false",
			selectors(gpuClassExpr, "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"), h100(), false},
	}
	m := New()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Match(tt.selectors, tt.dev.compact())
			if err != nil {
				t.Fatalf("Match: unexpected error %v", err)
			}
			if got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMatchRuntimeError(t *testing.T) {
	m := New()
	// A full GPU has no profile attribute: the lookup fails at runtime.
	expr := "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
	ok, err := m.Match(selectors(expr), h100().compact())
	if ok {
		t.Errorf("a device on which the selector fails must not match")
	}
	if err == nil {
		t.Fatalf("want a runtime error for a missing attribute key, got nil")
	}
	if !strings.Contains(err.Error(), "runtime error") {
		t.Errorf("error %q does not say it is a runtime error", err)
	}
	if !strings.Contains(err.Error(), "profile") {
		t.Errorf("error %q does not name the missing key", err)
	}
	// The same expression on a device that has the key evaluates.
	ok, err = m.Match(selectors(expr), mig1g5gb().compact())
	if err != nil || !ok {
		t.Errorf("Match on a MIG device = %v, %v; want true, nil", ok, err)
	}
	// A runtime error is not a compile error: it is not cached as one.
	if err := m.Compile(selectors(expr)); err != nil {
		t.Errorf("Compile of an expression that fails only at runtime: %v", err)
	}
}

func TestMatchErrorNamesTheSelector(t *testing.T) {
	m := New()
	_, err := m.Match(selectors(gpuClassExpr, "device.attributes['gpu.nvidia.com'].profile == 'x'"), h100().compact())
	if err == nil {
		t.Fatal("want an error from the second selector")
	}
	if !strings.HasPrefix(err.Error(), "selector #1:") {
		t.Errorf("error %q does not name selector #1", err)
	}
}

func TestCompileErrorCached(t *testing.T) {
	m := New()
	bad := "device.driver == "
	sel := selectors(gpuClassExpr, bad)

	if err := m.Compile(selectors(gpuClassExpr)); err != nil {
		t.Fatalf("Compile of a valid selector: %v", err)
	}
	err1 := m.Compile(sel)
	if err1 == nil {
		t.Fatal("Compile of a broken selector returned nil")
	}
	if !strings.HasPrefix(err1.Error(), "selector #1:") || !strings.Contains(err1.Error(), "compile error") {
		t.Errorf("Compile error %q should name selector #1 and say compile error", err1)
	}

	m.mu.Lock()
	cached, ok := m.compileErrors[bad]
	m.mu.Unlock()
	if !ok {
		t.Fatalf("the compile error of %q is not cached", bad)
	}

	// Match reports the cached error (the same value), and does not match.
	for i := 0; i < 3; i++ {
		matched, err := m.Match(selectors(bad), h100().compact())
		if matched {
			t.Errorf("a selector that does not compile matched")
		}
		if !errors.Is(err, cached) {
			t.Errorf("Match error %v is not the cached compile error %v", err, cached)
		}
	}
	m.mu.Lock()
	n := len(m.compileErrors)
	m.mu.Unlock()
	if n != 1 {
		t.Errorf("compileErrors has %d entries, want 1 (only the broken expression)", n)
	}
}

func TestMatchConcurrent(t *testing.T) {
	m := New()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if ok, err := m.Match(selectors(gpuClassExpr), h100().compact()); !ok || err != nil {
					errs <- "gpu class on H100: " + errString(err)
				}
				if ok, err := m.Match(selectors(gpuClassExpr), mig1g5gb().compact()); ok || err != nil {
					errs <- "gpu class on MIG: " + errString(err)
				}
				if _, err := m.Match(selectors("device.driver =="), h100().compact()); err == nil {
					errs <- "broken selector gave no error"
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
		break
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
