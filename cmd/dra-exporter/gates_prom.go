package main

// The gates from Prometheus: whether it evaluates rules/gates.yaml, the
// recorded gate series over the window, and the evidence per gate.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/dra-exporter/dra-exporter/internal/classify"
)

// judgement is whether the Prometheus asked can judge the gates.
type judgement struct {
	// problem says why it cannot; empty when it can.
	problem string
	// raw: the exporter's dra_pod_gate of the namespace is there.
	raw bool
}

// canJudge checks that the Prometheus evaluates rules/gates.yaml: its
// rules API lists the recording rule of the gates, healthy, or the
// recorded series are there (a ruler beside a querier records them while
// the querier lists no rule). The exporter's own series present and the
// recorded ones absent say the same without the rules API.
func (q promQuerier) canJudge(ctx context.Context, window time.Duration) (judgement, error) {
	w := model.Duration(window).String()
	count := func(name string) (bool, error) {
		v, err := q.instant(ctx, fmt.Sprintf("count(last_over_time(%s{namespace=%q}[%s]))", name, q.ns, w))
		return len(v) > 0 && v[0].Value > 0, err
	}
	var j judgement
	var err error
	if j.raw, err = count("dra_pod_gate"); err != nil {
		return j, err
	}
	recorded, err := count(gateSeries)
	if err != nil {
		return j, err
	}
	listed, why := false, ""
	if rules, err := q.api.Rules(ctx, nil); err == nil {
		for _, g := range rules.Groups {
			for _, rule := range g.Rules {
				rr, ok := rule.(promv1.RecordingRule)
				if !ok || rr.Name != gateSeries {
					continue
				}
				listed = true
				if rr.Health == promv1.RuleHealthBad {
					why = fmt.Sprintf("its recording rule %s (group %s) fails: %s", gateSeries, g.Name, rr.LastError)
				}
			}
		}
		if !listed && !recorded {
			why = fmt.Sprintf("its rules API lists no recording rule %s and no such series is recorded", gateSeries)
		}
	}
	if why == "" && j.raw && !recorded {
		why = fmt.Sprintf("it has the exporter's dra_pod_gate of namespace %s but no %s in the window", q.ns, gateSeries)
	}
	if why != "" {
		j.problem = fmt.Sprintf("Prometheus at %s does not evaluate rules/gates.yaml (%s): load the rules (the chart's PrometheusRule, selected by the Prometheus' ruleSelector), then ask again", q.url, why)
	}
	return j, nil
}

type promQuerier struct {
	url string
	api promv1.API
	ns  string
	end time.Time
	rng promv1.Range
}

func (q promQuerier) instant(ctx context.Context, query string) (model.Vector, error) {
	v, _, _, err := q.api.Query(ctx, query, q.end)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: got %s, want a vector", query, v.Type())
	}
	return vec, nil
}

// history reads a gate-like series (value 1 passing, 0 failing, with a
// reason) of the namespace over the window.
func (q promQuerier) history(ctx context.Context, name string) (*seriesHistory, error) {
	query := fmt.Sprintf("%s{namespace=%q}", name, q.ns)
	v, _, _, err := q.api.QueryRange(ctx, query, q.rng)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("query %s: got %s, want a matrix", query, v.Type())
	}
	h := &seriesHistory{pods: map[string]*podHistory{}}
	for _, s := range m {
		uid := string(s.Metric["pod_uid"])
		p := h.pods[uid]
		if p == nil {
			p = &podHistory{gates: map[string]*stepHistory{}}
			h.pods[uid] = p
		}
		gh := p.gates[string(s.Metric["gate"])]
		if gh == nil {
			gh = &stepHistory{}
			p.gates[string(s.Metric["gate"])] = gh
		}
		for _, sp := range s.Values {
			i := int((sp.Timestamp.Time().Sub(q.rng.Start) + q.rng.Step/2) / q.rng.Step)
			gh.record(i, sp.Value == 1, string(s.Metric["reason"]))
			if i >= p.lastStep {
				p.lastStep, p.pod, p.node = i, string(s.Metric["pod"]), string(s.Metric["node"])
				p.last = map[string]string{}
				for k, v := range s.Metric {
					p.last[string(k)] = string(v)
				}
			}
		}
	}
	return h, nil
}

