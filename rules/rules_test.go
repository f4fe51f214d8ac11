package rules

import (
	"bufio"
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	yaml "go.yaml.in/yaml/v3"
)

const (
	runbooksPath = "../docs/runbooks.md"
	metricsPath  = "../docs/metrics.md"
	runbookBase  = "https://github.com/dra-exporter/dra-exporter/blob/main/docs/runbooks.md#"
)

// vocabulary holds the label names of dra-exporter (STYLE.md). A rule may
// create a label (label_replace) only with one of these names. gate names
// the evidence gate (api, node, workload) of dra_pod_gate and the recorded
// gates: one series name for the three gates, so that the verdict is one
// aggregation over them. Its owner is a function of the gate, said in the
// alerts and by `dra-exporter gates`, not a label of its own.
var vocabulary = newSet("namespace", "pod", "pod_uid", "claim", "request", "device_class",
	"driver", "pool", "node", "device", "gpu_uuid", "lane", "layer", "reason", "gate")

// upstreamLabels are label names of other components' series (and of
// Prometheus itself) that rules may group or match on.
var upstreamLabels = newSet(
	"instance", "job", "le", // Prometheus and histograms
	"cluster",                                           // the external label of each cluster's Prometheus (cluster_test.go)
	"operation_name", "method_name", "grpc_status_code", // kubelet
	"error_type",      // NVIDIA DRA driver
	"extension_point", // kube-scheduler
	// dcgm-exporter 4.8.3+ with KUBERNETES_ENABLE_DRA (internal/pkg/transformation/const.go)
	"dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name", "dra_mig_device_uuid",
)

