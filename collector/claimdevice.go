package collector

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// The values of dra_claim_device_condition's status label, one-hot, as
// kube-state-metrics writes a condition's status.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

var claimDeviceCondition = family.New("dra_claim_device_condition", family.TypeGauge,
	"A condition the driver reports for an allocated device of a claim, one-hot over its status.",
	"namespace", "claim", "driver", "pool", "device", "condition", "status").
	WithDoc("From the claim's status.devices[].conditions, which the device's driver (or, for a binding condition, the device's controller) writes: " +
		"status is true, false or unknown, and the series of the condition's status is 1. " +
		"Three series per condition a driver sets; a claim whose driver writes no status.devices has none. " +
		"A device listed twice in one claim's status (two shares of a shareable device) is written once, from its first entry.")

type claimDeviceCollector struct{}

// NewClaimDeviceCollector exports the conditions of each claim's devices.
func NewClaimDeviceCollector() engine.Collector { return claimDeviceCollector{} }

func (claimDeviceCollector) Name() string        { return "claim_device" }
func (claimDeviceCollector) Defs() []*family.Def { return []*family.Def{claimDeviceCondition} }

func (c claimDeviceCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per claim, from its own status alone (no fan-out).
func (c claimDeviceCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, cl := range s.Claims {
		c.row(cl, rows)
	}
}

// RowsOf (engine.Partial) is EachRow over some claims.
func (c claimDeviceCollector) RowsOf(_ *index.Snapshot, _ time.Time, objs []any, rows *engine.Rows) {
	for _, o := range objs {
		c.row(o.(*index.Claim), rows)
	}
}

func (claimDeviceCollector) row(c *index.Claim, rows *engine.Rows) {
	if len(c.Obj.Status.Devices) == 0 {
		return
	}
	e := rows.Row(c)
	if e == nil {
		return
	}
	ns, name := c.Key.Namespace, c.Key.Name
	for _, d := range c.Obj.Status.Devices {
		for _, cond := range d.Conditions {
			for _, st := range conditionStatuses {
				e.UniqueGauge(claimDeviceCondition, family.BoolFloat(cond.Status == st), ns, name,
					d.Driver, d.Pool, d.Device, cond.Type, strings.ToLower(string(st)))
			}
		}
	}
}
