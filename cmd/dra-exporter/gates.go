package main

import (
	"context"
	"fmt"
	"io"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
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
