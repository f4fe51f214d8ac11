package collector

// The fan-out table: every read of a row beyond its own object. A row is
// keyed on its object (a claim's, a device's, a pod's record, or a value
// the memo derived from the snapshot: a verdict, a leak, a capacity count)
// and the row store keeps it while that key is the same; a row that reads
// another object names it here, and a change of that object renders the
// row again. A family whose rows read their key alone needs no entry.
// TestRowsReadOnlyTheirLinks (fanout_test.go) runs every row collector
// over the goldens with the snapshot recording what each row reads, and
// fails on a read this table does not declare.

import (
	"slices"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// FanOut is the table, by the name of the collector whose rows read
// through the link.
var FanOut = map[string][]engine.Link{
	"claim": {{
		// dra_claim_allocation_info: each allocated device's node and
		// GPU UUID.
		Name: "a device's claims", Kinds: index.DeviceKinds,
		Of: func(s *index.Snapshot, key any, out []any) []any {
			for _, r := range key.(*index.Claim).Results {
				out = append(out, s.Device(r.Device))
			}
			return out
		},
	}},
	"device": {{
		// dra_device_capacity_remaining: the capacity the claims sharing
		// the device consume.
		Name: "a shared device's claims", Kinds: index.KindsOf(index.KindClaim),
		Of: func(s *index.Snapshot, key any, out []any) []any {
			if d := key.(*index.Device); d.Shareable {
				for _, c := range s.AllocatedTo(d.Key) {
					out = append(out, c)
				}
			}
			return out
		},
		// The shareable devices a claim was (old record) or is allocated.
		Back: func(s *index.Snapshot, changed any, out []any) []any {
			for _, r := range changed.(*index.Claim).Results {
				if d := s.Device(r.Device); d != nil && d.Shareable {
					out = append(out, d)
				}
			}
			return out
		},
	}},
	"pod": {{
		// dra_pod_info's lane: a Pending pod's extended resources are
		// the dra-extended lane's while a class serves them.
		Name: "a class's extended-resource pods", Kinds: index.KindsOf(index.KindClass),
		Of: func(s *index.Snapshot, key any, out []any) []any {
			p := key.(*index.Pod)
			names := make([]string, 0, len(p.ExtendedRequests))
			for name := range p.ExtendedRequests {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				out = append(out, s.ClassForExtendedResource(name))
			}
			return out
		},
	}},
	"held": {{
		// dra_allocated_device_health and _taint: the claims the pod
		// holds devices through, the devices, and the taints on them
		// (a DeviceTaintRule's are no part of the device's record).
		Name: "a claim's or a device's holding pods", Kinds: index.KindsOf(index.KindClaim) | index.DeviceKinds,
		Of: func(s *index.Snapshot, key any, out []any) []any {
			p := key.(*index.Pod)
			if !heldMayShow(s, p) {
				return out
			}
			for _, pc := range s.ResolvePodClaims(p) {
				out = append(out, pc.Claim)
				if pc.Claim == nil {
					continue
				}
				for _, r := range pc.Claim.Results {
					d := s.Device(r.Device)
					out = append(out, d)
					if d != nil {
						out = append(out, taintsKey(s.Taints(d)))
					}
				}
			}
			return out
		},
	}},
}

// heldMayShow reports whether a pod may have held series at all: bound,
// not finished, and with a device health report or a taint on some device
// (classify.HeldBy's own test).
func heldMayShow(s *index.Snapshot, p *index.Pod) bool {
	return !p.Terminal() && p.Obj.Spec.NodeName != "" && (s.AnyDeviceTaints() || classify.ReportsDeviceHealth(p))
}

// taintsKey is a device's taints as one comparable value.
func taintsKey(ts []index.Taint) string {
	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.Key + "\xff" + string(t.Effect) + "\xff" + t.Rule + "\xfe")
	}
	return b.String()
}

func (claimCollector) Links() []engine.Link   { return FanOut["claim"] }
func (*deviceCollector) Links() []engine.Link { return FanOut["device"] }
func (*podCollector) Links() []engine.Link    { return FanOut["pod"] }
func (heldCollector) Links() []engine.Link    { return FanOut["held"] }

// The verdict collectors (engine.Verdict): the engine holds them while a
// resource is stale. The api gate and the negative controls read the same
// verdicts, and the stop conditions page on them.
func (blockedCollector) Verdict()  {}
func (leakCollector) Verdict()     {}
func (conflictCollector) Verdict() {}
func (gateCollector) Verdict()     {}

// StableUntil (engine.ClockBound): the leak collector's rows change with
// the clock only when an allocated, unreserved claim passes its grace
// period, or a pod in deletion passes its deadline by it.
func (c leakCollector) StableUntil(s *index.Snapshot, now time.Time) time.Time {
	return c.memo.LeaksStableUntil(s, now, c.grace)
}

// An interface the engine asks for by a type assertion is met or missed
// silently (a missed one re-renders every row each scrape, leaves rows
// stale, or a verdict not held): each is checked here at compile time.
var (
	_ engine.Verdict = blockedCollector{}
	_ engine.Verdict = leakCollector{}
	_ engine.Verdict = conflictCollector{}
	_ engine.Verdict = gateCollector{}

	_ engine.ClockBound = leakCollector{}

	_ engine.Partial = claimCollector{}
	_ engine.Partial = (*podCollector)(nil)
	_ engine.Partial = heldCollector{}

	_ engine.Linked = claimCollector{}
	_ engine.Linked = (*deviceCollector)(nil)
	_ engine.Linked = (*podCollector)(nil)
	_ engine.Linked = heldCollector{}

	_ engine.RowCollector = claimCollector{}
	_ engine.RowCollector = (*deviceCollector)(nil)
	_ engine.RowCollector = (*podCollector)(nil)
	_ engine.RowCollector = heldCollector{}
	_ engine.RowCollector = blockedCollector{}
	_ engine.RowCollector = gateCollector{}
	_ engine.RowCollector = leakCollector{}
	_ engine.RowCollector = conflictCollector{}
	_ engine.RowCollector = deviceClassCollector{}
	_ engine.RowCollector = laneCollector{}
)
