package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// clusterLabel is the external label that names a cluster where one
// evaluator (Thanos Ruler, Mimir, a global Prometheus fed by remote write)
// runs the bundle over the series of several clusters. On a cluster's own
// Prometheus the series do not carry it, and grouping or matching on it
// changes nothing.
const clusterLabel = "cluster"

// TestRulesKeepCluster fails on an aggregation or a join of the bundle that
// would merge or match the series of two clusters: node names, pod IPs
// (instance) and namespaces repeat from one cluster to the next. Every
// aggregation groups by cluster and every on () names it. absent() stays
// allowed: it is DRAExporterDown's case of no target in any cluster, and
// its per-cluster twin is written with group by (cluster).
func TestRulesKeepCluster(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	var checked int
	for _, f := range loadBundle(t) {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					t.Fatalf("%s: %s: %v", f.name, r.Alert+r.Record, err)
				}
				for _, loss := range clusterLosses(expr) {
					t.Errorf("%s: %s: %s", f.name, r.Alert+r.Record, loss)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no rules checked")
	}
}

// TestClusterLossesCatches keeps the check above honest: each expression
// here loses the cluster label (or keeps it) in one way.
func TestClusterLossesCatches(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, tc := range []struct {
		expr string
		want []string // substrings of the losses, in order; none: keeps cluster
	}{
		{expr: `sum by (node) (x)`, want: []string{"sum by (node)"}},
		{expr: `sum(x)`, want: []string{"sum by ()"}},
		{expr: `topk by (gpu_uuid) (1, x)`, want: []string{"topk by (gpu_uuid)"}},
		{expr: `count_values by (node) ("v", x)`, want: []string{"count_values by (node)"}},
		{expr: `sum without (cluster, instance) (x)`, want: []string{"sum without (cluster, instance)"}},
		{expr: `x * on (instance) group_left (node) y`, want: []string{"on (instance)"}},
		{expr: `x and on () y`, want: []string{"on ()"}},
		{expr: `x / ignoring (cluster, state) y`, want: []string{"ignoring (cluster, state)"}},
		{expr: `label_replace(x, "cluster", "a", "", "")`, want: []string{"label_replace sets cluster"}},
		{expr: `histogram_quantile(0.5, sum by (le) (rate(x[5m]))) > 1`, want: []string{"sum by (le)"}},
		{expr: `max by (node) (x * on (instance) group_left (node) y)`, want: []string{"max by (node)", "on (instance)"}},
		{expr: `sum by (cluster, node) (x)`},
		{expr: `sum without (instance) (x)`},
		{expr: `x * on (cluster, instance) group_left (node) y`},
		{expr: `x / ignoring (state) y`},
		{expr: `x and y or z unless w`},
		{expr: `1 - x > 0.5`},
		{expr: `absent(up{job="dra-exporter"})`},
		{expr: `label_replace(x, "reason", "a", "", "")`},
	} {
		expr, err := p.ParseExpr(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got := clusterLosses(expr)
		if len(got) != len(tc.want) {
			t.Errorf("%s: losses %q, want %d matching %q", tc.expr, got, len(tc.want), tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: loss %q, want it to name %q", tc.expr, got[i], w)
			}
		}
	}
}

// clusterLosses returns, in the order they appear, the parts of expr that
// merge or match series across clusters.
func clusterLosses(expr parser.Expr) []string {
	var losses []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.AggregateExpr:
			has := slices.Contains(n.Grouping, clusterLabel)
			switch {
			case n.Without && has:
				losses = append(losses, fmt.Sprintf("%s without (%s) drops %s", n.Op, strings.Join(n.Grouping, ", "), clusterLabel))
			case !n.Without && !has:
				losses = append(losses, fmt.Sprintf("%s by (%s) merges the series of all clusters: group by (%s, ...)", n.Op, strings.Join(n.Grouping, ", "), clusterLabel))
			}
		case *parser.BinaryExpr:
			vm := n.VectorMatching
			if vm == nil {
				return nil // a scalar side: nothing to match
			}
			has := slices.Contains(vm.MatchingLabels, clusterLabel)
			switch {
			case vm.On && !has:
				losses = append(losses, fmt.Sprintf("%s on (%s) matches series of different clusters: on (%s, ...)", n.Op, strings.Join(vm.MatchingLabels, ", "), clusterLabel))
			case !vm.On && has:
				losses = append(losses, fmt.Sprintf("%s ignoring (%s) matches series of different clusters", n.Op, strings.Join(vm.MatchingLabels, ", ")))
			}
		case *parser.Call:
			if n.Func.Name == "label_replace" || n.Func.Name == "label_join" {
				if s, ok := n.Args[1].(*parser.StringLiteral); ok && s.Val == clusterLabel {
					losses = append(losses, fmt.Sprintf("%s sets %s", n.Func.Name, clusterLabel))
				}
			}
		}
		return nil
	})
	return losses
}
