package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dra-exporter/dra-exporter/internal/classify"
)

// Exit codes of the gates command: a pipeline tells a failed gate from a
// verdict that could not be reached.
const (
	gatesPass  = 0
	gatesFail  = 1
	gatesUsage = 2
	// gatesError: the evidence could not be read, or cannot be judged (no
	// pod, a Prometheus that does not evaluate rules/gates.yaml).
	gatesError = 3
	// gatesPartial: every gate evaluated passed, some were not evaluated
	// (gates --from: the workload gate needs Prometheus).
	gatesPartial = 4
)

// gateSeries is the recording rule that holds the three gates
// (rules/gates.yaml).
const gateSeries = "namespace_pod_gate:dra_pod_gate:status"

type gatesFlags struct {
	cfg            config
	selector       string
	prometheusURL  string
	window         time.Duration
	step           time.Duration
	output         string
	from           []string
	kube           kubeTarget
	timeout        time.Duration
	requireControl bool
}

func gates(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Prints, per DRA pod of the canary, the evidence gates api (platform team), node (node/runtime owner) and "+
		"workload (inference owner), PASS or FAIL with their evidence, the namespace's negative controls, and one verdict. "+
		exitHelp(gatesExitCodes), stdout, stderr)
	var f gatesFlags
	app.Flag("selector", "Label selector of the canary's pods (reads the pods from the API server, get and list only); default every DRA pod of the namespace.").
		Short('l').PlaceHolder("SELECTOR").StringVar(&f.selector)
	app.Flag("prometheus.url", "The Prometheus that scrapes the exporter and the node agents and evaluates rules/gates.yaml.").
		Default("http://localhost:9090").StringVar(&f.prometheusURL)
	app.Flag("window", "Every gate must have passed at every evaluation of this window (the article's \"three PASSes in a row\"; rules/gates.yaml records the verdict over 5m).").
		Default("5m").DurationVar(&f.window)
	app.Flag("step", "The resolution the window is read at (default: the window / 30, at least 1s).").Default("0s").DurationVar(&f.step)
	app.Flag("output", "Output: text or json.").Short('o').Default("text").EnumVar(&f.output, "text", "json")
	app.Flag("from", "An evidence bundle (dra-exporter bundle) to evaluate instead of Prometheus: gates api and node from its objects and agents (repeatable; object files too).").
		PlaceHolder("BUNDLE").StringsVar(&f.from)
	kubeconfig, kubeContext := registerKubeconfig(app), registerContext(app)
	app.Flag("timeout", "Time allowed for the queries.").Default("1m").DurationVar(&f.timeout)
	app.Flag("require-negative-control", "The verdict needs a negative control in the namespace that held (the article's order: three PASSes and a negative control).").
		Default("true").BoolVar(&f.requireControl)
	f.cfg.register(app)
	var ns string
	app.Arg("namespace", "The canary's namespace (or -n).").PlaceHolder("NAMESPACE").StringVar(&ns)
	nsFlag := registerNamespace(app)
	if rc, ok := parse(app, args); !ok {
		return rc // gatesPass after the help, gatesUsage
	}
	f.kube = kubeTarget{*kubeconfig, *kubeContext}
	switch {
	case ns == "" && *nsFlag == "":
		app.Errorf("the canary's namespace is required: NAMESPACE or -n NAMESPACE, try --help")
		return gatesUsage
	case ns == "":
		ns = *nsFlag
	case *nsFlag != "" && *nsFlag != ns:
		app.Errorf("namespace %q and -n %q differ, try --help", ns, *nsFlag)
		return gatesUsage
	}
	if f.window <= 0 || f.step < 0 {
		app.Errorf("--window must be positive and --step not negative, try --help")
		return gatesUsage
	}
	sel, err := labels.Parse(f.selector)
	if err != nil {
		app.Errorf("-l: %v, try --help", err)
		return gatesUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	var r *gatesReport
	if len(f.from) > 0 {
		r, err = offlineGates(ns, sel, f, stderr)
	} else {
		r, err = onlineGates(ctx, ns, sel, f)
	}
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return gatesError
	}
	r.RequireControl = f.requireControl
	r.decide()
	if f.output == "json" {
		err = r.writeJSON(stdout)
	} else {
		err = r.writeText(stdout)
	}
	if err != nil {
		return gatesError
	}
	return gatesExit[r.Verdict.Outcome]
}

