package allocator

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

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// counterSetKey names one counter set of a pool.
type counterSetKey struct {
	Pool index.PoolKey
	Set  string
}

// computeRemainingCounters subtracts what allocated devices consume from
// their pool's shared counters (partitionable devices such as MIG), as the
// allocator does: each allocated device once, however many claims share it.
func (m *Model) computeRemainingCounters() {
	m.remaining = make(map[index.PoolKey]map[string]map[string]resource.Quantity, len(m.raw.PoolCounters()))
	for pk, sets := range m.raw.PoolCounters() {
		cp := make(map[string]map[string]resource.Quantity, len(sets))
		for name, counters := range sets {
			cp[name] = maps.Clone(counters)
		}
		m.remaining[pk] = cp
	}
	if !m.raw.DrawsCounters() {
		return // nothing draws on them: a scan of every allocated device saved
	}
	m.raw.Allocated(func(key index.DeviceKey) {
		d := m.raw.Device(key)
		if d == nil || len(d.Counters) == 0 {
			return
		}
		pk := key.PoolKey()
		sets := m.remaining[pk]
		for _, cc := range d.Counters {
			if m.counterUsers == nil {
				m.counterUsers = map[counterSetKey][]index.DeviceKey{}
			}
			ck := counterSetKey{pk, cc.CounterSet}
			m.counterUsers[ck] = append(m.counterUsers[ck], key)
			for name, c := range cc.Counters {
				if set := sets[cc.CounterSet]; set != nil {
					q := set[name]
					q.Sub(c.Value)
					set[name] = q
					if q.Sign() < 0 {
						if m.overdrawn == nil {
							m.overdrawn = map[index.PoolKey]bool{}
						}
						m.overdrawn[pk] = true
					}
				}
			}
		}
	})
	for _, users := range m.counterUsers {
		slices.SortFunc(users, func(a, b index.DeviceKey) int { return strings.Compare(a.String(), b.String()) })
	}
}

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
func (m *Model) Available(d *index.Device) bool { return m.availableFor(d, Demand{Least: true}) }

// availableFor is Available for one request's demand.
func (m *Model) availableFor(d *index.Device, dm Demand) bool {
	u := m.raw.Usage(d.Key)
	if u != nil && (u.Exclusive || !d.Shareable) {
		return false
	}
	if m.s.PoolProblem(d.Key) != "" {
		return false
	}
	if tainted(m.s.Taints(d), dm.Tolerations) {
		return false
	}
	if d.Node != "" {
		n := m.raw.Node(d.Node)
		if n != nil && n.Unusable != "" {
			return false // no new pod lands there to use it
		}
		if n == nil && m.raw.HasNodes() {
			// The Node is gone (scale-down) and its slice not yet
			// collected: the scheduler has no node to place a pod on. A
			// file without any Node object says nothing, though.
			return false
		}
	}
	if !m.capacityFits(d, dm) {
		return false
	}
	if u != nil {
		return true // a further share: its counters are already charged
	}
	return m.countersCover(d, nil)
}

// countersCover reports whether the remaining shared counters, less what
// taken (the devices counted before it in a joint count) consumes, still
// cover what the device consumes. Like the allocator, an overdrawn pool
// (a counter below zero, from allocations made before the driver shrank
// it) gives out no counter-consuming device.
func (m *Model) countersCover(d *index.Device, taken map[counterSetKey]map[string]resource.Quantity) bool {
	if len(d.Counters) == 0 {
		return true
	}
	pk := d.Key.PoolKey()
	if m.overdrawn[pk] {
		return false
	}
	sets := m.remaining[pk]
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
func take(d *index.Device, taken map[counterSetKey]map[string]resource.Quantity) {
	pk := d.Key.PoolKey()
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
func (m *Model) CounterSiblings(d *index.Device) []index.DeviceKey {
	var out []index.DeviceKey
	for _, cc := range d.Counters {
		for _, k := range m.counterUsers[counterSetKey{d.Key.PoolKey(), cc.CounterSet}] {
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
func (m *Model) CounterShortfall(d *index.Device) string {
	pk := d.Key.PoolKey()
	for _, cc := range d.Counters {
		set := m.remaining[pk][cc.CounterSet]
		for _, name := range slices.Sorted(maps.Keys(cc.Counters)) {
			left, ok := set[name]
			need := cc.Counters[name].Value
			if !ok || left.Cmp(need) < 0 {
				total := m.raw.PoolCounters()[pk][cc.CounterSet][name]
				return fmt.Sprintf("counter set %s: %s left of %s %s, the device needs %s", cc.CounterSet, left.String(), total.String(), name, need.String())
			}
		}
	}
	if m.overdrawn[pk] {
		return "a counter of pool " + pk.Pool + " is overdrawn: the allocator gives out none of its partitions"
	}
	return ""
}

// tainted reports whether a taint keeps a request with these tolerations
// from the device. Like the scheduler, only the NoSchedule and NoExecute
// effects count; None and unknown effects do not.
func tainted(taints []index.Taint, tolerations []resourceapi.DeviceToleration) bool {
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
