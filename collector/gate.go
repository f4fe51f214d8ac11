package collector

import (
	"maps"
	"slices"
	"sync"
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
	verdicts *classify.Verdicts
	control  ControlLabel
	rows     *gateRows
}

// NewGateCollector exports the api gate, readiness and negative controls.
// verdicts may be shared with the blocked collector (nil: its own).
func NewGateCollector(control ControlLabel, verdicts *classify.Verdicts) engine.Collector {
	if verdicts == nil {
		verdicts = &classify.Verdicts{}
	}
	return gateCollector{verdicts: verdicts, control: control, rows: &gateRows{}}
}

func (gateCollector) Name() string        { return "gate" }
func (gateCollector) Defs() []*family.Def { return []*family.Def{podGate, podReady, negativeControl} }

func (c gateCollector) Update(s *index.Snapshot, _ time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, e)
	return nil
}

// InputKinds: a row has no inputs but its key (gateRows.kept: the same
// row while the pod's gate holds).
func (gateCollector) InputKinds() index.Kinds { return 0 }

func (c gateCollector) EachRow(s *index.Snapshot, rows *engine.RowPass) {
	for _, r := range c.rows.kept(s, c.verdicts, c.control) {
		if rows.Kept(r) {
			continue
		}
		e := rows.Visit(r, nil)
		if e == nil {
			continue
		}
		p := r.pod
		ns, name, uid := p.Key.Namespace, p.Key.Name, string(p.UID)
		if r.control != nil {
			x := r.control
			e.Gauge(negativeControl, family.BoolFloat(x.Holds), ns, name, uid, x.Claim, x.Node, x.Device, x.Reason)
			continue
		}
		node := p.Obj.Spec.NodeName
		e.Gauge(podGate, family.BoolFloat(r.api.Pass), ns, name, uid, node, string(r.api.Gate), r.api.Reason)
		e.Gauge(podReady, family.BoolFloat(p.Ready()), ns, name, uid, node)
	}
}

// gateRows keeps each pod's gate between scrapes, as classify.Verdicts
// keeps verdicts: a pod's api gate reads the pod, its claims, the events
// about it and its verdict, compared record by record, and the devices
// (the nodes of its allocation), compared by version. A readiness flip or
// a new event evaluates the one pod again; a change of placement checks
// every pod's claims (a map lookup each) and evaluates those whose claims
// changed; a driver's device status changes nothing here.
type gateRows struct {
	mu      sync.Mutex
	version index.Version
	byPod   map[index.Key]*gateRow
	calls   uint64
}

// gateRow is one pod's series: its api gate, or its negative control.
type gateRow struct {
	pod    *index.Pod
	claims []index.PodClaim
	events []*index.Event
	// verdict is what the gates read of the pod's verdict: the tree walks
	// every pod again on a change of placement anywhere, giving new
	// verdicts that say the same.
	verdict verdictKey
	api     classify.GateResult
	control *classify.ControlResult
	call    uint64
}

// claimsCurrent reports whether each claim the pod resolved to is still the
// snapshot's record of that name: a map lookup a claim, where resolving is
// a walk of the pod's spec, status and owned claims. Only when every claim
// was found and the pod requests no extended resource (whose claim the
// scheduler creates before it records it in the pod's status): a claim
// created since could otherwise be missed.
func claimsCurrent(s *index.Snapshot, p *index.Pod, kept []index.PodClaim) bool {
	if len(p.ExtendedRequests) > 0 {
		return false
	}
	for _, pc := range kept {
		if pc.Claim == nil || s.Claim(pc.Claim.Key) != pc.Claim {
			return false
		}
	}
	return true
}

type verdictKey struct {
	blocked bool
	layer   classify.Layer
	reason  classify.Reason
	claim   string
}

func keyOf(v *classify.Verdict) verdictKey {
	if v == nil {
		return verdictKey{}
	}
	return verdictKey{true, v.Layer, v.Reason, v.Claim}
}

// gateWorld are the kinds a gate reads beyond its pod's own records.
const gateWorld = index.DeviceKinds

func (g *gateRows) kept(s *index.Snapshot, verdicts *classify.Verdicts, control ControlLabel) []*gateRow {
	blocked := map[index.Key]*classify.Verdict{}
	for _, v := range verdicts.Kept(s) {
		blocked[v.Pod.Key] = v
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byPod == nil || !s.Version().Unchanged(g.version, gateWorld) {
		g.byPod = map[index.Key]*gateRow{}
	}
	// A claim change that is no change of placement (the driver's device
	// status) changes no gate: the gate reads where a claim is allocated
	// and whom it is reserved for.
	claimsSame := s.Version().Unchanged(g.version, index.KindsOf(index.KindPlacement))
	g.calls++
	var out []*gateRow
	for _, p := range s.Pods {
		if !s.Owns(p.Key.Namespace) {
			continue
		}
		isControl := control.Matches(p)
		switch {
		case isControl && p.Obj.DeletionTimestamp != nil && !p.Started():
			continue
		case !isControl && (p.Terminal() || p.Obj.DeletionTimestamp != nil):
			continue
		}
		lane := s.PodLane(p)
		if lane != index.LaneDRA && lane != index.LaneDRAExtended {
			continue
		}
		events, v := s.PodEventRecords(p), blocked[p.Key]
		r := g.byPod[p.Key]
		same := r != nil && r.pod == p && r.verdict == keyOf(v) && slices.Equal(r.events, events)
		if same && !claimsSame && !claimsCurrent(s, p, r.claims) {
			same = slices.Equal(r.claims, s.ResolvePodClaims(p))
		}
		if !same {
			r = &gateRow{pod: p, claims: s.ResolvePodClaims(p), events: events, verdict: keyOf(v)}
			if isControl {
				x := classify.NegativeControl(s, p, v, false)
				r.control = &x
			} else {
				r.api = classify.APIGate(s, p, v, false)
			}
			g.byPod[p.Key] = r
		}
		r.call = g.calls
		out = append(out, r)
	}
	if len(g.byPod) > len(out) {
		maps.DeleteFunc(g.byPod, func(_ index.Key, r *gateRow) bool { return r.call != g.calls })
	}
	g.version = s.Version()
	return out
}
