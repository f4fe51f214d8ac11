package main

// The gates from an evidence bundle: the api gate from its objects (the
// exporter's own classify.APIGate), the node gate from its objects and the
// node agents' recorded /metrics, evaluated as the recording rule
// namespace_pod:dra_pod_gate_node:status evaluates it (TestNodeGateMatchesRule
// holds the two equal). The workload gate needs GPU activity over time:
// Prometheus only.

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/offline"
)

// The node gate's reasons, in the rule's order.
const (
	nodePrepareFailed        = "prepare_failed"
	nodeNotReady             = "node_not_ready"
	nodeNoAgent              = "no_node_agent"
	nodePodResourcesDown     = "podresources_down"
	nodePodResourcesNoDRA    = "podresources_without_dra"
	nodeIsolationViolation   = "isolation_violation"
	nodePreparedWithoutClaim = "prepared_without_claim"
	nodeBothLanes            = "both_lanes"
	nodeNotPrepared          = "not_prepared"
	nodeDeviceUnhealthy      = "device_unhealthy"
	nodeIsolationUnverified  = "isolation_unverified"
)

// agentView is what one node agent's recorded /metrics say.
type agentView struct {
	source string
	// up, dynamic, visible, sourceUp: the node-wide series (absent: -1).
	up, dynamic, visible, sourceUp float64
	holders                        []map[string]string
	violations, conflicts          []map[string]string
}

func offlineGates(ns string, sel labels.Selector, f gatesFlags, stderr io.Writer) (*gatesReport, error) {
	cfg := f.cfg
	// Keep the selector's label keys through trimming.
	if reqs, ok := sel.Requirements(); ok && len(reqs) > 0 {
		keys := make([]string, 0, len(reqs))
		for _, r := range reqs {
			keys = append(keys, r.Key())
		}
		if cfg.podLabels != "" {
			cfg.podLabels += ","
		}
		cfg.podLabels += strings.Join(keys, ",")
	}
	control, err := cfg.controlLabel()
	if err != nil {
		return nil, err
	}
	ix, problems, err := offline.Build(f.from, cfg.trimmer(), cfg.indexConfig(time.Now, nil))
	if err != nil {
		return nil, err
	}
	reportProblems(stderr, problems)
	agents := map[string]*agentView{}
	created := time.Time{}
	for _, path := range f.from {
		if !bundle.Is(path) {
			continue
		}
		b, err := bundle.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if b.Manifest.Created.After(created) {
			created = b.Manifest.Created
		}
		for _, m := range b.Under(bundle.AgentsDir) {
			if !strings.HasSuffix(m.Path, ".prom") {
				continue
			}
			node, view, err := readAgent(m.Data)
			if err != nil {
				return nil, fmt.Errorf("%s:%s: %w", path, m.Path, err)
			}
			if node == "" {
				node = strings.TrimSuffix(strings.TrimPrefix(m.Path, bundle.AgentsDir), ".prom")
			}
			view.source = path + ":" + m.Path
			agents[node] = view
		}
	}
	if created.IsZero() {
		created = time.Now()
	}
	s := ix.Snapshot()
	blocked := map[index.Key]*classify.Verdict{}
	for _, v := range (&classify.Memo{}).Kept(s) {
		blocked[v.Pod.Key] = v
	}
	r := &gatesReport{Namespace: ns, Source: strings.Join(f.from, ", "), At: created}
	if !sel.Empty() {
		r.Selector = sel.String()
	}
	for _, p := range s.Pods {
		lane := s.PodLane(p)
		if p.Key.Namespace != ns || (lane != index.LaneDRA && lane != index.LaneDRAExtended) {
			continue
		}
		if control.Matches(p) {
			if p.Obj.DeletionTimestamp != nil && !p.Started() {
				continue
			}
			c := classify.NegativeControl(s, p, blocked[p.Key], true)
			r.Controls = append(r.Controls, controlReport{Namespace: ns, Pod: p.Key.Name, PodUID: string(p.UID), State: string(c.State), Holds: c.Holds,
				Reason: c.Reason, Why: c.Why, Claim: c.Claim, Node: c.Node, Device: c.Device, Evidence: c.Evidence})
			continue
		}
		if p.Terminal() || p.Obj.DeletionTimestamp != nil || !sel.Matches(labels.Set(p.Obj.Labels)) {
			continue
		}
		api := classify.APIGate(s, p, blocked[p.Key], true)
		pg := podGates{Namespace: ns, Pod: p.Key.Name, PodUID: string(p.UID), Node: p.Obj.Spec.NodeName}
		pg.Gates = append(pg.Gates, gateReport{Gate: string(classify.GateAPI), Owner: classify.GateAPI.Owner(),
			State: passFail(api.Pass), Reason: api.Reason, Evidence: api.Evidence})
		node := gateReport{Gate: string(classify.GateNode), Owner: classify.GateNode.Owner(), State: stateFail, Reason: gateAbsent,
			Evidence: []string{"the pod is not bound to a node"}}
		if pg.Node != "" {
			pass, reason, evidence := nodeGate(s, p, blocked[p.Key], agents[pg.Node])
			node = gateReport{Gate: node.Gate, Owner: node.Owner, State: passFail(pass), Reason: reason, Evidence: evidence}
		}
		pg.Gates = append(pg.Gates, node,
			gateReport{Gate: string(classify.GateWorkload), Owner: classify.GateWorkload.Owner(), State: stateNotEvaluated,
				Evidence: []string{"needs Prometheus: readiness and GPU activity over the window (" + readiness(p) + " in the bundle)"}})
		r.Pods = append(r.Pods, pg)
	}
	return r, nil
}

