package celmatch

import (
	"context"
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

func TestReadsOf(t *testing.T) {
	nv := func(ids ...string) []qualified {
		var out []qualified
		for _, id := range ids {
			out = append(out, qualified{"gpu.nvidia.com", id})
		}
		return out
	}
	tests := []struct {
		expr       string
		attributes []qualified
		capacity   []qualified
		usable     bool
	}{
		{gpuClassExpr, nv("type"), nil, true},
		{"device.attributes['gpu.nvidia.com']['productName'] == 'x' && device.attributes['gpu.nvidia.com'].productName != 'y'", nv("productName"), nil, true},
		{"has(device.attributes['gpu.nvidia.com'].profile) && device.attributes['example.com/x'].mode == 'a'", append([]qualified{{"example.com/x", "mode"}}, nv("profile")...), nil, true},
		{"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0", nil, nv("memory"), true},
		{"[1, 2].exists(i, i == device.attributes['gpu.nvidia.com'].index)", nv("index"), nil, true},
		{"device.driver == 'gpu.nvidia.com'", nil, nil, true},
		{"device.attributes['gpu.nvidia.com'][?'index'].orValue(0) == 1", nv("index"), nil, true},
		// Not by constant names: the whole device, a domain map, a computed key,
		// a shadowed variable.
		{"device.attributes['gpu.nvidia.com'].size() > 0", nil, nil, false},
		{"'type' in device.attributes['gpu.nvidia.com']", nil, nil, false},
		{"device.attributes.exists(d, d == 'gpu.nvidia.com')", nil, nil, false},
		{"device.attributes[device.driver].type == 'gpu'", nil, nil, false},
		{"device.attributes['gpu.nvidia.com']['ty' + 'pe'] == 'gpu'", nil, nil, false},
		{"cel.bind(a, device.attributes['gpu.nvidia.com'], a.type == 'gpu')", nil, nil, false},
		{"[1].exists(device, device == 1)", nil, nil, false},
	}
	m := New()
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			prog, err := m.compile(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			r, usable := readsOf(prog.Environment, tt.expr)
			if usable != tt.usable {
				t.Fatalf("usable = %v, want %v (reads %+v)", usable, tt.usable, r)
			}
			if !usable {
				return
			}
			if !slices.Equal(r.attributes, tt.attributes) || !slices.Equal(r.capacity, tt.capacity) {
				t.Errorf("reads = %+v, want attributes %+v capacity %+v", r, tt.attributes, tt.capacity)
			}
		})
	}
}

// TestValueResultsMatchEveryDeviceOnItsOwn compares, over expressions of
// every form and devices that differ in what the expressions read (or in
// what they do not), the matcher's answers with an evaluation of each
// device on its own: results kept by value must never be another device's.
func TestValueResultsMatchEveryDeviceOnItsOwn(t *testing.T) {
	exprs := []string{
		gpuClassExpr,
		migClassExpr,
		"device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H')",
		"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'",
		"has(device.attributes['gpu.nvidia.com'].profile)",
		"device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
		"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
		"device.attributes['gpu.nvidia.com'].index == 3",
		"device.attributes['gpu.nvidia.com'].uuid.endsWith('7')",
		"device.attributes['example.com/x'].mode == 'a'",
		"device.attributes['gpu.nvidia.com'].size() > 4",
		"device.attributes['gpu.nvidia.com'][?'index'].orValue(0) == 1",
		"device.driver == 'gpu.nvidia.com'",
	}
	var devices []published
	for i := range 48 {
		d := h100()
		d.Attributes["uuid"] = str(fmt.Sprintf("GPU-%d", i))
		idx := int64(i % 8)
		d.Attributes["index"] = resourceapi.DeviceAttribute{IntValue: &idx}
		switch i % 12 {
		case 1:
			d.Attributes["productName"] = str("NVIDIA A100-SXM4-40GB")
			d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}}
		case 2:
			d = mig1g5gb()
		case 3:
			d.Driver = "gpu.example.com" // bare names are another domain
		case 4:
			// Qualified with the driver's domain instead of bare.
			d.Attributes["gpu.nvidia.com/type"] = d.Attributes["type"]
			delete(d.Attributes, "type")
		case 5:
			// Both bare and qualified (the library keeps either, by
			// map order: the same value, so that it answers one way).
			d.Attributes["gpu.nvidia.com/type"] = str("gpu")
		case 6:
			// An attribute no expression reads fails to convert.
			d.Attributes["firmware"] = version("not-a-version")
		case 7:
			d.Attributes["driverVersion"] = version("535.1.0")
		case 8:
			d.Attributes["example.com/x/mode"] = str("a")
		case 9:
			d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("85899345920")}}
		case 10:
			d.Attributes["extra"] = resourceapi.DeviceAttribute{StringValues: []string{"a", "b"}}
		case 11:
			delete(d.Attributes, "productName")
		}
		devices = append(devices, d)
	}
	m := New()
	own := New()
	for _, expr := range exprs {
		prog, err := own.compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		for pass := range 2 {
			for i, d := range devices {
				got, gotErr := m.Match(selectors(expr), d.compact())
				// The library on the map as published: compacting
				// changes no answer.
				want, _, wantErr := prog.DeviceMatches(context.Background(), dracel.Device{Driver: d.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
				if wantErr != nil {
					wantErr = fmt.Errorf("selector #0: CEL runtime error: %w", dracel.EnhanceRuntimeError(wantErr))
				}
				if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
					t.Errorf("pass %d, %s on device %d: got %v, %v; evaluated alone %v, %v", pass, expr, i, got, gotErr, want, wantErr)
				}
			}
		}
	}
	// Evaluated: per expression, the distinct values read, the devices
	// that cannot be keyed, and every device for expressions that read
	// per-device values or whole maps. Far fewer than every device twice.
	if n, all := m.evaluations.Load(), int64(2*len(exprs)*len(devices)); n > all/3 {
		t.Errorf("%d of %d matches evaluated CEL: results by value are not kept", n, all)
	}
}
