package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var (
	podGate = family.New("dra_pod_gate", family.TypeGauge,
		"An evidence gate of a DRA pod: 1 while it passes, 0 while it fails, with the reason that fails it.",
		"namespace", "pod", "pod_uid", "node", "gate", "reason").
		WithDoc("The exporter serves gate api (the platform team's: every claim allocated and reserved for the pod, the pod bound to the node of its allocation, fewer than 3 FailedScheduling attempts about its claims); the recording rules of rules/gates.yaml add gates node and workload from the node agent and record all three as namespace_pod_gate:dra_pod_gate:status. reason is empty while the gate passes. node is the pod's node, empty before binding. One series per DRA pod that is not finished, being deleted, or a negative control.")
	podReady = family.New("dra_pod_ready", family.TypeGauge,
		"Whether a DRA pod's Ready condition is true (1) or not (0).",
		"namespace", "pod", "pod_uid", "node").
		WithDoc("The workload gate's readiness (rules/gates.yaml). The same pods as dra_pod_gate.")
	negativeControl = family.New("dra_negative_control", family.TypeGauge,
		"A pod marked as a negative control: 1 while it stays Pending because no device can match it, 0 once it does not.",
		"namespace", "pod", "pod_uid", "claim", "node", "device", "reason").
		WithDoc("Pods carrying the label of --gates.negative-control-label. Holding (1): selector_matches_nothing, the decision tree's reason when the control's own selectors or capacity requests exclude every device of its class, which is what proves the boundary. Invalid (0): device_class_not_found or no_devices_for_class, a control that could get no device whatever its selectors, which proves nothing. Broken (0): allocated (a claim of the control got a device: claim, node and device name it), started (a container ran), matches_devices (Pending only because the matching devices are taken), not_evaluated (no claim yet, scheduling gates, or the scheduler has not tried it). One series per control pod, finished ones included.")
)

// ControlLabel marks negative controls: pods whose label Key has Value.
type ControlLabel struct {
	Key, Value string
}

// Matches reports whether the pod is marked.
func (c ControlLabel) Matches(p *index.Pod) bool {
	if c.Key == "" {
		return false
	}
	v, ok := p.Obj.Labels[c.Key]
	return ok && v == c.Value
}

type gateCollector struct {
	// memo keeps each pod's gate between scrapes, beside its verdict.
	memo *classify.Memo
}

// NewGateCollector exports the api gate, readiness and negative controls:
// the negative controls are the pods memo's control marks
// (classify.NewMemo(control.Matches)). memo may be shared with the blocked
// collector, whose verdicts the gates read (nil: its own, without
// controls).
func NewGateCollector(memo *classify.Memo) engine.Collector {
	if memo == nil {
		memo = &classify.Memo{}
	}
	return gateCollector{memo: memo}
}

func (gateCollector) Name() string        { return "gate" }
func (gateCollector) Defs() []*family.Def { return []*family.Def{podGate, podReady, negativeControl} }

func (c gateCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per DRA pod's gate, as the memo keeps it (the same
// pointer while the pod's gate holds, classify.Memo.Gates).
func (c gateCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, r := range c.memo.Gates(s) {
		e := rows.Row(r)
		if e == nil {
			continue
		}
		p := r.Pod
		ns, name, uid := p.Key.Namespace, p.Key.Name, string(p.UID)
		if r.Control != nil {
			x := r.Control
			e.Gauge(negativeControl, family.BoolFloat(x.Holds), ns, name, uid, x.Claim, x.Node, x.Device, x.Reason)
			continue
		}
		node := p.Obj.Spec.NodeName
		e.Gauge(podGate, family.BoolFloat(r.API.Pass), ns, name, uid, node, string(r.API.Gate), r.API.Reason)
		e.Gauge(podReady, family.BoolFloat(p.Ready()), ns, name, uid, node)
	}
}