func passFail(pass bool) string {
	if pass {
		return statePass
	}
	return stateFail
}

func readiness(p *index.Pod) string {
	if p.Ready() {
		return "Ready"
	}
	return "not Ready"
}

// readAgent parses a node agent's recorded /metrics.
func readAgent(data []byte) (string, *agentView, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return "", nil, fmt.Errorf("a node agent's /metrics do not parse: %w", err)
	}
	v := &agentView{up: -1, dynamic: -1, visible: -1, sourceUp: -1}
	one := func(name string) float64 {
		f := families[name]
		if f == nil {
			return -1
		}
		out := -1.0
		for _, m := range f.Metric {
			if val := m.GetGauge().GetValue(); out < 0 || val < out {
				out = val // the minimum: a source down is down
			}
		}
		return out
	}
	v.up, v.dynamic, v.visible, v.sourceUp = one("dra_node_podresources_up"), one("dra_node_podresources_dynamic_resources"),
		one("dra_node_host_processes_visible"), one("dra_gpu_source_up")
	v.holders = labelSets(families["dra_gpu_holder_info"])
	v.violations = labelSets(families["dra_gpu_isolation_violation"])
	v.conflicts = labelSets(families["dra_node_claim_conflict"])
	node := ""
	for _, l := range labelSets(families["dra_gpu_info"]) {
		node = l["node"]
		break
	}
	return node, v, nil
}

func labelSets(f *dto.MetricFamily) []map[string]string {
	if f == nil {
		return nil
	}
	var out []map[string]string
	for _, m := range f.Metric {
		l := map[string]string{}
		for _, lp := range m.Label {
			l[lp.GetName()] = lp.GetValue()
		}
		out = append(out, l)
	}
	return out
}

// nodeGate evaluates the node gate of a bound pod as the recording rule
// does: the first of its reasons that holds, else a pass.
func nodeGate(s *index.Snapshot, p *index.Pod, blocked *classify.Verdict, a *agentView) (bool, string, []string) {
	uid := string(p.UID)
	var evidence []string
	fail := func(reason string, ev ...string) (bool, string, []string) {
		return false, reason, append(evidence, ev...)
	}
	if blocked != nil && blocked.Reason == classify.NodePrepareFailed {
		return fail(nodePrepareFailed, fmt.Sprintf("decision tree: %s (claim %s, device %s)", blocked.Reason, blocked.Claim, blocked.Device))
	}
	if blocked != nil && blocked.Reason == classify.NodeNotReady {
		return fail(nodeNotReady, "decision tree: node_not_ready")
	}
	if a == nil || a.up < 0 {
		return fail(nodeNoAgent, "the bundle has no node agent's /metrics for node "+p.Obj.Spec.NodeName)
	}
	evidence = append(evidence, "node agent: "+a.source)
	if a.up == 0 {
		return fail(nodePodResourcesDown, "dra_node_podresources_up 0: the kubelet's pod-resources API did not answer")
	}
	if a.dynamic == 0 {
		return fail(nodePodResourcesNoDRA, "dra_node_podresources_dynamic_resources 0: the kubelet does not report DRA claims")
	}
	mine := func(ls []map[string]string, reason string) []map[string]string {
		var out []map[string]string
		for _, l := range ls {
			if l["namespace"] == p.Key.Namespace && l["pod_uid"] == uid && (reason == "" || l["reason"] == reason) {
				out = append(out, l)
			}
		}
		return out
	}
	if v := mine(a.violations, ""); len(v) > 0 {
		return fail(nodeIsolationViolation, fmt.Sprintf("a process of the pod runs on GPU %s, which it does not hold", v[0]["gpu_uuid"]))
	}
	for _, reason := range []string{nodePreparedWithoutClaim, nodeBothLanes} {
		if c := mine(a.conflicts, reason); len(c) > 0 {
			return fail(reason, fmt.Sprintf("%s: device %s (GPU %s) of claim %s", reason, c[0]["device"], c[0]["gpu_uuid"], c[0]["claim"]))
		}
	}
	allocated := 0
	for _, pc := range s.ResolvePodClaims(p) {
		if pc.Claim == nil || !pc.Claim.ReservedFor(p.UID) {
			continue
		}
		for _, r := range pc.Claim.Results {
			if d := s.Device(r.Device); d != nil && d.GPUUUID != "" && !r.AdminAccess {
				allocated++
			}
		}
	}
	var held []string
	for _, h := range mine(a.holders, "") {
		if (h["lane"] == index.LaneDRA || h["lane"] == index.LaneDRAExtended) && h["gpu_uuid"] != "" {
			held = append(held, fmt.Sprintf("the kubelet prepared GPU %s for claim %s", h["gpu_uuid"], h["claim"]))
		}
	}
	sort.Strings(held)
	evidence = append(evidence, held...)
	if len(held) < allocated || len(mine(a.conflicts, nodeNotPrepared)) > 0 {
		return fail(nodeNotPrepared, fmt.Sprintf("%d GPU(s) allocated to the pod, %d prepared for it", allocated, len(held)))
	}
	for _, h := range classify.HeldWithSignal(s) {
		if h.Pod == p && h.Health == "unhealthy" {
			return fail(nodeDeviceUnhealthy, fmt.Sprintf("the kubelet reports device %s unhealthy", h.Device.Key))
		}
	}
	if a.visible == 0 || a.sourceUp == 0 {
		return fail(nodeIsolationUnverified, "the agent cannot tell which pod runs a GPU process (GPU source down or host processes not visible)")
	}
	return true, "", evidence
}
