package collector

// What each collector tells the engine (internal/engine) about its series:
// which are verdicts the engine holds while a resource is stale, which it
// may write again without running the collector, and while what holds.

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// The verdict collectors (engine.Verdict). The api gate and the negative
// controls read the same verdicts, and the stop conditions page on them.
func (blockedCollector) Verdict()  {}
func (leakCollector) Verdict()     {}
func (conflictCollector) Verdict() {}
func (gateCollector) Verdict()     {}

// The collectors whose series are a function of the snapshot alone
// (engine.SnapshotPure).
func (blockedCollector) SnapshotPure()     {}
func (claimCollector) SnapshotPure()       {}
func (conflictCollector) SnapshotPure()    {}
func (*deviceCollector) SnapshotPure()     {}
func (deviceClassCollector) SnapshotPure() {}
func (heldCollector) SnapshotPure()        {}
func (laneCollector) SnapshotPure()        {}
func (*podCollector) SnapshotPure()        {}
func (gateCollector) SnapshotPure()        {}

// StableUntil (engine.ClockBound): the leak collector's answer changes with
// the clock only when an allocated, unreserved claim passes its grace
// period, or a pod in deletion passes its deadline by it.
func (c leakCollector) StableUntil(s *index.Snapshot, now time.Time) time.Time {
	return classify.LeaksChangeAt(s, now, c.grace)
}

// The kinds of objects each pure collector reads (engine.Reader).
func (claimCollector) Reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindClaim)
}
func (conflictCollector) Reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindPlacement)
}
func (*deviceCollector) Reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindPlacement) // remaining capacity
}
func (deviceClassCollector) Reads() index.Kinds {
	return capacityReads // free devices on unusable nodes
}
func (heldCollector) Reads() index.Kinds {
	return index.DeviceKinds | index.KindsOf(index.KindClaim, index.KindPod)
}
func (laneCollector) Reads() index.Kinds { return capacityReads }
func (*podCollector) Reads() index.Kinds { return index.KindsOf(index.KindPod, index.KindClass) }
func (leakCollector) Reads() index.Kinds {
	// a device's node; a deleted pod's containers stopping is a placement
	// change (index.KindPlacement)
	return index.DeviceKinds | index.KindsOf(index.KindPlacement)
}

// capacityReads are what the capacity families read: devices, nodes, and
// where claims and pods hold devices, not a pod's readiness or a driver's
// device status (index.KindPlacement).
const capacityReads = index.DeviceKinds | 1<<index.KindNode | 1<<index.KindPlacement

// An interface the engine asks for by a type assertion is met or missed
// silently (a missed one costs a re-render per scrape, or a verdict not
// held): each declaration above is checked here at compile time.
var (
	_ engine.Verdict = blockedCollector{}
	_ engine.Verdict = leakCollector{}
	_ engine.Verdict = conflictCollector{}
	_ engine.Verdict = gateCollector{}

	_ engine.SnapshotPure = blockedCollector{}
	_ engine.SnapshotPure = claimCollector{}
	_ engine.SnapshotPure = conflictCollector{}
	_ engine.SnapshotPure = (*deviceCollector)(nil)
	_ engine.SnapshotPure = deviceClassCollector{}
	_ engine.SnapshotPure = heldCollector{}
	_ engine.SnapshotPure = laneCollector{}
	_ engine.SnapshotPure = (*podCollector)(nil)
	_ engine.SnapshotPure = gateCollector{}

	_ engine.ClockBound = leakCollector{}

	_ engine.Reader = claimCollector{}
	_ engine.Reader = conflictCollector{}
	_ engine.Reader = (*deviceCollector)(nil)
	_ engine.Reader = deviceClassCollector{}
	_ engine.Reader = heldCollector{}
	_ engine.Reader = laneCollector{}
	_ engine.Reader = (*podCollector)(nil)
	_ engine.Reader = leakCollector{}

	_ engine.RowCollector = blockedCollector{}
	_ engine.RowCollector = claimCollector{}
	_ engine.RowCollector = (*deviceCollector)(nil)
	_ engine.RowCollector = gateCollector{}
	_ engine.RowCollector = (*podCollector)(nil)
)
