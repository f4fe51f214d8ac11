package allocator

// Consumable capacity (KEP-5075): a device with allowMultipleAllocations is
// shared by claims, each taking part of its capacity (consumedCapacity in
// the allocation result). The arithmetic follows the scheduler's allocator
// (k8s.io/dynamic-resource-allocation/structured, CmpRequestOverCapacity),
// whose helpers are internal to that module.

import (
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// RemainingCapacity returns, for a shareable device, what is left of each
// capacity after the shared allocations' consumedCapacity; nil for other
// devices.
func (m *Model) RemainingCapacity(d *index.Device) map[resourceapi.QualifiedName]resource.Quantity {
	if !d.Shareable || len(d.Capacity) == 0 {
		return nil
	}
	var consumed map[resourceapi.QualifiedName]resource.Quantity
	if u := m.raw.Usage(d.Key); u != nil {
		consumed = u.Consumed
		m.s.AllocatedTo(d.Key) // what it reads: the claims holding the device
	}
	out := make(map[resourceapi.QualifiedName]resource.Quantity, len(d.Capacity))
	for name, c := range d.Capacity {
		left := c.Value.DeepCopy()
		if q, ok := consumed[name]; ok {
			left.Sub(q)
		}
		out[name] = left
	}
	return out
}

// CapacityShortfall describes the first capacity of the device that the
// demand does not fit ("" when all fit): for explain's evidence.
func (m *Model) CapacityShortfall(d *index.Device, dm Demand) string {
	if dm.Capacity != nil {
		for _, name := range slices.Sorted(maps.Keys(dm.Capacity.Requests)) {
			if _, ok := d.Capacity[name]; !ok {
				return "the device has no capacity " + string(name)
			}
		}
	}
	left := m.RemainingCapacity(d)
	for _, name := range slices.Sorted(maps.Keys(d.Capacity)) {
		c := d.Capacity[name]
		want, ok := demanded(name, c, dm, d.Shareable)
		if !ok {
			continue
		}
		if violatesPolicy(want, c.RequestPolicy) {
			return "the request's " + want.String() + " of " + string(name) + " is not a value the device's request policy allows"
		}
		rest, shared := left[name]
		if !shared {
			rest = c.Value
		}
		if rest.Cmp(want) < 0 || (dm.Least && want.IsZero() && !c.Value.IsZero() && rest.Sign() <= 0) {
			return rest.String() + " of " + c.Value.String() + " " + string(name) + " left, the request needs " + want.String()
		}
	}
	return ""
}

// capacityFits reports whether what is left of the device's capacity
// covers the demand, and the demand keeps to the device's request policy.
// Every device is checked (a request for more memory than a GPU has does
// not fit it); only shareable devices have anything consumed. With Least,
// devices that cannot be shared are not checked at all: a claim asking
// nothing of their capacity gets them whole.
func (m *Model) capacityFits(d *index.Device, dm Demand) bool {
	var consumed map[resourceapi.QualifiedName]resource.Quantity
	if u := m.raw.Usage(d.Key); u != nil {
		consumed = u.Consumed
	}
	return fitsCapacity(d, dm, consumed)
}

// fitsCapacity is capacityFits with what the device's shared allocations
// consumed.
func fitsCapacity(d *index.Device, dm Demand, consumed map[resourceapi.QualifiedName]resource.Quantity) bool {
	if dm.Least && !d.Shareable {
		return true
	}
	if dm.Capacity != nil {
		for name := range dm.Capacity.Requests {
			if _, ok := d.Capacity[name]; !ok {
				return false // the allocator skips a device without it
			}
		}
	}
	for name, c := range d.Capacity {
		want, ok := demanded(name, c, dm, d.Shareable)
		if !ok {
			continue
		}
		if violatesPolicy(want, c.RequestPolicy) {
			return false
		}
		total := want.DeepCopy()
		if q, ok := consumed[name]; ok {
			total.Add(q)
		}
		if total.Cmp(c.Value) > 0 {
			return false
		}
		if dm.Least && want.IsZero() && !c.Value.IsZero() && total.Cmp(c.Value) >= 0 {
			return false // any amount may be asked, but none is left
		}
	}
	return true
}

// demanded is what a request takes of one capacity (the allocator's
// calculateConsumedCapacity): the requested amount rounded up to the
// policy's step or next valid value; without a request, the policy's
// default, else the whole capacity. With Least, the least the policy
// allows (its minimum or first valid value; zero, meaning "some", when the
// policy allows any amount). ok is false when nothing is taken.
func demanded(name resourceapi.QualifiedName, c resourceapi.DeviceCapacity, dm Demand, shareable bool) (resource.Quantity, bool) {
	p := c.RequestPolicy
	if dm.Least {
		if !shareable {
			return resource.Quantity{}, false
		}
		switch {
		case p != nil && p.ValidRange != nil && p.ValidRange.Min != nil:
			return p.ValidRange.Min.DeepCopy(), true
		case p != nil && len(p.ValidValues) > 0:
			return p.ValidValues[0].DeepCopy(), true
		}
		return resource.Quantity{}, true
	}
	var req *resource.Quantity
	if dm.Capacity != nil {
		if q, ok := dm.Capacity.Requests[name]; ok {
			req = &q
		}
	}
	if req == nil {
		if p != nil && p.Default != nil {
			return p.Default.DeepCopy(), true
		}
		return c.Value.DeepCopy(), true
	}
	if p == nil {
		return req.DeepCopy(), true
	}
	switch {
	case p.ValidRange != nil && p.ValidRange.Min != nil:
		return roundUpRange(*req, *p.ValidRange), true
	case p.ValidValues != nil:
		for _, v := range p.ValidValues {
			if req.Cmp(v) <= 0 {
				return v.DeepCopy(), true
			}
		}
	}
	return req.DeepCopy(), true
}

// roundUpRange raises a request to the range's minimum, then to the next
// step above the minimum (milli-unit arithmetic, which holds every
// quantity a device publishes below 9.2e15 of its unit).
func roundUpRange(req resource.Quantity, r resourceapi.CapacityRequestPolicyRange) resource.Quantity {
	if req.Cmp(*r.Min) < 0 {
		return r.Min.DeepCopy()
	}
	if r.Step == nil || r.Step.MilliValue() <= 0 {
		return req.DeepCopy()
	}
	minM, stepM := r.Min.MilliValue(), r.Step.MilliValue()
	n := (req.MilliValue() - minM + stepM - 1) / stepM
	v := minM + n*stepM
	if v%1000 == 0 {
		return *resource.NewQuantity(v/1000, r.Step.Format)
	}
	return *resource.NewMilliQuantity(v, r.Step.Format)
}

// violatesPolicy is the allocator's check that an amount is one the
// policy allows: its default, within the range and on a step, or one of
// the valid values.
func violatesPolicy(v resource.Quantity, p *resourceapi.CapacityRequestPolicy) bool {
	if p == nil || (p.Default != nil && v.Cmp(*p.Default) == 0) {
		return false
	}
	switch {
	case p.ValidRange != nil:
		r := p.ValidRange
		if r.Max != nil && v.Cmp(*r.Max) > 0 {
			return true
		}
		if r.Step != nil && r.Min != nil && r.Step.MilliValue() > 0 {
			return (v.MilliValue()-r.Min.MilliValue())%r.Step.MilliValue() != 0
		}
	case len(p.ValidValues) > 0:
		return !slices.ContainsFunc(p.ValidValues, func(x resource.Quantity) bool { return v.Cmp(x) == 0 })
	}
	return false
}
