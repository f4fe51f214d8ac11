package rules

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// Scrape labels of the captured components, as a Prometheus scrape job
// would add them.
var upstreamTargets = map[string]string{
	"kube-controller-manager": `job="kube-controller-manager", instance="127.0.0.1:10257"`,
	"kube-scheduler":          `job="kube-scheduler", instance="127.0.0.1:10259"`,
}

var upstreamVersionRE = regexp.MustCompile(`^v1\.(\d+)\.\d+$`)

// TestRulesOnRealUpstreamExpositions evaluates upstream.yaml (every `for:`
// at 0s) over what the real kube-controller-manager and kube-scheduler of
// each supported release exposed (testdata/upstream/<version>/, written by
// the e2e TestUpstreamMetricNames with DRA_E2E_UPSTREAM_OUT, on that
// release's control plane, while a ResourceQuota made the resourceclaim
// controller fail to create a claim): the controller-manager's two scrapes,
// a few seconds apart, replayed a minute apart, and the scheduler's one.
// DRAResourceClaimCreateErrors must fire for the controller-manager of
// every release, whatever the release names its counter, and nothing must
// fire when the second scrape is replayed twice. The oldest supported
// release (1.34) and 1.37 must be there.
func TestRulesOnRealUpstreamExpositions(t *testing.T) {
	bin := promtool(t)
	versions, _ := filepath.Glob("testdata/upstream/v1.*")
	minors := map[int]bool{}
	for _, v := range versions {
		m := upstreamVersionRE.FindStringSubmatch(filepath.Base(v))
		if m == nil {
			t.Fatalf("%s: not a release directory (v1.<minor>.<patch>)", v)
		}
		n, _ := strconv.Atoi(m[1])
		minors[n] = true
	}
	for _, want := range []int{34, 35, 36, 37} {
		if !minors[want] {
			t.Errorf("no exposition of a 1.%d control plane in testdata/upstream (run the e2e TestUpstreamMetricNames with DRA_E2E_UPSTREAM_OUT on it)", want)
		}
	}

	dir := t.TempDir()
	raw, err := os.ReadFile("upstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "upstream.yaml"), zeroForRE.ReplaceAll(raw, []byte("${1}for: 0s")), 0o644); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, f := range loadBundle(t) {
		if f.name != "upstream.yaml" {
			continue
		}
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts = append(alerts, r.Alert)
				}
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts in upstream.yaml")
	}

	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type alertTest struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []any  `yaml:"exp_alerts"`
	}
	type group struct {
		Name          string      `yaml:"name"`
		Interval      string      `yaml:"interval"`
		InputSeries   []series    `yaml:"input_series"`
		AlertRuleTest []alertTest `yaml:"alert_rule_test"`
	}
	silent := func() []alertTest {
		var out []alertTest
		for _, a := range alerts {
			out = append(out, alertTest{EvalTime: "1m", Alertname: a, ExpAlerts: []any{}})
		}
		return out
	}
	var groups []group
	want := map[string]map[string]bool{}
	for _, vdir := range versions {
		version := filepath.Base(vdir)
		first := exposedValues(t, filepath.Join(vdir, "kube-controller-manager-1.prom"), upstreamTargets["kube-controller-manager"])
		second := exposedValues(t, filepath.Join(vdir, "kube-controller-manager-2.prom"), upstreamTargets["kube-controller-manager"])
		sched := exposedValues(t, filepath.Join(vdir, "kube-scheduler.prom"), upstreamTargets["kube-scheduler"])
		rising, steady := group{Name: version + " failing", Interval: "1m"}, group{Name: version + " steady", Interval: "1m"}
		for _, s := range slices.Sorted(maps.Keys(second)) {
			v1, ok := first[s]
			if !ok {
				v1 = "_" // not exposed yet at the first scrape
			}
			rising.InputSeries = append(rising.InputSeries, series{s, v1 + " " + second[s]})
			steady.InputSeries = append(steady.InputSeries, series{s, second[s] + " " + second[s]})
		}
		for _, s := range slices.Sorted(maps.Keys(sched)) {
			rising.InputSeries = append(rising.InputSeries, series{s, sched[s] + " " + sched[s]})
			steady.InputSeries = append(steady.InputSeries, series{s, sched[s] + " " + sched[s]})
		}
		rising.AlertRuleTest, steady.AlertRuleTest = silent(), silent()
		groups = append(groups, rising, steady)
		want[rising.Name] = map[string]bool{alertKey("DRAResourceClaimCreateErrors", "warning",
			map[string]string{"job": "kube-controller-manager", "instance": "127.0.0.1:10257"}): true}
		want[steady.Name] = map[string]bool{}
	}
	file := map[string]any{"rule_files": []string{"upstream.yaml"}, "evaluation_interval": "1m", "tests": groups}
	raw, err = yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "exposition_test.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := runPromtool(t, bin, dir, "test", "rules", "exposition_test.yaml")
	if strings.Contains(out, "FAILED:") && !strings.Contains(out, "got:[") {
		t.Fatalf("promtool could not evaluate the expositions:\n%s", out)
	}
	got := firedAlerts(out)
	for name, keys := range want {
		for key := range keys {
			if !got[name][key] {
				t.Errorf("%s: expected %s, it did not fire", name, key)
			}
		}
		for key := range got[name] {
			if !keys[key] {
				t.Errorf("%s: unexpected alert %s", name, key)
			}
		}
	}
	if t.Failed() {
		t.Logf("promtool output:\n%s", out)
	}
}

// exposedValues reads an exposition's samples as promtool input series,
// with the scrape's labels added: series -> value.
func exposedValues(t *testing.T, path, target string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range readExposition(t, path) {
		labels := target
		if len(s.labels) > 0 {
			inner := strings.TrimSuffix(strings.TrimPrefix(s.text[len(s.name):], "{"), "}")
			labels = target + ", " + inner
		}
		key := fmt.Sprintf("%s{%s}", s.name, labels)
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s twice", path, key)
		}
		out[key] = s.value
	}
	if len(out) == 0 {
		t.Fatalf("%s: no samples", path)
	}
	return out
}