// seriesHistory is a namespace's gate series over the window, by pod UID.
type seriesHistory struct {
	pods map[string]*podHistory
}

type podHistory struct {
	pod, node string
	lastStep  int
	// last are the labels of the newest sample.
	last  map[string]string
	gates map[string]*stepHistory
}

// current returns the pods seen at the window's last evaluation, sorted.
func (h *seriesHistory) current(steps int) []string {
	var out []string
	for uid, p := range h.pods {
		if p.lastStep >= steps-1 {
			out = append(out, uid)
		}
	}
	sort.Strings(out)
	return out
}

// stepHistory is one gate of one pod at each evaluation of the window.
type stepHistory struct {
	pass, fail map[int]bool
	reason     map[int]string
}

func (s *stepHistory) record(i int, pass bool, reason string) {
	if s.pass == nil {
		s.pass, s.fail, s.reason = map[int]bool{}, map[int]bool{}, map[int]string{}
	}
	if pass {
		s.pass[i] = true
		return
	}
	s.fail[i] = true
	s.reason[i] = reason
}

// summary reads the gate's window: its state and reason now, whether it
// passed at every evaluation, how many evaluations failed or lacked it,
// and, when not every one passed, when it last failed and since when it
// has been seen.
func (s *stepHistory) summary(steps int, rng promv1.Range) (state, reason string, whole bool, failed int, history string) {
	at := func(i int) string { return rng.Start.Add(time.Duration(i) * rng.Step).UTC().Format("15:04:05") }
	if s == nil || (len(s.pass) == 0 && len(s.fail) == 0) {
		return stateFail, gateAbsent, false, steps, "no series in the window (the pod is not bound, or no gate rule ran)"
	}
	last := steps - 1
	switch {
	case s.fail[last]:
		state, reason = stateFail, s.reason[last]
	case s.pass[last]:
		state = statePass
	default:
		state, reason = stateFail, gateAbsent
	}
	first, lastFail, lastReason := -1, -1, ""
	for i := 0; i < steps; i++ {
		if (s.pass[i] || s.fail[i]) && first < 0 {
			first = i
		}
		if s.fail[i] || !s.pass[i] {
			failed++
			if s.fail[i] {
				lastFail, lastReason = i, s.reason[i]
			}
		}
	}
	if failed == 0 {
		return state, reason, true, 0, ""
	}
	parts := []string{fmt.Sprintf("%d of %d evaluations failed or missing", failed, steps)}
	if first > 0 {
		parts = append(parts, "first seen "+at(first))
	}
	if lastFail >= 0 && state == statePass {
		parts = append(parts, fmt.Sprintf("last failed %s (%s)", at(lastFail), lastReason))
	}
	return state, reason, false, failed, strings.Join(parts, ", ")
}

// gateEvidence holds what the exporter and the agents say of each pod.
type gateEvidence struct {
	api, node, workload map[string][]string
}

func (e *gateEvidence) forGate(g classify.Gate, uid string) []string {
	switch g {
	case classify.GateAPI:
		return e.api[uid]
	case classify.GateNode:
		return e.node[uid]
	}
	return e.workload[uid]
}

