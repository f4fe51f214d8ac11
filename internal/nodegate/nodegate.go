// Package nodegate evaluates the node gate of a pod from an evidence
// bundle: the cluster's objects and the node agents' recorded /metrics,
// as the recording rule namespace_pod:dra_pod_gate_node:status evaluates
// it from the live series (gates' TestNodeGateMatchesRule holds the two
// equal). The api gate is the exporter's own classify.APIGate; the
// workload gate needs GPU activity over time: Prometheus only.
package nodegate

import (
	"bytes"
	"fmt"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// The node gate's reasons, in the rule's order.
const (
	PrepareFailed        = "prepare_failed"
	NotReady             = "node_not_ready"
	NoAgent              = "no_node_agent"
	PodResourcesDown     = "podresources_down"
	PodResourcesNoDRA    = "podresources_without_dra"
	IsolationViolation   = "isolation_violation"
	PreparedWithoutClaim = "prepared_without_claim"
	BothLanes            = "both_lanes"
	NotPrepared          = "not_prepared"
	DeviceUnhealthy      = "device_unhealthy"
	IsolationUnverified  = "isolation_unverified"
)

// Reasons are the node gate's reasons, in the rule's order.
var Reasons = []string{PrepareFailed, NotReady, NoAgent, PodResourcesDown, PodResourcesNoDRA,
	IsolationViolation, PreparedWithoutClaim, BothLanes, NotPrepared, DeviceUnhealthy, IsolationUnverified}

// Agent is what one node agent's recorded /metrics say.
type Agent struct {
	// Source is where they were read, for the evidence.
	Source string
	// up, dynamic, visible, sourceUp: the node-wide series (absent: -1).
	up, dynamic, visible, sourceUp float64
	holders                        []map[string]string
	violations, conflicts          []map[string]string
}

// ReadAgent parses a node agent's recorded /metrics and returns its node
// (empty when they name none) and what they say.
func ReadAgent(data []byte) (string, *Agent, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return "", nil, fmt.Errorf("a node agent's /metrics do not parse: %w", err)
	}
	v := &Agent{up: -1, dynamic: -1, visible: -1, sourceUp: -1}
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

// Evaluate evaluates the node gate of a bound pod as the recording rule
// does: the first of its reasons that holds, else a pass, with the
// evidence. blocked is the pod's verdict of the decision tree (nil when
// none), a what the agent of its node recorded (nil when none).
func Evaluate(s *index.Snapshot, p *index.Pod, blocked *classify.Verdict, a *Agent) (bool, string, []string) {
	uid := string(p.UID)
	var evidence []string
	fail := func(reason string, ev ...string) (bool, string, []string) {
		return false, reason, append(evidence, ev...)
	}
	if blocked != nil && (blocked.Reason == classify.NodePrepareFailed || blocked.Reason == classify.CDISpecMissing) {
		return fail(PrepareFailed, fmt.Sprintf("decision tree: %s (claim %s, device %s)", blocked.Reason, blocked.Claim, blocked.Device))
	}
	if blocked != nil && blocked.Reason == classify.NodeNotReady {
		return fail(NotReady, "decision tree: node_not_ready")
	}
	if a == nil || a.up < 0 {
		return fail(NoAgent, "the bundle has no node agent's /metrics for node "+p.Obj.Spec.NodeName)
	}
	evidence = append(evidence, "node agent: "+a.Source)
	if a.up == 0 {
		return fail(PodResourcesDown, "dra_node_podresources_up 0: the kubelet's pod-resources API did not answer")
	}
	if a.dynamic == 0 {
		return fail(PodResourcesNoDRA, "dra_node_podresources_dynamic_resources 0: the kubelet does not report DRA claims")
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
		return fail(IsolationViolation, fmt.Sprintf("a process of the pod runs on GPU %s, which it does not hold", v[0]["gpu_uuid"]))
	}
	for _, reason := range []string{PreparedWithoutClaim, BothLanes} {
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
	if len(held) < allocated || len(mine(a.conflicts, NotPrepared)) > 0 {
		return fail(NotPrepared, fmt.Sprintf("%d GPU(s) allocated to the pod, %d prepared for it", allocated, len(held)))
	}
	for _, h := range classify.HeldWithSignal(s) {
		if h.Pod == p && h.Health == "unhealthy" {
			return fail(DeviceUnhealthy, fmt.Sprintf("the kubelet reports device %s unhealthy", h.Device.Key))
		}
	}
	if a.visible == 0 || a.sourceUp == 0 {
		return fail(IsolationUnverified, "the agent cannot tell which pod runs a GPU process (GPU source down or host processes not visible)")
	}
	return true, "", evidence
}
