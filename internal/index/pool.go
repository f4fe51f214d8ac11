package index

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// PoolKey names a resource pool.
type PoolKey struct {
	Driver string
	Pool   string
}

// pool holds the slices of one pool. Only slices of the newest generation
// publish devices: a driver bumps the generation when it republishes, and
// slices of the older generation are stale until it deletes them.
type pool struct {
	slices     map[string]*objects.Slice
	generation int64
	devices    map[string]*Device
	// counters are the pool's shared counter sets (newest generation):
	// counter set -> counter -> value.
	counters map[string]map[string]resource.Quantity
	// problem says why the scheduler allocates nothing from the pool now
	// ("" when it may): incomplete, or invalid.
	problem string
}

func (ix *Index) upsertSlice(s *objects.Slice) {
	pk := PoolKey{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
	if old, ok := ix.sliceToPool[s.Name]; ok && old != pk {
		ix.removeSliceFromPool(s.Name, old)
	}
	ix.sliceToPool[s.Name] = pk
	p := ix.pools[pk]
	if p == nil {
		p = &pool{slices: map[string]*objects.Slice{}, devices: map[string]*Device{}}
		ix.pools[pk] = p
	}
	p.slices[s.Name] = s
	ix.rebuildPool(pk, p)
}

func (ix *Index) deleteSlice(name string) {
	pk, ok := ix.sliceToPool[name]
	if !ok {
		return
	}
	delete(ix.sliceToPool, name)
	ix.removeSliceFromPool(name, pk)
}

func (ix *Index) removeSliceFromPool(name string, pk PoolKey) {
	p := ix.pools[pk]
	if p == nil {
		return
	}
	delete(p.slices, name)
	ix.rebuildPool(pk, p)
	if len(p.slices) == 0 {
		delete(ix.pools, pk)
	}
}

// rebuildPool recomputes the devices of a pool after one of its slices
// changed, keeping the entries of devices whose slice did not change so that
// their class matches need not be evaluated again.
func (ix *Index) rebuildPool(pk PoolKey, p *pool) {
	p.generation = 0
	for _, s := range p.slices {
		p.generation = max(p.generation, s.Spec.Pool.Generation)
	}
	names := slices.Sorted(maps.Keys(p.slices))
	devices := make(map[string]*Device, len(p.devices))
	counters := map[string]map[string]resource.Quantity{}
	var current []*objects.Slice
	problem := ""
	for _, name := range names {
		s := p.slices[name]
		if s.Spec.Pool.Generation != p.generation {
			continue
		}
		current = append(current, s)
		for _, cs := range s.Spec.SharedCounters {
			set := counters[cs.Name]
			if set != nil && problem == "" {
				problem = fmt.Sprintf("invalid: counter set %s is published twice", cs.Name)
			}
			if set == nil {
				set = map[string]resource.Quantity{}
				counters[cs.Name] = set
			}
			for cname, c := range cs.Counters {
				set[cname] = c.Value
			}
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if _, dup := devices[d.Name]; dup {
				if problem == "" {
					problem = fmt.Sprintf("invalid: device %s is published twice", d.Name)
				}
				continue // the first slice by name wins
			}
			if old := p.devices[d.Name]; old != nil && old.slice == s {
				devices[d.Name] = old
				continue
			}
			devices[d.Name] = ix.newDevice(pk, s, i)
		}
	}
	for name, old := range p.devices {
		if _, ok := devices[name]; !ok {
			delete(ix.devices, old.Key)
		}
	}
	for _, d := range devices {
		ix.devices[d.Key] = d
	}
	p.devices = devices
	p.counters = counters
	p.problem = poolProblem(current, devices, counters, problem)
}

// poolProblem says, as the scheduler's allocator (structured.GatherPools)
// decides, why no device of the pool can be allocated now: fewer slices of
// the newest generation than resourceSliceCount (the driver is
// republishing), a device consuming a counter the pool does not publish, or
// the duplicate found while reading the slices. A resourceSliceCount of 0
// (hand-written objects; the API requires at least 1) checks nothing.
func poolProblem(current []*objects.Slice, devices map[string]*Device, counters map[string]map[string]resource.Quantity, dup string) string {
	if len(current) > 0 {
		if want := current[0].Spec.Pool.ResourceSliceCount; want > 0 && int64(len(current)) != want {
			return fmt.Sprintf("incomplete: %d of %d slices published", len(current), want)
		}
	}
	if dup != "" {
		return dup
	}
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		for _, cc := range devices[name].Counters {
			set, ok := counters[cc.CounterSet]
			if !ok {
				return fmt.Sprintf("invalid: device %s consumes counter set %s, which the pool does not publish", name, cc.CounterSet)
			}
			for _, c := range slices.Sorted(maps.Keys(cc.Counters)) {
				if _, ok := set[c]; !ok {
					return fmt.Sprintf("invalid: device %s consumes counter %s, which counter set %s does not have", name, c, cc.CounterSet)
				}
			}
		}
	}
	return ""
}

