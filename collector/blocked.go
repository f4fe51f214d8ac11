package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var podBlocked = family.New("dra_pod_blocked", family.TypeGauge,
	"A DRA pod that is not Ready, with the first failing link of the decision tree and the layer that owns it.",
	"namespace", "pod", "pod_uid", "claim", "device_class", "node", "device", "layer", "reason").
	WithDoc("One series per pod; device_class is the class of the failing request (of the allocated device for node and application reasons), device the first device of the failing claim. 1 while blocked.")

var podLowerPriorityHolders = family.New("dra_pod_lower_priority_holders", family.TypeGauge,
	"Pods of lower priority holding the devices a capacity_exhausted pod waits for.",
	"namespace", "pod", "pod_uid", "claim", "device_class").
	WithDoc("The scheduler does not preempt pods to free DRA devices, so preemption will not help such a pod: a device must be freed by hand or by a queue. Only for pods blocked with reason capacity_exhausted that have such holders.")

type blockedCollector struct {
	// memo keeps the last verdicts: a scrape walks the tree only for the
	// pods whose inputs changed.
	memo *classify.Memo
}

// NewBlockedCollector exports the blocked-pod classification.
func NewBlockedCollector() engine.Collector { return blockedCollector{memo: classify.NewMemo(nil)} }

func (blockedCollector) Name() string { return "blocked" }
func (blockedCollector) Defs() []*family.Def {
	return []*family.Def{podBlocked, podLowerPriorityHolders}
}

func (c blockedCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per blocked pod's verdict, as the memo keeps it (the same
// pointer while the pod's verdict holds, classify.Memo.Kept).
func (c blockedCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, v := range c.memo.Kept(s) {
		e := rows.Row(v)
		if e == nil {
			continue
		}
		p := v.Pod
		e.Gauge(podBlocked, 1, p.Key.Namespace, p.Key.Name, string(p.UID), v.Claim, v.DeviceClass, v.Node, v.Device, string(v.Layer), string(v.Reason))
		if v.LowerPriorityHolders > 0 {
			e.Gauge(podLowerPriorityHolders, float64(v.LowerPriorityHolders), p.Key.Namespace, p.Key.Name, string(p.UID), v.Claim, v.DeviceClass)
		}
	}
}
