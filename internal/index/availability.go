package index

// Whether a device could go to a new claim now: allocation, taints, shared
// counters of partitionable devices, unusable nodes.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// counterSetKey names one counter set of a pool.
type counterSetKey struct {
	Pool PoolKey
	Set  string
}

// computeRemainingCounters subtracts what allocated devices consume from
// their pool's shared counters (partitionable devices such as MIG), as the
// allocator does: each allocated device once, however many claims share it.
func (s *Snapshot) computeRemainingCounters() {
	s.remaining = make(map[PoolKey]map[string]map[string]resource.Quantity, len(s.poolCounters))
	for pk, sets := range s.poolCounters {
		cp := make(map[string]map[string]resource.Quantity, len(sets))
		for name, counters := range sets {
			cp[name] = maps.Clone(counters)
		}
		s.remaining[pk] = cp
	}
	if !s.drawsCounters {
		return // nothing draws on them: a scan of every allocated device saved
	}
	for key := range s.usage {
		d := s.deviceByKey[key]
		if d == nil || len(d.Counters) == 0 {
			continue
		}
		pk := PoolKey{key.Driver, key.Pool}
		sets := s.remaining[pk]
		for _, cc := range d.Counters {
			if s.counterUsers == nil {
				s.counterUsers = map[counterSetKey][]DeviceKey{}
			}
			ck := counterSetKey{pk, cc.CounterSet}
			s.counterUsers[ck] = append(s.counterUsers[ck], key)
			for name, c := range cc.Counters {
				if set := sets[cc.CounterSet]; set != nil {
					q := set[name]
					q.Sub(c.Value)
					set[name] = q
					if q.Sign() < 0 {
						if s.overdrawn == nil {
							s.overdrawn = map[PoolKey]bool{}
						}
						s.overdrawn[pk] = true
					}
				}
			}
		}
	}
	for _, users := range s.counterUsers {
		slices.SortFunc(users, func(a, b DeviceKey) int { return strings.Compare(a.String(), b.String()) })
	}
}

// AllocatedTo returns the claims a device is allocated to (admin-access
// allocations excluded).
func (s *Snapshot) AllocatedTo(k DeviceKey) []*Claim {
	if u := s.usage[k]; u != nil {
		return tracedAll(s, u.claims)
	}
	return nil
}

// InUse reports whether a device is allocated to at least one claim.
func (s *Snapshot) InUse(k DeviceKey) bool { return s.usage[k] != nil }

// PoolProblem says why the scheduler allocates no device of the pool now
// (incomplete or invalid; see poolProblem), "" when it may.
func (s *Snapshot) PoolProblem(k DeviceKey) string { return s.poolProblems[PoolKey{k.Driver, k.Pool}] }

// Demand is what a request asks of a device besides its selectors.
type Demand struct {
	// Tolerations are the request's: a taint they tolerate does not keep
	// the request from the device.
	Tolerations []resourceapi.DeviceToleration
	// Capacity is the request's capacity.requests. Without it, the request
	// takes each capacity's policy default (the whole capacity when there
	// is none), as the scheduler does.
	Capacity *resourceapi.CapacityRequirements
	// Least asks, instead, for the least of each capacity of a shareable
	// device that its request policy allows: whether any new claim could
	// still get a share (the capacity figures).
	Least bool
}

// Available reports whether a new claim could be allocated the device now,
// as the scheduler's allocator decides it for a request that asks the
// least it may: no allocation without a shareID holds it (and none at all
// unless it allows multiple allocations), its pool is complete and valid,
// no NoSchedule/NoExecute taint is on it, its node (when the snapshot has
// it) is neither cordoned nor NotReady, what is left of its capacity
// covers a share, and its pool's shared counters still cover what it
// consumes.
func (s *Snapshot) Available(d *Device) bool { return s.availableFor(d, Demand{Least: true}) }

// availableFor is Available for one request's demand.
func (s *Snapshot) availableFor(d *Device, dm Demand) bool {
	u := s.usage[d.Key]
	if u != nil && (u.exclusive || !d.Shareable) {
		return false
	}
	if s.PoolProblem(d.Key) != "" {
		return false
	}
	if tainted(s.Taints(d), dm.Tolerations) {
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
	if !s.capacityFits(d, dm) {
		return false
	}
	if u != nil {
		return true // a further share: its counters are already charged
	}
	return s.countersCover(d, nil)
}

// countersCover reports whether the remaining shared counters, less what
// taken (the devices counted before it in a joint count) consumes, still
// cover what the device consumes. Like the allocator, an overdrawn pool
// (a counter below zero, from allocations made before the driver shrank
// it) gives out no counter-consuming device.
func (s *Snapshot) countersCover(d *Device, taken map[counterSetKey]map[string]resource.Quantity) bool {
	if len(d.Counters) == 0 {
		return true
	}
	pk := PoolKey{d.Key.Driver, d.Key.Pool}
	if s.overdrawn[pk] {
		return false
	}
	sets := s.remaining[pk]
	for _, cc := range d.Counters {
		set := sets[cc.CounterSet]
		if set == nil {
			return false // consumes a counter set nobody published
		}
		used := taken[counterSetKey{pk, cc.CounterSet}]
		for name, c := range cc.Counters {
			left, ok := set[name]
			if !ok {
				return false
			}
			if u, ok := used[name]; ok {
				left = left.DeepCopy()
				left.Sub(u)
			}
			if left.Cmp(c.Value) < 0 {
				return false
			}
		}
	}
	return true
}

// take adds what the device consumes to taken.
func take(d *Device, taken map[counterSetKey]map[string]resource.Quantity) {
	pk := PoolKey{d.Key.Driver, d.Key.Pool}
	for _, cc := range d.Counters {
		k := counterSetKey{pk, cc.CounterSet}
		set := taken[k]
		if set == nil {
			set = map[string]resource.Quantity{}
			taken[k] = set
		}
		for name, c := range cc.Counters {
			q := set[name]
			q.Add(c.Value)
			set[name] = q
		}
	}
}

// CounterSiblings returns the allocated devices that draw on a counter set
// the device consumes (sibling partitions of one GPU), sorted; the device
// itself is left out.
func (s *Snapshot) CounterSiblings(d *Device) []DeviceKey {
	var out []DeviceKey
	for _, cc := range d.Counters {
		for _, k := range s.counterUsers[counterSetKey{PoolKey{d.Key.Driver, d.Key.Pool}, cc.CounterSet}] {
			if k != d.Key && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// CounterShortfall describes, for a device its pool's counters no longer
// cover, the first counter that falls short ("" when all cover it): for
// explain's evidence.
func (s *Snapshot) CounterShortfall(d *Device) string {
	pk := PoolKey{d.Key.Driver, d.Key.Pool}
	for _, cc := range d.Counters {
		set := s.remaining[pk][cc.CounterSet]
		for _, name := range slices.Sorted(maps.Keys(cc.Counters)) {
			left, ok := set[name]
			need := cc.Counters[name].Value
			if !ok || left.Cmp(need) < 0 {
				total := s.poolCounters[pk][cc.CounterSet][name]
				return fmt.Sprintf("counter set %s: %s left of %s %s, the device needs %s", cc.CounterSet, left.String(), total.String(), name, need.String())
			}
		}
	}
	if s.overdrawn[pk] {
		return "a counter of pool " + pk.Pool + " is overdrawn: the allocator gives out none of its partitions"
	}
	return ""
}

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