// evidence reads, at the end of the window, the series each gate stands on.
func (q promQuerier) evidence(ctx context.Context, window time.Duration) (*gateEvidence, error) {
	ev := &gateEvidence{api: map[string][]string{}, node: map[string][]string{}, workload: map[string][]string{}}
	ns := fmt.Sprintf("namespace=%q", q.ns)
	read := func(query string) (model.Vector, error) { return q.instant(ctx, query) }

	alloc, err := read("dra_claim_allocation_info{" + ns + "}")
	if err != nil {
		return nil, err
	}
	devices := map[string][]string{}
	for _, s := range alloc {
		m := s.Metric
		d := fmt.Sprintf("device %s/%s/%s", m["driver"], m["pool"], m["device"])
		if m["gpu_uuid"] != "" {
			d += fmt.Sprintf(" (uuid %s)", m["gpu_uuid"])
		}
		if m["node"] != "" {
			d += " on node " + string(m["node"])
		}
		devices[string(m["claim"])] = append(devices[string(m["claim"])], d)
	}
	reserved, err := read("dra_claim_reserved_for_info{" + ns + "}")
	if err != nil {
		return nil, err
	}
	for _, s := range sortedVector(reserved) {
		uid, claim := string(s.Metric["pod_uid"]), string(s.Metric["claim"])
		d := strings.Join(devices[claim], ", ")
		if d == "" {
			d = "no device"
		}
		ev.api[uid] = append(ev.api[uid], fmt.Sprintf("claim %s: allocated %s, reserved for the pod", claim, d))
	}
	blocked, err := read("dra_pod_blocked{" + ns + "}")
	if err != nil {
		return nil, err
	}
	for _, s := range blocked {
		m := s.Metric
		line := fmt.Sprintf("decision tree: %s (layer %s", m["reason"], m["layer"])
		if m["claim"] != "" {
			line += ", claim " + string(m["claim"])
		}
		line += ")"
		switch classify.Layer(m["layer"]) {
		case classify.LayerController, classify.LayerScheduler:
			ev.api[string(m["pod_uid"])] = append(ev.api[string(m["pod_uid"])], line)
		case classify.LayerNode:
			ev.node[string(m["pod_uid"])] = append(ev.node[string(m["pod_uid"])], line)
		default:
			ev.workload[string(m["pod_uid"])] = append(ev.workload[string(m["pod_uid"])], line)
		}
	}
	holders, err := read(`dra_gpu_holder_info{` + ns + `, lane=~"dra|dra-extended"}`)
	if err != nil {
		return nil, err
	}
	for _, s := range sortedVector(holders) {
		m := s.Metric
		ev.node[string(m["pod_uid"])] = append(ev.node[string(m["pod_uid"])],
			fmt.Sprintf("the kubelet prepared GPU %s for claim %s (node agent of %s)", m["gpu_uuid"], m["claim"], m["node"]))
	}
	violations, err := read("dra_gpu_isolation_violation{" + ns + "}")
	if err != nil {
		return nil, err
	}
	for _, s := range violations {
		m := s.Metric
		ev.node[string(m["pod_uid"])] = append(ev.node[string(m["pod_uid"])], fmt.Sprintf("a process of the pod runs on GPU %s of node %s, which it does not hold", m["gpu_uuid"], m["node"]))
	}
	conflicts, err := read("dra_node_claim_conflict{" + ns + "}")
	if err != nil {
		return nil, err
	}
	for _, s := range conflicts {
		m := s.Metric
		ev.node[string(m["pod_uid"])] = append(ev.node[string(m["pod_uid"])], fmt.Sprintf("%s: device %s (GPU %s) of claim %s on node %s", m["reason"], m["device"], m["gpu_uuid"], m["claim"], m["node"]))
	}
	ready, err := read("dra_pod_ready{" + ns + "}")
	if err != nil {
		return nil, err
	}
	for _, s := range ready {
		line := "the pod is Ready"
		if s.Value != 1 {
			line = "the pod is not Ready"
		}
		ev.workload[string(s.Metric["pod_uid"])] = append(ev.workload[string(s.Metric["pod_uid"])], line)
	}
	w := model.Duration(window).String()
	activity, err := read(fmt.Sprintf(`max by (pod_uid, gpu_uuid) (max_over_time(dra_gpu_utilization_ratio{%s, pod_uid!=""}[%s]))`, ns, w))
	if err != nil {
		return nil, err
	}
	for _, s := range sortedVector(activity) {
		ev.workload[string(s.Metric["pod_uid"])] = append(ev.workload[string(s.Metric["pod_uid"])],
			fmt.Sprintf("GPU %s: up to %.0f%% busy in the window (node agent)", s.Metric["gpu_uuid"], float64(s.Value)*100))
	}
	dcgm, err := read(fmt.Sprintf(`max by (pod_uid, claim) (max_over_time(namespace_pod_claim:dcgm_gpu_utilization:avg{%s}[%s]))`, ns, w))
	if err != nil {
		return nil, err
	}
	for _, s := range sortedVector(dcgm) {
		ev.workload[string(s.Metric["pod_uid"])] = append(ev.workload[string(s.Metric["pod_uid"])],
			fmt.Sprintf("claim %s: up to %.0f%% busy in the window (dcgm-exporter)", s.Metric["claim"], float64(s.Value)*100))
	}
	return ev, nil
}

func sortedVector(v model.Vector) model.Vector {
	sort.Slice(v, func(i, j int) bool { return v[i].Metric.String() < v[j].Metric.String() })
	return v
}