var (
	alertNameRE  = regexp.MustCompile(`^DRA[A-Z][A-Za-z0-9]*$`)
	recordNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*:[A-Za-z_][A-Za-z0-9_]*:[a-z][a-z0-9_]*$`)
	forLineRE    = regexp.MustCompile(`^\s*for:`)
	literalForRE = regexp.MustCompile(`^\s*for: [0-9]+[smhdwy]\s*$`)
)

type ruleFile struct {
	name   string // file name, relative to this directory
	raw    []byte
	groups []rulefmt.RuleGroup
}

type alertRule struct {
	file string
	rule rulefmt.Rule
}

func loadBundle(t *testing.T) []ruleFile {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no rule files in rules/: %v", err)
	}
	p := parser.NewParser(parser.Options{})
	logger := slog.New(slog.DiscardHandler)
	var files []ruleFile
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rgs, errs := rulefmt.Parse(raw, false, model.LegacyValidation, p, logger)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", path, errs)
		}
		files = append(files, ruleFile{name: path, raw: raw, groups: rgs.Groups})
	}
	return files
}

func alertsOf(files []ruleFile) map[string]alertRule {
	alerts := map[string]alertRule{}
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts[r.Alert] = alertRule{file: f.name, rule: r}
				}
			}
		}
	}
	return alerts
}

func TestRuleNamesAreUnique(t *testing.T) {
	seen := map[string]string{}
	groups := map[string]string{}
	for _, f := range loadBundle(t) {
		for _, g := range f.groups {
			if prev, ok := groups[g.Name]; ok {
				t.Errorf("group %q is defined in %s and %s", g.Name, prev, f.name)
			}
			groups[g.Name] = f.name
			for _, r := range g.Rules {
				name := r.Alert + r.Record
				if prev, ok := seen[name]; ok {
					t.Errorf("%s: %q is already defined in %s", f.name, name, prev)
				}
				seen[name] = f.name
			}
		}
	}
}

// TestMetricNamesExist fails when a rule reads a series that neither the
// exporter (docs/metrics.md), nor a known upstream component, nor a
// recording rule of the bundle produces: a typo there is an alert that can
// never fire.
func TestMetricNamesExist(t *testing.T) {
	files := loadBundle(t)
	known := exporterMetrics(t)
	for name := range UpstreamMetrics {
		known[name] = "upstream"
	}
	for _, h := range UpstreamHistograms {
		if _, ok := UpstreamMetrics[h]; !ok {
			t.Fatalf("upstream histogram %s is not in UpstreamMetrics", h)
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			known[h+suffix] = "upstream"
		}
	}
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					known[r.Record] = "recording rule"
				}
			}
		}
	}

	p := parser.NewParser(parser.Options{})
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					t.Errorf("%s: %s: %v", f.name, r.Alert+r.Record, err)
					continue
				}
				for _, name := range MetricNames(expr) {
					if name == "" {
						t.Errorf("%s: %s: a selector without a metric name", f.name, r.Alert+r.Record)
					} else if _, ok := known[name]; !ok {
						t.Errorf("%s: %s reads %s, which is neither an exporter metric (docs/metrics.md), a known upstream series, nor a recording rule of the bundle",
							f.name, r.Alert+r.Record, name)
					}
				}
			}
		}
	}
}

// TestLabelNames keeps the vocabulary: rules group and match only on the
// exporter's labels and a short list of upstream ones, and create labels
// only with vocabulary names (never a second name for one thing).
func TestLabelNames(t *testing.T) {
	allowed := exporterLabels(t)
	for l := range vocabulary {
		allowed[l] = true
	}
	for l := range upstreamLabels {
		allowed[l] = true
	}
	p := parser.NewParser(parser.Options{})
	for _, f := range loadBundle(t) {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				grouped, created := labelNames(expr)
				for _, l := range grouped {
					if !allowed[l] {
						t.Errorf("%s: %s groups or matches on label %q, outside the vocabulary and the known upstream labels", f.name, r.Alert+r.Record, l)
					}
				}
				for _, l := range created {
					if !vocabulary[l] {
						t.Errorf("%s: %s creates label %q, which is not in the vocabulary", f.name, r.Alert+r.Record, l)
					}
				}
			}
		}
	}
}

func TestAlertConventions(t *testing.T) {
	anchors := runbookAnchors(t)
	for name, a := range alertsOf(loadBundle(t)) {
		r := a.rule
		if !alertNameRE.MatchString(name) {
			t.Errorf("%s: alert %q: want CamelCase starting with DRA", a.file, name)
		}
		if sev := r.Labels["severity"]; sev != "info" && sev != "warning" && sev != "critical" {
			t.Errorf("%s: %s: severity %q, want info, warning or critical", a.file, name, sev)
		}
		for l := range r.Labels {
			if l != "severity" {
				t.Errorf("%s: %s: label %q: alerts set only severity; the rest comes from the series", a.file, name, l)
			}
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[k]) == "" {
				t.Errorf("%s: %s: no %s annotation", a.file, name, k)
			}
		}
		for k := range r.Annotations {
			if k != "summary" && k != "description" && k != "runbook_url" {
				t.Errorf("%s: %s: unexpected annotation %q", a.file, name, k)
			}
		}
		if strings.Contains(r.Annotations["summary"], "{{") {
			t.Errorf("%s: %s: summary must be fixed text, got %q", a.file, name, r.Annotations["summary"])
		}
		if !strings.Contains(r.Annotations["description"], "{{") {
			t.Errorf("%s: %s: description must name the objects through templates, got %q", a.file, name, r.Annotations["description"])
		}
		anchor := strings.ToLower(name)
		if want := runbookBase + anchor; r.Annotations["runbook_url"] != want {
			t.Errorf("%s: %s: runbook_url %q, want %q", a.file, name, r.Annotations["runbook_url"], want)
		}
		if !anchors[anchor] {
			t.Errorf("%s: %s: docs/runbooks.md has no section %q", a.file, name, "## "+name)
		}
		if r.For <= 0 {
			t.Errorf("%s: %s: no for: duration", a.file, name)
		}
	}
}

// TestForLinesAreLiteral: the e2e test rewrites every `for:` line to 0s
// with a line-based substitution, so each alert's duration must be a line
// of its own with nothing after it.
func TestForLinesAreLiteral(t *testing.T) {
	for _, f := range loadBundle(t) {
		var alerts, lines int
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts++
				}
			}
		}
		sc := bufio.NewScanner(bytes.NewReader(f.raw))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if !forLineRE.MatchString(line) {
				continue
			}
			lines++
			if !literalForRE.MatchString(line) {
				t.Errorf("%s:%d: %q: want a literal `for: <duration>` line", f.name, n, line)
			}
		}
		if lines != alerts {
			t.Errorf("%s: %d for: lines for %d alerts", f.name, lines, alerts)
		}
	}
}

func TestRecordingRuleNames(t *testing.T) {
	for _, f := range loadBundle(t) {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Record == "" {
					continue
				}
				if !recordNameRE.MatchString(r.Record) {
					t.Errorf("%s: recording rule %q: want level:metric:operations", f.name, r.Record)
				}
				if len(r.Labels) > 0 {
					t.Errorf("%s: %s: recording rules add no labels", f.name, r.Record)
				}
			}
		}
	}
}

// TestRunbooks: one section per alert, no section without an alert.
func TestRunbooks(t *testing.T) {
	alerts := alertsOf(loadBundle(t))
	raw, err := os.ReadFile(runbooksPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, ok := strings.CutPrefix(line, "## ")
		if !ok || !strings.HasPrefix(name, "DRA") {
			continue
		}
		if _, ok := alerts[name]; !ok {
			t.Errorf("docs/runbooks.md has a section for %s, which is not an alert of the bundle", name)
		}
	}
}

// TestThresholdsTable keeps the table at the end of docs/runbooks.md in
// step with the rules: every alert has a row with its severity, for and file.
func TestThresholdsTable(t *testing.T) {
	alerts := alertsOf(loadBundle(t))
	raw, err := os.ReadFile(runbooksPath)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Thresholds\n")
	if !ok {
		t.Fatal("docs/runbooks.md has no ## Thresholds section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 7 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "DRA") {
			continue
		}
		n := len(cells)
		name := strings.TrimSpace(cells[1])
		rows[name] = []string{strings.TrimSpace(cells[2]), strings.TrimSpace(cells[n-3]), strings.TrimSpace(cells[n-2])}
	}
	for name, a := range alerts {
		row, ok := rows[name]
		if !ok {
			t.Errorf("Thresholds table: no row for %s", name)
			continue
		}
		want := []string{a.rule.Labels["severity"], a.rule.For.String(), a.file}
		if !slices.Equal(row, want) {
			t.Errorf("Thresholds table: %s has severity, for, file %q; the rule has %q", name, row, want)
		}
	}
	for name := range rows {
		if _, ok := alerts[name]; !ok {
			t.Errorf("Thresholds table: row for %s, which is not an alert of the bundle", name)
		}
	}
}

// promtoolFile is the part of a promtool test file this test reads.
type promtoolFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestPromtoolCoverage: every alert has a promtool case where it fires, with
// exact labels and annotations, and one where it must stay silent. A case
// for an alert the test file does not load would pass trivially, so that
// is an error too.
func TestPromtoolCoverage(t *testing.T) {
	files := loadBundle(t)
	alerts := alertsOf(files)
	paths, err := filepath.Glob("tests/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no promtool tests in rules/tests/: %v", err)
	}
	firing, silent := map[string]int{}, map[string]int{}
	loaded := map[string]bool{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var pf promtoolFile
		if err := yaml.Unmarshal(raw, &pf); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ruleFiles := map[string]bool{}
		for _, rf := range pf.RuleFiles {
			name := filepath.Clean(filepath.Join("tests", rf))
			if _, err := os.Stat(name); err != nil {
				t.Errorf("%s: rule file %s: %v", path, rf, err)
			}
			ruleFiles[name] = true
			loaded[name] = true
		}
		for _, tc := range pf.Tests {
			if strings.TrimSpace(tc.Name) == "" {
				t.Errorf("%s: a test without a name; name it after the behaviour it specifies", path)
			}
			for _, at := range tc.AlertRuleTest {
				a, ok := alerts[at.Alertname]
				if !ok {
					t.Errorf("%s: %q: alert %q is not in the bundle", path, tc.Name, at.Alertname)
					continue
				}
				if !ruleFiles[a.file] {
					t.Errorf("%s: %q: tests %s but does not load %s", path, tc.Name, at.Alertname, a.file)
					continue
				}
				if len(at.ExpAlerts) == 0 {
					silent[at.Alertname]++
					continue
				}
				firing[at.Alertname]++
				for _, exp := range at.ExpAlerts {
					if exp.ExpLabels["severity"] != a.rule.Labels["severity"] {
						t.Errorf("%s: %q: %s expects severity %q, the rule sets %q", path, tc.Name, at.Alertname, exp.ExpLabels["severity"], a.rule.Labels["severity"])
					}
					for _, k := range []string{"summary", "description", "runbook_url"} {
						if exp.ExpAnnotations[k] == "" {
							t.Errorf("%s: %q: %s at %s: exp_annotations has no %s", path, tc.Name, at.Alertname, at.EvalTime, k)
						}
					}
				}
			}
		}
	}
	for name := range alerts {
		if firing[name] == 0 {
			t.Errorf("%s: no promtool case where it fires (exp_alerts non-empty)", name)
		}
		if silent[name] == 0 {
			t.Errorf("%s: no promtool case where it stays silent (exp_alerts empty)", name)
		}
	}
	for _, f := range files {
		if !loaded[f.name] {
			t.Errorf("%s: no promtool test file loads it", f.name)
		}
	}
}

// labelNames returns the labels expr groups or matches on (by, without, on,
// ignoring, group_left/right) and the labels it creates (label_replace,
// label_join).
func labelNames(expr parser.Expr) (grouped, created []string) {
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.AggregateExpr:
			grouped = append(grouped, n.Grouping...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				grouped = append(grouped, n.VectorMatching.MatchingLabels...)
				grouped = append(grouped, n.VectorMatching.Include...)
			}
		case *parser.Call:
			if n.Func.Name == "label_replace" || n.Func.Name == "label_join" {
				if s, ok := n.Args[1].(*parser.StringLiteral); ok {
					created = append(created, s.Val)
				}
			}
		}
		return nil
	})
	return grouped, created
}

var metricRowRE = regexp.MustCompile("^\\| `([A-Za-z_:][A-Za-z0-9_:]*)` \\| ([^|]+) \\| ([^|]*) \\|")

// exporterTable returns the rows of the first table of docs/metrics.md:
// metric name -> type, labels cells.
func exporterTable(t *testing.T) map[string][2]string {
	t.Helper()
	raw, err := os.ReadFile(metricsPath)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| Metric | Type | Labels |")
	if !ok {
		t.Fatal("docs/metrics.md: no | Metric | Type | Labels | table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := map[string][2]string{}
	for _, line := range strings.Split(table, "\n") {
		if m := metricRowRE.FindStringSubmatch(line); m != nil {
			rows[m[1]] = [2]string{m[2], m[3]}
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/metrics.md: the metric table has no rows")
	}
	return rows
}

// exporterMetrics returns the series names the exporter serves, with
// _bucket, _sum and _count for histograms.
func exporterMetrics(t *testing.T) map[string]string {
	names := map[string]string{}
	for name, row := range exporterTable(t) {
		typ := row[0]
		if strings.HasPrefix(typ, "histogram") {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = typ
			}
			continue
		}
		names[name] = typ
	}
	return names
}

// exporterLabels returns every label name of the exporter's metrics.
func exporterLabels(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, row := range exporterTable(t) {
		for _, cell := range strings.Split(row[1], ",") {
			if l := strings.Trim(strings.TrimSpace(cell), "`"); l != "" {
				names[l] = true
			}
		}
	}
	return names
}

var slugDropRE = regexp.MustCompile(`[^a-z0-9 _-]`)

// runbookAnchors returns the GitHub anchors of the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(runbooksPath)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := slugDropRE.ReplaceAllString(strings.ToLower(heading), "")
		anchors[strings.ReplaceAll(slug, " ", "-")] = true
	}
	return anchors
}

func newSet(items ...string) map[string]bool {
	s := map[string]bool{}
	for _, i := range items {
		s[i] = true
	}
	return s
}
