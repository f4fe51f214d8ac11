package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// promtool unit-test types.
type (
	ptSeries struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	ptSample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	ptExprTest struct {
		Expr       string     `yaml:"expr"`
		EvalTime   string     `yaml:"eval_time"`
		ExpSamples []ptSample `yaml:"exp_samples"`
	}
	ptGroup struct {
		Name      string       `yaml:"name"`
		Interval  string       `yaml:"interval"`
		Input     []ptSeries   `yaml:"input_series"`
		ExprTests []ptExprTest `yaml:"promql_expr_test"`
	}
)

// runPromtoolTests writes the groups as a promtool test file and runs it.
func runPromtoolTests(t *testing.T, groups []ptGroup) {
	t.Helper()
	raw, err := yaml.Marshal(map[string]any{"rule_files": []string{}, "evaluation_interval": "1m", "tests": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rollouts_test.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, promtool(t), dir, "test", "rules", "rollouts_test.yaml"); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
}

// TestArgoTemplate evaluates each metric of the Argo Rollouts
// AnalysisTemplate (deploy/rollouts), its args filled in as the controller
// fills them (interval 1m), over recorded gate series with promtool: a gate's
// metric is 1 only when every canary pod passed that gate at every
// evaluation of the last interval; 0 when one failed once; no value (the
// controller counts the measurement as failed) without canary pods. The
// stable ReplicaSet's pods and the other gates do not count. The negative
// control's metric is 1 while every control of the namespace held, 0 when
// one broke, no value without one. (test/nodee2e's TestRollouts runs the
// template in the real controller.)
func TestArgoTemplate(t *testing.T) {
	var doc struct {
		Spec struct {
			Metrics []struct {
				Name     string `yaml:"name"`
				Provider struct {
					Prometheus struct {
						Query string `yaml:"query"`
					} `yaml:"prometheus"`
				} `yaml:"provider"`
			} `yaml:"metrics"`
		} `yaml:"spec"`
	}
	readTemplate(t, "argo-analysistemplate.yaml", &doc)
	args := strings.NewReplacer("{{args.namespace}}", "llm", "{{args.rollout}}", "llm-canary", "{{args.canary-hash}}", "6c9f7d8b5", "{{args.interval}}", "1m")
	status := func(pod, gate, reason string) string {
		return fmt.Sprintf(`namespace_pod_gate:dra_pod_gate:status{namespace="llm", pod=%q, pod_uid="uid-%s", node="n1", gate=%q, reason=%q}`, pod, pod, gate, reason)
	}
	control := func(reason string) string {
		return fmt.Sprintf(`dra_negative_control{namespace="llm", pod="control-0", pod_uid="uid-c0", reason=%q}`, reason)
	}
	canary, canary2, stable := "llm-canary-6c9f7d8b5-abcde", "llm-canary-6c9f7d8b5-fghij", "llm-canary-5b8f6c7a4-klmno"
	var groups []ptGroup
	gates := map[string]string{"api": "api gate (owner: platform team)", "node": "node gate (owner: node/runtime owner)", "workload": "workload gate (owner: inference owner)"}
	seen := map[string]bool{}
	for _, m := range doc.Spec.Metrics {
		q := args.Replace(m.Provider.Prometheus.Query)
		if strings.Contains(q, "{{") {
			t.Fatalf("metric %q: a template variable is left: %s", m.Name, q)
		}
		seen[m.Name] = true
		test := func(name string, input []ptSeries, want []ptSample) {
			// Evaluated at 5m: the last interval holds the evaluations of
			// (4m, 5m], the samples at index 5 (one a minute).
			groups = append(groups, ptGroup{Name: m.Name + ": " + name, Interval: "1m", Input: input,
				ExprTests: []ptExprTest{{Expr: q, EvalTime: "5m", ExpSamples: want}}})
		}
		one, zero := []ptSample{{"{}", 1}}, []ptSample{{"{}", 0}}
		if m.Name == "negative control (owner: platform team)" {
			test("the control held: 1", []ptSeries{{control("selector_matches_nothing"), "1x5"}}, one)
			test("the control was allocated a device in the last interval: 0", []ptSeries{
				{control("selector_matches_nothing"), "1x4 _"}, {control("started"), "_x5 0"}}, zero)
			test("no negative control: no value", []ptSeries{{status(canary, "api", ""), "1x5"}}, nil)
			continue
		}
		var gate string
		for g, name := range gates {
			if name == m.Name {
				gate = g
			}
		}
		if gate == "" {
			t.Fatalf("metric %q names no gate and owner of rules/gates.yaml", m.Name)
		}
		other := "api"
		if gate == "api" {
			other = "node"
		}
		test("every canary pod passes: 1", []ptSeries{
			{status(canary, gate, ""), "1x5"}, {status(canary2, gate, ""), "1x5"},
			{status(stable, gate, "prepare_failed"), "0x5"}, // the stable pods do not count
			{status(canary, other, "not_prepared"), "0x5"},  // nor the other gates
		}, one)
		test("failed before the last interval, passed since: 1", []ptSeries{
			{status(canary, gate, "not_ready"), "0x3 _ _"}, {status(canary, gate, ""), "_x5 1"}}, one)
		test("one canary pod failed one evaluation of the last interval: 0", []ptSeries{
			{status(canary, gate, ""), "1x5"}, {status(canary2, gate, ""), "1x4 _"}, {status(canary2, gate, "not_ready"), "_x5 0"},
		}, zero)
		test("no canary pod: no value", []ptSeries{{status(stable, gate, ""), "1x5"}}, nil)
	}
	for _, name := range append([]string{"negative control (owner: platform team)"}, gates["api"], gates["node"], gates["workload"]) {
		if !seen[name] {
			t.Errorf("the template has no metric %q", name)
		}
	}
	runPromtoolTests(t, groups)
}

// TestFlaggerTemplate evaluates the query of the Flagger MetricTemplate
// (deploy/rollouts), with its template variables filled in as Flagger fills
// them (interval 1m), over recorded gate series with promtool: 1 only when
// every canary pod passed all three gates at every evaluation of the last
// interval and every negative control held; 0 when one failed once; no
// value (Flagger counts it as a failed check) without canary pods or
// without a negative control. Flagger's primary pods do not count.
// (test/nodee2e's TestFlagger runs the template in the real Flagger.)
func TestFlaggerTemplate(t *testing.T) {
	var doc struct {
		Spec struct {
			Query string `yaml:"query"`
		} `yaml:"spec"`
	}
	readTemplate(t, "flagger-metrictemplate.yaml", &doc)
	flagger := strings.NewReplacer("{{ namespace }}", "llm", "{{ target }}", "llm-canary", "{{ interval }}", "1m").Replace(doc.Spec.Query)
	if strings.Contains(flagger, "{{") {
		t.Fatalf("a template variable is left: %s", flagger)
	}
	pass := func(pod string) string {
		return fmt.Sprintf(`namespace_pod:dra_pod_gates:pass{namespace="llm", pod=%q, pod_uid="uid-%s"}`, pod, pod)
	}
	control := func(reason string) string {
		return fmt.Sprintf(`dra_negative_control{namespace="llm", pod="control-0", pod_uid="uid-c0", reason=%q}`, reason)
	}
	held := ptSeries{control("selector_matches_nothing"), "1x5"}
	primary := ptSeries{pass("llm-canary-primary-5b8f6c7a4-pqrst"), "0x5"} // failing: it must not count
	canary, canary2 := pass("llm-canary-6c9f7d8b5-abcde"), pass("llm-canary-6c9f7d8b5-fghij")
	one, zero := []ptSample{{"{}", 1}}, []ptSample{{"{}", 0}}
	cases := []struct {
		name   string
		input  []ptSeries
		result []ptSample
	}{
		{"every canary pod passes and the control holds: 1", []ptSeries{{canary, "1x5"}, {canary2, "1x5"}, held}, one},
		{"a canary pod failed before the last interval, passed since: 1", []ptSeries{{canary, "0x3 1 1"}, {canary2, "1x5"}, held}, one},
		{"one canary pod failed one evaluation of the last interval: 0", []ptSeries{{canary, "1x5"}, {canary2, "1x4 0"}, held}, zero},
		{"the negative control got a device in the last interval: 0", []ptSeries{{canary, "1x5"},
			{control("selector_matches_nothing"), "1x4 _"}, {control("started"), "_x5 0"}}, zero},
		{"no negative control: no value", []ptSeries{{canary, "1x5"}}, nil},
		{"no canary pod: no value", []ptSeries{held}, nil},
	}
	var groups []ptGroup
	for _, c := range cases {
		groups = append(groups, ptGroup{Name: "flagger: " + c.name, Interval: "1m", Input: append(slices.Clone(c.input), primary),
			ExprTests: []ptExprTest{{Expr: flagger, EvalTime: "5m", ExpSamples: c.result}}})
	}
	runPromtoolTests(t, groups)
}

func readTemplate(t *testing.T, name string, doc any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "rollouts", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
