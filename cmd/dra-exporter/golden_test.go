package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/offline"
)

var update = flag.Bool("update", false, "rewrite testdata/*/metrics.prom from the current code")

// goldenNow is the --now every scenario is rendered at.
const goldenNow = "2026-12-01T12:00:00Z"

func scenarios(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("../../testdata/*/objects.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no scenarios found: %v", err)
	}
	for i, d := range dirs {
		dirs[i] = filepath.Dir(d)
	}
	return dirs
}

func snapshotOf(t *testing.T, dir string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	if rc := run([]string{"snapshot", "--from", filepath.Join(dir, "objects.yaml"), "--now", goldenNow}, &out, &errOut); rc != 0 {
		t.Fatalf("snapshot exited %d: %s", rc, errOut.String())
	}
	return out.Bytes()
}

// TestGolden renders each scenario with the snapshot command and compares
// it with metrics.prom byte for byte; then it checks the same exporter with
// testutil.CollectAndCompare (no metric-name filter, so a missing family
// fails) and CollectAndLint.
func TestGolden(t *testing.T) {
	for _, dir := range scenarios(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := snapshotOf(t, dir)
			goldenPath := filepath.Join(dir, "metrics.prom")
			if *update {
				if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/dra-exporter -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("snapshot output differs from %s; rerun with -update and review the diff", goldenPath)
			}

			exp := scenarioExporter(t, dir)
			// The /metrics fast path writes the same bytes, in both formats.
			if fast := fastText(exp, false); !bytes.Equal(fast, want) {
				t.Errorf("the fast text path differs from %s:\n%s", goldenPath, firstDiff(fast, want))
			}
			if fast, slow := fastText(exp, true), gatheredOpenMetrics(t, exp); !bytes.Equal(fast, slow) {
				t.Errorf("the fast OpenMetrics path differs from expfmt's:\n%s", firstDiff(fast, slow))
			}
			if fast, slow := fastProto(t, exp), gatheredProto(t, exp); !bytes.Equal(fast, slow) {
				t.Errorf("the fast protobuf path differs from client_golang's (%d and %d bytes):\n%s", len(fast), len(slow), protoDiff(t, fast, slow))
			}
			if err := testutil.CollectAndCompare(exp, bytes.NewReader(want)); err != nil {
				t.Errorf("CollectAndCompare: %v", err)
			}
			problems, err := testutil.CollectAndLint(exp)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

// fastText is what /metrics writes for the exporter's families.
func fastText(exp *engine.Exporter, openMetrics bool) []byte {
	var out []byte
	for _, f := range exp.TextFamilies(openMetrics) {
		out = f.AppendTo(out)
	}
	return out
}

// gatheredOpenMetrics is client_golang's and expfmt's OpenMetrics rendering
// of the exporter (without the final # EOF).
func gatheredOpenMetrics(t *testing.T, exp *engine.Exporter) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, mf := range gather(t, exp) {
		if _, err := expfmt.MetricFamilyToOpenMetrics(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// gather is client_golang's Gather of the exporter alone.
func gather(t *testing.T, exp *engine.Exporter) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exp)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// fastProto is what /metrics writes for the exporter's families in the
// delimited protobuf format.
func fastProto(t *testing.T, exp *engine.Exporter) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, f := range exp.TextFamilies(false) {
		if _, err := f.WriteProtoTo(&buf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// gatheredProto is client_golang's and expfmt's delimited protobuf
// encoding of the exporter.
func gatheredProto(t *testing.T, exp *engine.Exporter) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range gather(t, exp) {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// protoDiff shows where the text renderings of two delimited protobuf
// expositions first differ.
func protoDiff(t *testing.T, got, want []byte) string {
	t.Helper()
	return firstDiff(protoText(t, got), protoText(t, want))
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got  %q\n want %q", i+1, gl, wl)
		}
	}
	return "(equal lines)"
}

func scenarioExporter(t *testing.T, dir string) *engine.Exporter {
	t.Helper()
	ix, collectors, clock := scenarioIndex(t, dir)
	return engine.NewExporter(ix, clock, false, nil, collectors...)
}

// scenarioIndex builds a golden scenario's index, as snapshot does, and
// the cluster collectors, at the goldens' time (clock).
func scenarioIndex(t *testing.T, dir string) (_ *index.Index, _ []engine.Collector, clock func() time.Time) {
	t.Helper()
	cfg, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	now, _ := time.Parse(time.RFC3339, goldenNow)
	clock = func() time.Time { return now }
	ix, _, err := offline.Build([]string{filepath.Join(dir, "objects.yaml")}, cfg.trimmer(), cfg.indexConfig(clock, nil))
	if err != nil {
		t.Fatal(err)
	}
	collectors, err := cfg.collectors()
	if err != nil {
		t.Fatal(err)
	}
	return ix, collectors, clock
}

// TestExplainAgreesWithMetric runs explain for every pod the golden metrics
// call blocked and checks that it names the same layer and reason.
func TestExplainAgreesWithMetric(t *testing.T) {
	checked := 0
	for _, dir := range scenarios(t) {
		families := goldenFamilies(t, dir)
		mf := families["dra_pod_blocked"]
		if mf == nil {
			continue
		}
		// The leaks explain may print for a pod: those naming it, in its namespace.
		leaks := map[string]bool{}
		if lf := families["dra_claim_reservation_leak"]; lf != nil {
			for _, m := range lf.GetMetric() {
				l := labelMap(m)
				leaks[l["namespace"]+"/"+l["pod"]+" "+l["namespace"]+"/"+l["claim"]+" "+l["reason"]] = true
			}
		}
		// A negative control is judged as one: its BLOCKED is what it is for.
		controls := map[string]*dto.Metric{}
		for _, m := range families["dra_negative_control"].GetMetric() {
			l := labelMap(m)
			controls[l["namespace"]+"/"+l["pod"]] = m
		}
		for _, m := range mf.GetMetric() {
			labels := labelMap(m)
			var out, errOut bytes.Buffer
			target := labels["namespace"] + "/" + labels["pod"]
			verdict, wantRC := "Verdict: BLOCKED  layer="+labels["layer"]+"  reason="+labels["reason"], explainBlocked
			if c := controls[target]; c != nil {
				reason := labelMap(c)["reason"]
				state, _ := classify.ControlStateOf(reason)
				if (c.GetGauge().GetValue() == 1) != (state == classify.ControlHolds) {
					t.Errorf("%s: dra_negative_control of %s is %v with reason %s, a control %s", filepath.Base(dir), target, c.GetGauge().GetValue(), reason, state)
				}
				verdict = "Verdict: negative control " + string(state) + "  reason=" + reason
				if state == classify.ControlHolds {
					wantRC = explainReady
				}
			}
			if rc := run([]string{"explain", "--from", filepath.Join(dir, "objects.yaml"), "--now", goldenNow, target}, &out, &errOut); rc != wantRC {
				t.Fatalf("explain %s exited %d, want %d: %s", target, rc, wantRC, errOut.String())
			}
			if !strings.Contains(out.String(), verdict) {
				t.Errorf("%s: explain %s does not say %q:\n%s", filepath.Base(dir), target, verdict, out.String())
			}
			printed := map[string]bool{}
			for _, line := range strings.Split(out.String(), "\n") {
				rest, ok := strings.CutPrefix(line, "Leak: claim ")
				if !ok {
					continue
				}
				claim, reason, _ := strings.Cut(strings.SplitN(rest, ":", 2)[0], " ")
				key := target + " " + claim + " " + reason
				if !leaks[key] {
					t.Errorf("%s: explain %s prints a leak with no series naming the pod: %q", filepath.Base(dir), target, line)
				}
				if printed[key] {
					t.Errorf("%s: explain %s prints a leak twice: %q", filepath.Base(dir), target, line)
				}
				printed[key] = true
			}
			checked++
		}
	}
	if checked < len(classify.Reasons) {
		t.Errorf("only %d blocked pods checked; the scenarios should cover every reason", checked)
	}
}

// TestExplainAgreesOnPodsNotBlocked runs explain for every pod of every
// scenario that the metrics do not call blocked: explain must not call it
// blocked either (a Ready pod with a failing link, a gated pod, a binding
// pod, a finished one).
func TestExplainAgreesOnPodsNotBlocked(t *testing.T) {
	checked := 0
	for _, dir := range scenarios(t) {
		families := goldenFamilies(t, dir)
		blocked := map[string]bool{}
		for _, m := range families["dra_pod_blocked"].GetMetric() {
			l := labelMap(m)
			blocked[l["namespace"]+"/"+l["pod"]] = true
		}
		controls := map[string]string{}
		for _, m := range families["dra_negative_control"].GetMetric() {
			l := labelMap(m)
			controls[l["namespace"]+"/"+l["pod"]] = l["reason"]
		}
		ix, _, err := offline.Build([]string{filepath.Join(dir, "objects.yaml")}, objects.Trimmer{}, index.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ix.Snapshot().Pods {
			target := p.Key.Namespace + "/" + p.Key.Name
			if blocked[target] {
				continue // TestExplainAgreesWithMetric checks it
			}
			var out, errOut bytes.Buffer
			wantRC := explainBlocked
			if p.Ready() {
				wantRC = explainReady
			}
			if reason, ok := controls[target]; ok {
				// A control is judged as one: Ready is a breach.
				wantRC = explainBlocked
				if state, _ := classify.ControlStateOf(reason); state == classify.ControlHolds {
					wantRC = explainReady
				}
			}
			if rc := run([]string{"explain", "--from", filepath.Join(dir, "objects.yaml"), "--now", goldenNow, target}, &out, &errOut); rc != wantRC {
				if strings.Contains(errOut.String(), "more than one") {
					continue // two pods of one name (a recreated pod): explain asks for the UID
				}
				t.Fatalf("explain %s exited %d, want %d (Ready %v): %s", target, rc, wantRC, p.Ready(), errOut.String())
			}
			if strings.Contains(out.String(), "Verdict: BLOCKED") {
				t.Errorf("%s: explain %s says BLOCKED, the metric does not:\n%s", filepath.Base(dir), target, out.String())
			}
			checked++
		}
	}
	t.Logf("%d pods not blocked, explain agrees on each", checked)
	if checked < 20 {
		t.Errorf("only %d pods checked", checked)
	}
}

// goldenFamilies parses a scenario's committed exposition.
func goldenFamilies(t *testing.T, dir string) map[string]*dto.MetricFamily {
	t.Helper()
	metrics, err := os.ReadFile(filepath.Join(dir, "metrics.prom"))
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(metrics))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return families
}

// TestGoldenCoversTheTree fails when a reason of the decision tree or a
// leak reason is set (value 1) in no golden scenario.
func TestGoldenCoversTheTree(t *testing.T) {
	seen := map[string]map[string]bool{"dra_pod_blocked": {}, "dra_claim_reservation_leak": {}}
	for _, dir := range scenarios(t) {
		families := goldenFamilies(t, dir)
		for family, reasons := range seen {
			for _, m := range families[family].GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					reasons[labelMap(m)["reason"]] = true
				}
			}
		}
	}
	for _, r := range classify.Reasons {
		if !seen["dra_pod_blocked"][string(r)] {
			t.Errorf("no scenario has a pod blocked with reason %s", r)
		}
	}
	for _, r := range classify.LeakReasons {
		if !seen["dra_claim_reservation_leak"][string(r)] {
			t.Errorf("no scenario has a leak with reason %s", r)
		}
	}
}

// labelMap returns a series' labels by name.
func labelMap(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}
