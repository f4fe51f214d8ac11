package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Claim states, one-hot in dra_claim_status.
const (
	claimUnallocated = "unallocated"
	claimAllocated   = "allocated"
	claimReserved    = "reserved"
)

var (
	claimInfo = family.New("dra_claim_info", family.TypeGauge,
		"A ResourceClaim, with the lane it serves and the pod it was generated for.",
		"namespace", "claim", "lane", "pod", "pod_uid").
		WithDoc("lane is dra, or dra-extended for a claim the scheduler made for an extended resource; pod and pod_uid name the pod the claim was generated for (empty for a claim created by name). Always 1.")
	claimStatus = family.New("dra_claim_status", family.TypeGauge,
		"The claim's state, one-hot: unallocated, allocated or reserved.",
		"namespace", "claim", "state").
		WithDoc("allocated means allocated and reserved for no pod; reserved means allocated and in use.")
	claimAllocation = family.New("dra_claim_allocation_info", family.TypeGauge,
		"One allocated device of a claim, joined to the ResourceSlice device that publishes it.",
		"namespace", "claim", "request", "device_class", "driver", "pool", "device", "node", "gpu_uuid").
		WithDoc("node and gpu_uuid come from the ResourceSlice. Admin-access allocations (monitoring agents) are left out: they do not hold the device. Always 1.")
	claimReservedFor = family.New("dra_claim_reserved_for_info", family.TypeGauge,
		"A pod a claim is reserved for.",
		"namespace", "claim", "pod", "pod_uid").
		WithDoc("One per status.reservedFor entry of resource pods; PodGroups and other consumers are left out. Always 1.")
)

type claimCollector struct{}

// NewClaimCollector exports every claim, its allocation and its reservations.
func NewClaimCollector() engine.Collector { return claimCollector{} }

func (claimCollector) Name() string { return "claim" }
func (claimCollector) Defs() []*family.Def {
	return []*family.Def{claimInfo, claimStatus, claimAllocation, claimReservedFor}
}

func (c claimCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per claim, which reads the devices it was allocated
// (their node and GPU UUID: FanOut).
func (c claimCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, cl := range s.Claims {
		c.row(s, cl, rows)
	}
}

// RowsOf (engine.Partial) is EachRow over some claims.
func (c claimCollector) RowsOf(s *index.Snapshot, _ time.Time, objs []any, rows *engine.Rows) {
	for _, o := range objs {
		c.row(s, o.(*index.Claim), rows)
	}
}

func (claimCollector) row(s *index.Snapshot, c *index.Claim, rows *engine.Rows) {
	e := rows.Row(c)
	if e == nil {
		return
	}
	ns, name := c.Key.Namespace, c.Key.Name
	lane, pod, podUID := index.LaneDRA, "", ""
	if c.Extended {
		lane = index.LaneDRAExtended
	}
	if c.OwnerPod != nil {
		pod, podUID = c.OwnerPod.Name, string(c.OwnerPod.UID)
	}
	e.Gauge(claimInfo, 1, ns, name, lane, pod, podUID)

	state := claimUnallocated
	switch {
	case c.Allocated() && len(c.Obj.Status.ReservedFor) > 0:
		state = claimReserved
	case c.Allocated():
		state = claimAllocated
	}
	for _, st := range []string{claimUnallocated, claimAllocated, claimReserved} {
		e.Gauge(claimStatus, family.BoolFloat(st == state), ns, name, st)
	}
	for _, r := range c.Results {
		if r.AdminAccess {
			continue // monitoring access: the device stays with its holder
		}
		node, uuid := c.Node, ""
		if d := s.Device(r.Device); d != nil {
			uuid = d.GPUUUID
			if node == "" {
				node = d.Node
			}
		}
		e.UniqueGauge(claimAllocation, 1, ns, name, r.Request, r.Class, r.Device.Driver, r.Device.Pool, r.Device.Device, node, uuid)
	}
	for _, r := range c.Obj.Status.ReservedFor {
		if r.APIGroup != "" || r.Resource != "pods" {
			continue // a PodGroup or another consumer: not a pod
		}
		e.UniqueGauge(claimReservedFor, 1, ns, name, r.Name, string(r.UID))
	}
}
