package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var claimLeak = family.New("dra_claim_reservation_leak", family.TypeGauge,
	"A leaked reservation or allocation of a claim, per reservation and allocated device.",
	"namespace", "claim", "pod", "pod_uid", "node", "device", "reason").
	WithDoc("reason pod_missing, pod_finished or pod_recreated (status.reservedFor names a pod that is gone, finished, or now has another UID), owner_missing (a generated claim outlives its pod), allocated_unreserved (allocated, reserved for nobody past the grace period), pod_stuck_terminating (reserved for a bound pod deleted and past its deadline by the grace period with no container running: the kubelet cannot finish it, typically the driver's NodeUnprepareResources failing), or noexecute_not_evicted (reserved for a running pod whose device has carried a NoExecute taint its request does not tolerate for longer than the grace period: the eviction controller has not evicted it; kubernetes#141290 reports it skipping a pod that got the device as an extended resource before 1.38). One series per reservation and allocated device (device empty for an unallocated claim): a 4-GPU claim reserved for two gone pods has 8; count leaked devices with count by (namespace, claim, device). pod_finished includes a pod deleted before it was bound. 1 while leaked.")

type leakCollector struct {
	grace time.Duration
	memo  *classify.Memo
}

// NewLeakCollector exports leaked reservations; grace applies to allocated
// claims that reserve nobody.
func NewLeakCollector(grace time.Duration) engine.Collector {
	return leakCollector{grace: grace, memo: classify.NewMemo(nil)}
}

func (leakCollector) Name() string        { return "leak" }
func (leakCollector) Defs() []*family.Def { return []*family.Def{claimLeak} }

func (c leakCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// leakRow is a leak's series, its labels: a leak repeated with the same
// labels is one series.
type leakRow struct{ namespace, claim, pod, podUID, node, device, reason string }

// EachRow: a row per leak's series, of the leaks the memo keeps.
func (c leakCollector) EachRow(s *index.Snapshot, now time.Time, rows *engine.Rows) {
	for _, l := range c.memo.Leaks(s, now, c.grace) {
		k := leakRow{l.Claim.Key.Namespace, l.Claim.Key.Name, l.Pod, string(l.PodUID), l.Node, l.Device, string(l.Reason)}
		if e := rows.Row(k); e != nil {
			e.Gauge(claimLeak, 1, k.namespace, k.claim, k.pod, k.podUID, k.node, k.device, k.reason)
		}
	}
}
