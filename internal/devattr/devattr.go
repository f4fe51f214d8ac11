// Package devattr keeps a device's attributes compact. A ResourceSlice
// publishes them as a map of DeviceAttribute, a union of eight pointers and
// slices (128 bytes in k8s 1.37): ten attributes take about 2.5 KB a device
// in the map alone, the largest part of the exporter's heap at 100k GPUs.
// Here they are a list sorted by name of small values (56 bytes each), with
// names and shared values interned, and a DeviceAttribute is handed out on
// demand pointing into the list, so that reading one allocates nothing.
package devattr

import (
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// Attributes are a device's attributes, sorted by name. The zero value has
// none. An Attributes is never written once made: DeviceAttributes handed
// out point into it.
type Attributes struct {
	list []attribute
}

type attribute struct {
	name resourceapi.QualifiedName
	value
}

// value is one of the union's members: kind says which. List values (the
// alpha DRAListTypeAttributes) and a union with no member or several are
// kept as published.
type value struct {
	str  string // kindString, kindVersion
	num  int64  // kindInt
	kept *resourceapi.DeviceAttribute
	kind kind
	flag bool // kindBool
}

type kind uint8

const (
	kindKept kind = iota
	kindInt
	kindBool
	kindString
	kindVersion
)

// Intern returns the canonical copy of s: a fleet publishes the same names
// and most of the same values (product, architecture, driver version, node
// and namespace names) on every device, pod and claim, and a decoded
// object's strings are each an allocation of their own. The table is
// bounded (maxInterned strings of at most maxInternedLen bytes); past it a
// string is returned as it is.
func Intern(s string) string {
	if s == "" || len(s) > maxInternedLen {
		return s
	}
	interned.RLock()
	c, ok := interned.m[s]
	interned.RUnlock()
	if ok {
		return c
	}
	interned.Lock()
	defer interned.Unlock()
	if c, ok := interned.m[s]; ok {
		return c
	}
	if len(interned.m) >= maxInterned {
		return s
	}
	interned.m[s] = s
	return s
}

const (
	maxInterned    = 1 << 17
	maxInternedLen = 64
)

var interned = struct {
	sync.RWMutex
	m map[string]string
}{m: map[string]string{}}

// FromMap returns the attributes of a published map.
func FromMap(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) Attributes {
	if len(m) == 0 {
		return Attributes{}
	}
	list := make([]attribute, 0, len(m))
	for name, a := range m {
		list = append(list, attribute{name: resourceapi.QualifiedName(Intern(string(name))), value: valueOf(a)})
	}
	slices.SortFunc(list, func(a, b attribute) int { return strings.Compare(string(a.name), string(b.name)) })
	return Attributes{list: list}
}

func valueOf(a resourceapi.DeviceAttribute) value {
	members := 0
	for _, set := range []bool{a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil, a.VersionValue != nil,
		a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.VersionValues != nil} {
		if set {
			members++
		}
	}
	switch {
	case members != 1:
	case a.IntValue != nil:
		return value{kind: kindInt, num: *a.IntValue}
	case a.BoolValue != nil:
		return value{kind: kindBool, flag: *a.BoolValue}
	case a.StringValue != nil:
		return value{kind: kindString, str: Intern(*a.StringValue)}
	case a.VersionValue != nil:
		return value{kind: kindVersion, str: Intern(*a.VersionValue)}
	}
	kept := a.DeepCopy()
	return value{kind: kindKept, kept: kept}
}

// Len is the number of attributes.
func (a Attributes) Len() int { return len(a.list) }

// Get returns the attribute of that exact name. The DeviceAttribute points
// into a and must not be written.
func (a Attributes) Get(name resourceapi.QualifiedName) (resourceapi.DeviceAttribute, bool) {
	i, ok := slices.BinarySearchFunc(a.list, name, func(e attribute, n resourceapi.QualifiedName) int {
		return strings.Compare(string(e.name), string(n))
	})
	if !ok {
		return resourceapi.DeviceAttribute{}, false
	}
	return a.list[i].attribute(), true
}

// attribute is the published union; it points into the list.
func (e *attribute) attribute() resourceapi.DeviceAttribute {
	switch e.kind {
	case kindInt:
		return resourceapi.DeviceAttribute{IntValue: &e.num}
	case kindBool:
		return resourceapi.DeviceAttribute{BoolValue: &e.flag}
	case kindString:
		return resourceapi.DeviceAttribute{StringValue: &e.str}
	case kindVersion:
		return resourceapi.DeviceAttribute{VersionValue: &e.str}
	}
	return *e.kept
}

// All yields the attributes in name order. The DeviceAttributes point into
// a and must not be written.
func (a Attributes) All(yield func(resourceapi.QualifiedName, resourceapi.DeviceAttribute) bool) {
	for i := range a.list {
		if !yield(a.list[i].name, a.list[i].attribute()) {
			return
		}
	}
}

// Map returns the attributes as a ResourceSlice publishes them, for the CEL
// library. Its values point into a and must not be written.
func (a Attributes) Map() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	if len(a.list) == 0 {
		return nil
	}
	m := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(a.list))
	for name, v := range a.All {
		m[name] = v
	}
	return m
}

// Equal reports whether both hold the same attributes.
func (a Attributes) Equal(b Attributes) bool {
	return slices.EqualFunc(a.list, b.list, func(x, y attribute) bool {
		if x.name != y.name || x.kind != y.kind || x.str != y.str || x.num != y.num || x.flag != y.flag {
			return false
		}
		return x.kind != kindKept || equalKept(x.kept, y.kept)
	})
}

func equalKept(a, b *resourceapi.DeviceAttribute) bool {
	return slices.Equal(a.IntValues, b.IntValues) && slices.Equal(a.BoolValues, b.BoolValues) &&
		slices.Equal(a.StringValues, b.StringValues) && slices.Equal(a.VersionValues, b.VersionValues) &&
		equalPtr(a.IntValue, b.IntValue) && equalPtr(a.BoolValue, b.BoolValue) &&
		equalPtr(a.StringValue, b.StringValue) && equalPtr(a.VersionValue, b.VersionValue) &&
		(a.IntValues == nil) == (b.IntValues == nil) && (a.BoolValues == nil) == (b.BoolValues == nil) &&
		(a.StringValues == nil) == (b.StringValues == nil) && (a.VersionValues == nil) == (b.VersionValues == nil)
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
