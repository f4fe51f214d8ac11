package devattr

import (
	"reflect"
	"testing"
	"unsafe"

	resourceapi "k8s.io/api/resource/v1"
)

func published() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	s, v := "NVIDIA H100 80GB HBM3", "580.65.6"
	i, b := int64(3), true
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"productName":                     {StringValue: &s},
		"driverVersion":                   {VersionValue: &v},
		"index":                           {IntValue: &i},
		"gpu.nvidia.com/mig.capable":      {BoolValue: &b},
		"resource.kubernetes.io/pcieRoot": {StringValues: []string{"pci0000:00", "pci0000:01"}},
		"ints":                            {IntValues: []int64{1, 2}},
		"bools":                           {BoolValues: []bool{false}},
		"versions":                        {VersionValues: []string{"1.0.0"}},
		// Not a valid union: kept as published, so that the CEL library
		// rejects it the same way.
		"empty": {},
		"two":   {IntValue: &i, StringValue: &s},
	}
}

func TestRoundTrip(t *testing.T) {
	in := published()
	a := FromMap(in)
	if a.Len() != len(in) {
		t.Fatalf("Len = %d, want %d", a.Len(), len(in))
	}
	if got := a.Map(); !reflect.DeepEqual(got, in) {
		t.Errorf("Map() = %v, want %v", got, in)
	}
	for name, want := range in {
		got, ok := a.Get(name)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Get(%s) = %v, %v; want %v", name, got, ok, want)
		}
	}
	if _, ok := a.Get("absent"); ok {
		t.Error("Get(absent) found something")
	}
	var prev resourceapi.QualifiedName
	for name := range a.All {
		if name <= prev {
			t.Errorf("All: %q after %q, not sorted", name, prev)
		}
		prev = name
	}
	if (Attributes{}).Map() != nil || FromMap(nil).Len() != 0 {
		t.Error("no attributes should be an empty Attributes and a nil map")
	}
}

func TestEqual(t *testing.T) {
	a, b := FromMap(published()), FromMap(published())
	if !a.Equal(b) {
		t.Error("the same attributes are not Equal")
	}
	for name, change := range map[string]func(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute){
		"string": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			x := "other"
			m["productName"] = resourceapi.DeviceAttribute{StringValue: &x}
		},
		"kind": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			x := "580.65.6"
			m["driverVersion"] = resourceapi.DeviceAttribute{StringValue: &x}
		},
		"int": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			x := int64(4)
			m["index"] = resourceapi.DeviceAttribute{IntValue: &x}
		},
		"bool": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			x := false
			m["gpu.nvidia.com/mig.capable"] = resourceapi.DeviceAttribute{BoolValue: &x}
		},
		"list": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			m["ints"] = resourceapi.DeviceAttribute{IntValues: []int64{1}}
		},
		"removed": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) { delete(m, "index") },
		"renamed": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			m["index2"] = m["index"]
			delete(m, "index")
		},
		"union": func(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) {
			m["empty"] = resourceapi.DeviceAttribute{IntValues: []int64{}}
		},
	} {
		m := published()
		change(m)
		if a.Equal(FromMap(m)) {
			t.Errorf("%s changed, still Equal", name)
		}
	}
}

// Reading an attribute is what every selector key and label does: it must
// not allocate.
func TestGetAllocatesNothing(t *testing.T) {
	a := FromMap(published())
	if n := testing.AllocsPerRun(100, func() {
		if v, ok := a.Get("productName"); !ok || v.StringValue == nil {
			t.Fatal("productName not found")
		}
	}); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
}

func TestIntern(t *testing.T) {
	x, y := string([]byte("gpu.nvidia.com")), string([]byte("gpu.nvidia.com"))
	if ix, iy := Intern(x), Intern(y); ix != x || unsafeData(ix) != unsafeData(iy) {
		t.Error("Intern does not return one copy for equal strings")
	}
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
