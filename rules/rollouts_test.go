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

// TestRolloutTemplates evaluates the queries of the Argo Rollouts
// AnalysisTemplate and the Flagger MetricTemplate (deploy/rollouts), with
// their template variables filled in as the controllers fill them, over
// recorded gate series with promtool: 1 only when every canary pod's
// verdict and every negative control pass; 0 when one fails; no value
// (the controllers count it as an error) without canary pods or without a
// negative control. Other pods of the namespace (the stable ReplicaSet,
// Flagger's primary) do not count.
func TestRolloutTemplates(t *testing.T) {
	bin := promtool(t)
	argo := readTemplate(t, "argo-analysistemplate.yaml", func(doc map[string]any) string {
		spec := doc["spec"].(map[string]any)
		metric := spec["metrics"].([]any)[0].(map[string]any)
		return metric["provider"].(map[string]any)["prometheus"].(map[string]any)["query"].(string)
	})
	argo = strings.NewReplacer("{{args.namespace}}", "llm", "{{args.rollout}}", "llm-canary", "{{args.canary-hash}}", "6c9f7d8b5").Replace(argo)
	flagger := readTemplate(t, "flagger-metrictemplate.yaml", func(doc map[string]any) string {
		return doc["spec"].(map[string]any)["query"].(string)
	})
	flagger = strings.NewReplacer("{{ namespace }}", "llm", "{{ target }}", "llm-canary").Replace(flagger)
	for _, q := range []string{argo, flagger} {
		if strings.Contains(q, "{{") {
			t.Fatalf("a template variable is left: %s", q)
		}
	}

	verdict := func(pod string) string {
		return fmt.Sprintf(`namespace_pod:dra_pod_gates:verdict{namespace="llm", pod=%q, pod_uid="uid-%s"}`, pod, pod)
	}
	control := `namespace_pod:dra_negative_control:verdict{namespace="llm", pod="control-0", pod_uid="uid-c0"}`
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	type group struct {
		Name      string     `yaml:"name"`
		Interval  string     `yaml:"interval"`
		Input     []series   `yaml:"input_series"`
		ExprTests []exprTest `yaml:"promql_expr_test"`
	}
	cases := []struct {
		name   string
		input  []series
		result []sample
	}{
		{"every canary pod passes and the control holds: 1", []series{
			{verdict("llm-canary-6c9f7d8b5-abcde"), "1x5"}, {verdict("llm-canary-6c9f7d8b5-fghij"), "1x5"},
			{control, "1x5"},
		}, []sample{{"{}", 1}}},
		{"one canary pod fails: 0", []series{
			{verdict("llm-canary-6c9f7d8b5-abcde"), "1x5"}, {verdict("llm-canary-6c9f7d8b5-fghij"), "0x5"}, {control, "1x5"},
		}, []sample{{"{}", 0}}},
		{"the negative control broke: 0", []series{
			{verdict("llm-canary-6c9f7d8b5-abcde"), "1x5"}, {control, "0x5"},
		}, []sample{{"{}", 0}}},
		{"no negative control: no value", []series{{verdict("llm-canary-6c9f7d8b5-abcde"), "1x5"}}, nil},
		{"no canary pod: no value", []series{{control, "1x5"}}, nil},
	}
	var groups []group
	for _, tmpl := range []struct {
		name, query string
		stable      []series // the stable pods, failing: they must not count
	}{
		{"argo", argo, []series{{verdict("llm-canary-5b8f6c7a4-klmno"), "0x5"}}},
		{"flagger", flagger, []series{{verdict("llm-canary-primary-5b8f6c7a4-pqrst"), "0x5"}}},
	} {
		for _, c := range cases {
			groups = append(groups, group{Name: tmpl.name + ": " + c.name, Interval: "1m", Input: append(slices.Clone(c.input), tmpl.stable...),
				ExprTests: []exprTest{{Expr: tmpl.query, EvalTime: "4m", ExpSamples: c.result}}})
		}
	}
	raw, err := yaml.Marshal(map[string]any{"rule_files": []string{}, "evaluation_interval": "1m", "tests": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rollouts_test.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, bin, dir, "test", "rules", "rollouts_test.yaml"); err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
}

func readTemplate(t *testing.T, name string, query func(map[string]any) string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "deploy", "rollouts", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return query(doc)
}
