package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var (
	podGate = newDef("dra_pod_gate", typeGauge,
		"An evidence gate of a DRA pod: 1 while it passes, 0 while it fails, with the reason that fails it.",
		"namespace", "pod", "pod_uid", "node", "gate", "reason").
		doc("The exporter serves gate api (the platform team's: every claim allocated and reserved for the pod, the pod bound to the node of its allocation, fewer than 3 FailedScheduling attempts about its claims); the recording rules of rules/gates.yaml add gates node and workload from the node agent and record all three as namespace_pod_gate:dra_pod_gate:status. reason is empty while the gate passes. node is the pod's node, empty before binding. One series per DRA pod that is not finished, being deleted, or a negative control.")
	podReady = newDef("dra_pod_ready", typeGauge,
		"Whether a DRA pod's Ready condition is true (1) or not (0).",
		"namespace", "pod", "pod_uid", "node").
		doc("The workload gate's readiness (rules/gates.yaml). The same pods as dra_pod_gate.")
	negativeControl = newDef("dra_negative_control", typeGauge,
		"A pod marked as a negative control: 1 while it stays Pending because no device can match it, 0 once it does not.",
		"namespace", "pod", "pod_uid", "claim", "node", "device", "reason").
		doc("Pods carrying the label of --gates.negative-control-label. Holding (1), reason is the decision tree's: selector_matches_nothing, no_devices_for_class or device_class_not_found. Broken (0): allocated (a claim of the control got a device: claim, node and device name it), started (a container ran), matches_devices (Pending only because the matching devices are taken), not_evaluated (no claim yet, scheduling gates, or the scheduler has not tried it). One series per control pod, finished ones included.")
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
	verdicts *classify.Verdicts
	control  ControlLabel
}

// NewGateCollector exports the api gate, readiness and negative controls.
// verdicts may be shared with the blocked collector (nil: its own).
func NewGateCollector(control ControlLabel, verdicts *classify.Verdicts) Collector {
	if verdicts == nil {
		verdicts = &classify.Verdicts{}
	}
	return gateCollector{verdicts: verdicts, control: control}
}

func (gateCollector) Name() string  { return "gate" }
func (gateCollector) Defs() []*Def  { return []*Def{podGate, podReady, negativeControl} }
func (gateCollector) snapshotPure() {}

func (c gateCollector) Update(s *index.Snapshot, _ time.Time, e *emitter) error {
	blocked := map[index.Key]*classify.Verdict{}
	for _, v := range c.verdicts.Kept(s) {
		blocked[v.Pod.Key] = v
	}
	for _, p := range s.Pods {
		if !s.Owns(p.Key.Namespace) {
			continue
		}
		lane := s.PodLane(p)
		if lane != index.LaneDRA && lane != index.LaneDRAExtended {
			continue
		}
		ns, name, uid := p.Key.Namespace, p.Key.Name, string(p.UID)
		if c.control.Matches(p) {
			if p.Obj.DeletionTimestamp != nil && !p.Started() {
				continue
			}
			r := classify.NegativeControl(s, p, blocked[p.Key], false)
			e.gauge(negativeControl, boolFloat(r.Holds), ns, name, uid, r.Claim, r.Node, r.Device, r.Reason)
			continue
		}
		if p.Terminal() || p.Obj.DeletionTimestamp != nil {
			continue
		}
		g := classify.APIGate(s, p, blocked[p.Key], false)
		node := p.Obj.Spec.NodeName
		e.gauge(podGate, boolFloat(g.Pass), ns, name, uid, node, string(g.Gate), g.Reason)
		e.gauge(podReady, boolFloat(p.Ready()), ns, name, uid, node)
	}
	return nil
}
