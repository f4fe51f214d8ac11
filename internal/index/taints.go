package index

// Which claims hold a device, why its pool gives out nothing, and its
// taints: the joins the allocator model (internal/allocator) reads.

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// AllocatedTo returns the claims a device is allocated to (admin-access
// allocations excluded).
func (s *Snapshot) AllocatedTo(k DeviceKey) []*Claim {
	if u := s.usage[k]; u != nil {
		return tracedAll(s, u.Claims)
	}
	return nil
}

// InUse reports whether a device is allocated to at least one claim.
func (s *Snapshot) InUse(k DeviceKey) bool { return s.usage[k] != nil }

// PoolProblem says why the scheduler allocates no device of the pool now
// (incomplete or invalid; see poolProblem), "" when it may.
func (s *Snapshot) PoolProblem(k DeviceKey) string { return s.poolProblems[PoolKey{k.Driver, k.Pool}] }

// Taint is a taint on a device: from its ResourceSlice entry, or from a
// DeviceTaintRule (Rule names it).
type Taint struct {
	resourceapi.DeviceTaint
	Rule string
}

// AnyDeviceTaints reports whether a device may carry a taint: one of its
// slice's, or a DeviceTaintRule's (any rule counts).
func (s *Snapshot) AnyDeviceTaints() bool {
	return s.sliceTaints || len(s.TaintRules) > 0
}

// Taints returns the device's taints: its slice's and those of every
// DeviceTaintRule whose selector matches it (driver, pool and device; a rule
// without a selector matches nothing, an empty selector every device).
func (s *Snapshot) Taints(d *Device) []Taint {
	s.taintsOnce.Do(s.applyTaintRules)
	out := make([]Taint, 0, len(d.Taints)+len(s.ruleTaints[d.Key]))
	for _, t := range d.Taints {
		out = append(out, Taint{DeviceTaint: t})
	}
	return append(out, s.ruleTaints[d.Key]...)
}

func (s *Snapshot) applyTaintRules() {
	slices.SortFunc(s.TaintRules, func(a, b *resourceapi.DeviceTaintRule) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range s.TaintRules {
		sel := r.Spec.DeviceSelector
		if sel == nil {
			continue
		}
		for _, d := range s.Devices {
			if (sel.Driver == nil || *sel.Driver == d.Key.Driver) && (sel.Pool == nil || *sel.Pool == d.Key.Pool) && (sel.Device == nil || *sel.Device == d.Key.Device) {
				if s.ruleTaints == nil {
					s.ruleTaints = map[DeviceKey][]Taint{}
				}
				s.ruleTaints[d.Key] = append(s.ruleTaints[d.Key], Taint{DeviceTaint: r.Spec.Taint, Rule: r.Name})
			}
		}
	}
}
