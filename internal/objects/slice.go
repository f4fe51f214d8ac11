package objects

import (
	"maps"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
)

// Slice is a trimmed ResourceSlice whose devices' attributes are kept
// compact: Spec.Devices[i].Attributes is nil and Attributes[i] holds them.
// It is what the informer's store keeps and the index reads (a slice's
// attribute maps were a quarter of the heap at 100k GPUs).
type Slice struct {
	resourceapi.ResourceSlice
	Attributes []devattr.Attributes
}

// CompactSlice returns the trimmed, compact form of a ResourceSlice. It
// shares the parts it keeps with in, which must not be written afterwards
// (an informer's freshly decoded object, or one read from a file).
func CompactSlice(in *resourceapi.ResourceSlice) *Slice {
	out := &Slice{ResourceSlice: resourceapi.ResourceSlice{TypeMeta: in.TypeMeta, ObjectMeta: meta(in.ObjectMeta), Spec: in.Spec}}
	out.Labels = in.Labels
	out.OwnerReferences = in.OwnerReferences
	out.Spec.Driver = devattr.Intern(in.Spec.Driver)
	out.Spec.Pool.Name = devattr.Intern(in.Spec.Pool.Name)
	out.Spec.Devices = make([]resourceapi.Device, len(in.Spec.Devices))
	out.Attributes = make([]devattr.Attributes, len(in.Spec.Devices))
	for i, d := range in.Spec.Devices {
		out.Attributes[i] = devattr.FromMap(d.Attributes)
		d.Attributes = nil
		d.Name = devattr.Intern(d.Name)
		d.Capacity = shareCapacity(d.Capacity)
		out.Spec.Devices[i] = d
	}
	return out
}

// Device returns the i-th device as published, its attributes included.
func (s *Slice) Device(i int) resourceapi.Device {
	d := *s.Spec.Devices[i].DeepCopy()
	d.Attributes = s.Attributes[i].Map()
	return d
}

// Equal reports whether both hold the same slice, resourceVersion aside.
func (s *Slice) Equal(o *Slice) bool {
	if s == nil || o == nil {
		return s == o
	}
	if len(s.Attributes) != len(o.Attributes) {
		return false
	}
	for i := range s.Attributes {
		if !s.Attributes[i].Equal(o.Attributes[i]) {
			return false
		}
	}
	a, b := s.ResourceSlice, o.ResourceSlice
	a.ResourceVersion, b.ResourceVersion = "", ""
	return equality.Semantic.DeepEqual(&a, &b)
}

// DeepCopyObject copies the slice with its attributes (which are never
// written, so shared).
func (s *Slice) DeepCopyObject() runtime.Object {
	out := &Slice{Attributes: s.Attributes}
	s.ResourceSlice.DeepCopyInto(&out.ResourceSlice)
	return out
}

// capacities holds the distinct capacity maps seen, by content: the
// devices of one product publish the same one (memory: 80Gi), and a map
// of one entry takes about 700 bytes. Bounded: past maxCapacities, maps
// are kept as published.
var capacities = struct {
	sync.Mutex
	m map[string]map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
}{m: map[string]map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}}

const maxCapacities = 4096

// shareCapacity returns the kept map with the same content as m, or m.
// Maps with a request policy (consumable capacity) are not shared.
func shareCapacity(m map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	if len(m) == 0 {
		return m
	}
	var key strings.Builder
	for _, name := range slices.Sorted(maps.Keys(m)) {
		c := m[name]
		if c.RequestPolicy != nil {
			return m
		}
		key.WriteString(string(name))
		key.WriteByte(0)
		key.WriteString(c.Value.String())
		key.WriteByte(0)
		key.WriteString(string(c.Value.Format))
		key.WriteByte(0)
	}
	capacities.Lock()
	defer capacities.Unlock()
	if kept, ok := capacities.m[key.String()]; ok {
		return kept
	}
	if len(capacities.m) >= maxCapacities {
		return m
	}
	// A copy: the input may be written later (a test's object, reused).
	kept := maps.Clone(m)
	capacities.m[key.String()] = kept
	return kept
}
