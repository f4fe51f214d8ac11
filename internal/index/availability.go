package index

// Whether a device could go to a new claim now: allocation, taints, shared
// counters of partitionable devices, unusable nodes.

import (
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// computeRemainingCounters subtracts what allocated devices consume from
// their pool's shared counters (partitionable devices such as MIG).
func (s *Snapshot) computeRemainingCounters() {
	s.remaining = make(map[PoolKey]map[string]map[string]resource.Quantity, len(s.poolCounters))
	for pk, sets := range s.poolCounters {
		cp := make(map[string]map[string]resource.Quantity, len(sets))
		for name, counters := range sets {
			cp[name] = maps.Clone(counters)
		}
		s.remaining[pk] = cp
	}
	for key := range s.usage {
		d := s.deviceByKey[key]
		if d == nil || len(d.Counters) == 0 {
			continue
		}
		sets := s.remaining[PoolKey{key.Driver, key.Pool}]
		for _, cc := range d.Counters {
			for name, c := range cc.Counters {
				if set := sets[cc.CounterSet]; set != nil {
					q := set[name]
					q.Sub(c.Value)
					set[name] = q
				}
			}
		}
	}
}

// AllocatedTo returns the claims a device is allocated to (admin-access
// allocations excluded).
func (s *Snapshot) AllocatedTo(k DeviceKey) []*Claim {
	if u := s.usage[k]; u != nil {
		return u.claims
	}
	return nil
}

// InUse reports whether a device is allocated to at least one claim.
func (s *Snapshot) InUse(k DeviceKey) bool { return s.usage[k] != nil }

// Available reports whether a new claim could be allocated the device: it
// is not taken (or may be shared), no NoSchedule/NoExecute taint is on it,
// its pool's shared counters still cover what it consumes, and its node
// (when the snapshot has it) is neither cordoned nor NotReady.
func (s *Snapshot) Available(d *Device) bool { return s.availableWith(d, nil) }

// availableWith is Available for a request with these tolerations: a taint
// it tolerates does not keep it from the device.
func (s *Snapshot) availableWith(d *Device, tolerations []resourceapi.DeviceToleration) bool {
	if s.InUse(d.Key) && !d.Shareable {
		return false
	}
	if tainted(s.Taints(d), tolerations) {
		return false
	}
	if d.Node != "" {
		n := s.nodesByName[d.Node]
		if n != nil && n.Unusable != "" {
			return false // no new pod lands there to use it
		}
		if n == nil && len(s.nodesByName) > 0 {
			// The Node is gone (scale-down) and its slice not yet
			// collected: the scheduler has no node to place a pod on. A
			// file without any Node object says nothing, though.
			return false
		}
	}
	if len(d.Counters) == 0 {
		return true
	}
	sets := s.remaining[PoolKey{d.Key.Driver, d.Key.Pool}]
	for _, cc := range d.Counters {
		set := sets[cc.CounterSet]
		if set == nil {
			return false // consumes a counter set nobody published
		}
		for name, c := range cc.Counters {
			left, ok := set[name]
			if !ok || left.Cmp(c.Value) < 0 {
				return false
			}
		}
	}
	return true
}

// Taint is a taint on a device: from its ResourceSlice entry, or from a
// DeviceTaintRule (Rule names it).
type Taint struct {
	resourceapi.DeviceTaint
	Rule string
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

// tainted reports whether a taint keeps a request with these tolerations
// from the device. Like the scheduler, only the NoSchedule and NoExecute
// effects count; None and unknown effects do not.
func tainted(taints []Taint, tolerations []resourceapi.DeviceToleration) bool {
	for _, t := range taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(tol, t.DeviceTaint) }) {
			return true
		}
	}
	return false
}
