package main

// The gates from an evidence bundle: the api gate from its objects (the
// exporter's own classify.APIGate), the node gate from its objects and the
// node agents' recorded /metrics (internal/nodegate). The workload gate
// needs GPU activity over time: Prometheus only.

import (
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/nodegate"
	"github.com/dra-exporter/dra-exporter/internal/offline"
)

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
	agents := map[string]*nodegate.Agent{}
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
			node, view, err := nodegate.ReadAgent(m.Data)
			if err != nil {
				return nil, fmt.Errorf("%s:%s: %w", path, m.Path, err)
			}
			if node == "" {
				node = strings.TrimSuffix(strings.TrimPrefix(m.Path, bundle.AgentsDir), ".prom")
			}
			view.Source = path + ":" + m.Path
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
			pass, reason, evidence := nodegate.Evaluate(s, p, blocked[p.Key], agents[pg.Node])
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