// podsMatching returns the UIDs of the namespace's pods the selector
// matches, from the API server; nil when the selector is empty.
func podsMatching(ctx context.Context, kt kubeTarget, ns string, sel labels.Selector) (map[string]bool, error) {
	if sel.Empty() {
		return nil, nil
	}
	client, err := kubeClient(kt)
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s matching %s: %w", ns, sel, err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		out[string(p.UID)] = true
	}
	return out, nil
}

// onlineGates reads the gates from Prometheus.
func onlineGates(ctx context.Context, ns string, sel labels.Selector, f gatesFlags) (*gatesReport, error) {
	uids, err := podsMatching(ctx, f.kube, ns, sel)
	if err != nil {
		return nil, err
	}
	client, err := promapi.NewClient(promapi.Config{Address: f.prometheusURL})
	if err != nil {
		return nil, fmt.Errorf("--prometheus.url: %w", err)
	}
	q := promQuerier{url: f.prometheusURL, api: promv1.NewAPI(client), end: time.Now(), ns: ns}
	step := f.step
	if step == 0 {
		step = max(f.window/30, time.Second).Truncate(time.Second)
	}
	q.rng = promv1.Range{Start: q.end.Add(-f.window), End: q.end, Step: step}
	steps := int(f.window/step) + 1
	r := &gatesReport{Namespace: ns, Source: f.prometheusURL, At: q.end, Window: f.window.String(), Evaluations: steps}
	if !sel.Empty() {
		r.Selector = sel.String()
	}

	if uids != nil && len(uids) == 0 {
		r.noPodHint = fmt.Sprintf(" (the API server has no pod in namespace %s matching %s)", ns, sel)
		return r, nil
	}
	judge, err := q.canJudge(ctx, f.window)
	if err != nil {
		return nil, err
	}
	if judge.problem != "" {
		r.cannotJudge = judge.problem
		return r, nil
	}
	if !judge.raw {
		r.noPodHint = fmt.Sprintf(" (Prometheus has no dra_pod_gate of namespace %s in the window: no DRA pod runs there, or the exporter is not scraped)", ns)
	}
	gateHist, err := q.history(ctx, gateSeries)
	if err != nil {
		return nil, err
	}
	ev, err := q.evidence(ctx, f.window)
	if err != nil {
		return nil, err
	}
	for _, uid := range gateHist.current(steps) {
		if uids != nil && !uids[uid] {
			continue
		}
		p := gateHist.pods[uid]
		pg := podGates{Namespace: ns, Pod: p.pod, PodUID: uid, Node: p.node}
		for _, g := range classify.Gates {
			h := p.gates[string(g)]
			gr := gateReport{Gate: string(g), Owner: g.Owner()}
			var whole bool
			gr.State, gr.Reason, whole, gr.Failed, gr.History = h.summary(steps, q.rng)
			gr.PassedWindow = &whole
			gr.Evidence = ev.forGate(g, uid)
			if gr.State == stateFail && g != classify.GateWorkload {
				gr.Evidence = append(gr.Evidence, fmt.Sprintf("kubectl dra-exporter explain %s/%s prints every link with the components' own messages", ns, p.pod))
			}
			pg.Gates = append(pg.Gates, gr)
		}
		r.Pods = append(r.Pods, pg)
	}
	controls, err := q.history(ctx, "dra_negative_control")
	if err != nil {
		return nil, err
	}
	for _, uid := range controls.current(steps) {
		p := controls.pods[uid]
		h := p.gates[""]
		state, reason, held, _, history := h.summary(steps, q.rng)
		c := controlReport{Namespace: ns, Pod: p.pod, PodUID: uid, Holds: state == statePass, HeldWindow: &held, Reason: reason, History: history,
			Claim: p.last["claim"], Node: p.last["node"], Device: p.last["device"]}
		if c.Holds {
			c.Reason = p.last["reason"]
		}
		cs, why := classify.ControlStateOf(c.Reason)
		c.State, c.Why = string(cs), why
		if reason == gateAbsent {
			c.State = string(classify.ControlBroken)
		}
		c.Holds = cs == classify.ControlHolds
		if c.Device != "" {
			c.Evidence = append(c.Evidence, fmt.Sprintf("claim %s was allocated device %s on node %s", c.Claim, c.Device, c.Node))
		}
		r.Controls = append(r.Controls, c)
	}
	return r, nil
}

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
