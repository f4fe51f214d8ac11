package index

// Patching the last snapshot's claim and pod joins where few of them
// changed since, instead of building them again.

import (
	"maps"
	"slices"
)

// fewChanged reports whether the last snapshot's claim or pod joins are
// patched: while at most one in eight of them (or 64) changed; beyond,
// they are built again.
func fewChanged(changed, total int) bool { return changed <= 64 || changed <= total/8 }

// patchClaims builds the claim joins from prev's and the claims written
// since (nil: deleted), as buildClaims would build them from all claims
// (the order of Claims and of a device's holders may differ: neither is
// an order anything reads). prev's maps and slices are shared, never
// written: a changed entry gets a new slice or usage. It returns the
// devices whose allocations it patched.
func (s *Snapshot) patchClaims(prev *Snapshot, changed map[Key]*Claim) map[DeviceKey]struct{} {
	s.Claims = patchList(prev.Claims, changed, func(c *Claim) Key { return c.Key })
	s.claimsByKey = patchByKey(prev.claimsByKey, changed)
	s.claimsByOwner = maps.Clone(prev.claimsByOwner)
	s.claimsByGroup = maps.Clone(prev.claimsByGroup)
	s.usage = maps.Clone(prev.usage)
	devices := map[DeviceKey]struct{}{}
	for k, c := range changed {
		if old := prev.claimsByKey[k]; old != nil {
			if o := old.OwnerPod; o != nil {
				setOrDelete(s.claimsByOwner, o.UID, without(s.claimsByOwner[o.UID], old))
			}
			if o := old.OwnerGroup; o != nil {
				g := Key{k.Namespace, o.Name}
				setOrDelete(s.claimsByGroup, g, without(s.claimsByGroup[g], old))
			}
			for _, r := range old.Results {
				devices[r.Device] = struct{}{}
			}
		}
		if c == nil {
			continue
		}
		if o := c.OwnerPod; o != nil {
			s.claimsByOwner[o.UID] = append(slices.Clip(s.claimsByOwner[o.UID]), c)
		}
		if o := c.OwnerGroup; o != nil {
			if s.claimsByGroup == nil {
				s.claimsByGroup = map[Key][]*Claim{}
			}
			g := Key{k.Namespace, o.Name}
			s.claimsByGroup[g] = append(slices.Clip(s.claimsByGroup[g]), c)
		}
		for _, r := range c.Results {
			devices[r.Device] = struct{}{}
		}
	}
	for d := range devices {
		var holders []*Claim
		if u := prev.usage[d]; u != nil {
			for _, c := range u.Claims {
				if _, ok := changed[c.Key]; !ok && !slices.Contains(holders, c) {
					holders = append(holders, c)
				}
			}
		}
		for _, c := range changed {
			if c != nil && slices.ContainsFunc(c.Results, func(r Result) bool { return r.Device == d }) {
				holders = append(holders, c)
			}
		}
		u := &DeviceUsage{}
		for _, c := range holders {
			for _, r := range c.Results {
				if r.Device == d && !r.AdminAccess {
					u.add(c, r)
				}
			}
		}
		if len(u.Claims) == 0 {
			delete(s.usage, d)
		} else {
			s.usage[d] = u
		}
	}
	return devices
}

// without returns a copy of list without c.
func without(list []*Claim, c *Claim) []*Claim {
	return slices.DeleteFunc(slices.Clone(list), func(x *Claim) bool { return x == c })
}

func setOrDelete[K comparable, V any](m map[K][]V, k K, v []V) {
	if len(v) == 0 {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// patchPods is patchClaims for the pod joins.
func (s *Snapshot) patchPods(prev *Snapshot, changed map[Key]*Pod) {
	s.Pods = patchList(prev.Pods, changed, func(p *Pod) Key { return p.Key })
	s.podsByKey = patchByKey(prev.podsByKey, changed)
}

// current returns the records the index holds under the changed keys (nil:
// deleted).
func current[R any](keys map[Key]struct{}, held map[Key]*R) map[Key]*R {
	out := make(map[Key]*R, len(keys))
	for k := range keys {
		out[k] = held[k]
	}
	return out
}

// patchList returns prev without the changed records' old versions, with
// their current ones (those not deleted) at the end.
func patchList[R any](prev []*R, changed map[Key]*R, key func(*R) Key) []*R {
	out := make([]*R, 0, len(prev)+len(changed))
	for _, r := range prev {
		if _, ok := changed[key(r)]; !ok {
			out = append(out, r)
		}
	}
	for _, r := range changed {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// patchByKey returns a copy of prev with the changed records set (or
// deleted).
func patchByKey[R any](prev map[Key]*R, changed map[Key]*R) map[Key]*R {
	out := maps.Clone(prev)
	if out == nil {
		out = make(map[Key]*R, len(changed))
	}
	for k, r := range changed {
		if r == nil {
			delete(out, k)
		} else {
			out[k] = r
		}
	}
	return out
}