func (ix *Index) newDevice(pk PoolKey, s *objects.Slice, i int) *Device {
	d := &s.Spec.Devices[i]
	dev := &Device{
		Key:        DeviceKey{Driver: pk.Driver, Pool: pk.Pool, Device: d.Name},
		Slice:      s.Name,
		slice:      s,
		Attributes: s.Attributes[i],
		Capacity:   d.Capacity,
		Counters:   d.ConsumesCounters,
		Taints:     d.Taints,
		Shareable:  d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations,
	}
	switch {
	case d.NodeName != nil:
		dev.Node = *d.NodeName
	case s.Spec.NodeName != nil && d.NodeSelector == nil && (d.AllNodes == nil || !*d.AllNodes):
		dev.Node = *s.Spec.NodeName
	}
	dev.GPUUUID, _ = dev.Attribute("uuid")
	for _, c := range ix.classes {
		ix.matchClass(dev, c)
	}
	sort.Strings(dev.Classes)
	return dev
}

// matchClass evaluates the class selectors on the device and records the
// result on it. The device must not yet be visible to a snapshot.
func (ix *Index) matchClass(dev *Device, c *Class) {
	ok, err := ix.matcher.Match(c.Selectors, celmatch.Device{Driver: dev.Key.Driver, Attributes: dev.Attributes, Capacity: dev.Capacity})
	if err != nil {
		// The map may be shared with a device a snapshot holds: copy it.
		errs := maps.Clone(dev.ClassErrors)
		if errs == nil {
			errs = map[string]string{}
		}
		errs[c.Name] = err.Error()
		dev.ClassErrors = errs
		return
	}
	if ok {
		dev.Classes = append(dev.Classes, c.Name)
	}
}

// rematchClass re-evaluates one class on every device. Devices are
// immutable once a snapshot may hold them, so a device whose membership
// changes is replaced by a copy.
func (ix *Index) rematchClass(name string) {
	c := ix.classes[name]
	for _, p := range ix.pools {
		for dname, dev := range p.devices {
			next := dev.withoutClass(name)
			if c != nil {
				ix.matchClass(next, c)
				sort.Strings(next.Classes)
			}
			if slices.Equal(next.Classes, dev.Classes) && next.ClassErrors[name] == dev.ClassErrors[name] {
				continue
			}
			p.devices[dname] = next
			ix.devices[next.Key] = next
		}
	}
}

// withoutClass returns a copy of the device that is not a member of the class.
func (d *Device) withoutClass(name string) *Device {
	next := *d
	next.Classes = slices.DeleteFunc(slices.Clone(d.Classes), func(c string) bool { return c == name })
	if _, ok := d.ClassErrors[name]; ok {
		next.ClassErrors = maps.Clone(d.ClassErrors)
		delete(next.ClassErrors, name)
		if len(next.ClassErrors) == 0 {
			next.ClassErrors = nil
		}
	}
	return &next
}
