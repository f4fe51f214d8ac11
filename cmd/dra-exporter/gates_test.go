package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/nodegate"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

const (
	gatesObjects = "../../testdata/gates/objects.yaml"
	gatesAgent   = "testdata/gates/agent-gpu-node-1.prom"
	okUID        = "8cf526a7-0ed4-f630-b059-ee84fd3d5cb4"
)

// writeBundle writes a bundle holding the objects and one agent's /metrics
// per node.
func writeBundle(t *testing.T, objects []byte, agents map[string][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := bundle.NewWriter(&buf, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), "test")
	if err := w.Add(bundle.ObjectsDir+"objects.yaml", "objects", 1, objects); err != nil {
		t.Fatal(err)
	}
	for node, data := range agents {
		if err := w.Add(bundle.AgentsDir+node+".prom", "agent", 1, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// onlyItems keeps the List items whose metadata.name starts with a prefix
// (and every cluster-scoped object: classes, nodes, slices).
func onlyItems(t *testing.T, list []byte, prefixes ...string) []byte {
	t.Helper()
	var l map[string]any
	if err := yaml.Unmarshal(list, &l); err != nil {
		t.Fatal(err)
	}
	var keep []any
	for _, it := range l["items"].([]any) {
		md := it.(map[string]any)["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		if md["namespace"] == nil || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			keep = append(keep, it)
		}
	}
	l["items"] = keep
	out, err := yaml.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runGates(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := run(append([]string{"gates"}, args...), &out, &errOut)
	return rc, out.String(), errOut.String()
}

// TestGatesFromBundle: offline, the api gate comes from the objects and the
// node gate from the agents' recorded series; the verdict names the first
// failing gate and its owner, and a broken negative control fails it.
func TestGatesFromBundle(t *testing.T) {
	path := writeBundle(t, readFile(t, gatesObjects), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	rc, out, errOut := runGates(t, "llm-canary", "--from", path, "-o", "json")
	if rc != gatesFail {
		t.Fatalf("exit %d, want %d (a gate fails)\n%s%s", rc, gatesFail, out, errOut)
	}
	var r gatesReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, p := range r.Pods {
		for _, g := range p.Gates {
			got[p.Pod+"/"+g.Gate] = g.State + " " + g.Reason
		}
	}
	want := map[string]string{
		"llm-canary-ok/api": "PASS ", "llm-canary-ok/node": "PASS ", "llm-canary-ok/workload": "NOT_EVALUATED ",
		"llm-canary-pending/api": "FAIL selector_matches_nothing", "llm-canary-pending/node": "FAIL absent", "llm-canary-pending/workload": "NOT_EVALUATED ",
		"llm-canary-retried/api": "FAIL allocation_retried", "llm-canary-retried/node": "FAIL no_node_agent", "llm-canary-retried/workload": "NOT_EVALUATED ",
		"llm-canary-warming/api": "PASS ", "llm-canary-warming/node": "PASS ", "llm-canary-warming/workload": "NOT_EVALUATED ",
	}
	if !equalMaps(got, want) {
		t.Errorf("gates:\n%v\nwant\n%v", got, want)
	}
	controls := map[string]string{}
	for _, c := range r.Controls {
		controls[c.Pod] = fmt.Sprintf("%s %v %s %s", c.State, c.Holds, c.Reason, c.Device)
	}
	if want := map[string]string{"control-holds": "HOLDS true selector_matches_nothing ", "control-allocated": "BROKEN false started gpu-2",
		"control-invalid": "INVALID false device_class_not_found "}; !equalMaps(controls, want) {
		t.Errorf("controls %v, want %v", controls, want)
	}
	if r.Verdict.Pass || r.Verdict.Gate != "api" || !strings.Contains(r.Verdict.Summary, "llm-canary-pending") || !strings.Contains(r.Verdict.Owner, "platform team") {
		t.Errorf("verdict %+v, want a failing api gate of llm-canary-pending, owned by the platform team", r.Verdict)
	}
}

// TestGatesFromBundlePass: a canary whose api and node gates pass, with a
// negative control that holds, passes offline; without the control it does
// not, unless the control is not required; text names the evidence.
func TestGatesFromBundlePass(t *testing.T) {
	objects := onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok", "control-holds")
	path := writeBundle(t, objects, map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	rc, out, errOut := runGates(t, "llm-canary", "--from", path)
	if rc != gatesPartial {
		t.Fatalf("exit %d, want %d (partial: the workload gate needs Prometheus)\n%s%s", rc, gatesPartial, out, errOut)
	}
	for _, want := range []string{
		"Pod llm-canary/llm-canary-ok (uid " + okUID + ", node gpu-node-1)",
		"  api       PASS\n",
		"claim llm-canary-ok-gpu-a1b2c: allocated device gpu.nvidia.com/gpu-node-1/gpu-0 (uuid GPU-b5934649-3623-97fb-5b4f-8b87f2c54026) on node gpu-node-1; reserved for the pod",
		"the kubelet prepared GPU GPU-b5934649-3623-97fb-5b4f-8b87f2c54026 for claim llm-canary-ok-gpu-a1b2c",
		"  workload  NOT_EVALUATED\n",
		"llm-canary/control-holds (uid 10c989a2-69cb-3bbf-a027-db6efc53654b): HOLDS selector_matches_nothing",
		"Verdict: PARTIAL: api and node pass for 1 pod(s), 1 negative control(s) held; workload not evaluated",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	noControl := writeBundle(t, onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok"), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	if rc, out, _ := runGates(t, "llm-canary", "--from", noControl); rc != gatesFail || !strings.Contains(out, "no negative control in namespace llm-canary") {
		t.Errorf("without a negative control: exit %d, want 1 naming the missing control:\n%s", rc, out)
	}
	if rc, out, _ := runGates(t, "llm-canary", "--from", noControl, "--require-negative-control=false"); rc != gatesPartial {
		t.Errorf("without a negative control, not required: exit %d, want %d:\n%s", rc, gatesPartial, out)
	}
}

// TestGatesVerdictListsEveryCause: a FAIL names its most pressing cause
// and lists the others, so that none is only counted (a namespace with a
// broken control and no canary read "1 more cause(s) above" with nothing
// above to read).
func TestGatesVerdictListsEveryCause(t *testing.T) {
	path := writeBundle(t, onlyItems(t, readFile(t, gatesObjects), "control-allocated"), nil)
	rc, out, errOut := runGates(t, "llm-canary", "--from", path)
	if rc != gatesFail {
		t.Fatalf("exit %d, want %d\n%s%s", rc, gatesFail, out, errOut)
	}
	for _, want := range []string{
		"Verdict: FAIL: negative control llm-canary/control-allocated is broken (started)",
		"Also: no DRA pod with gates in namespace llm-canary\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runGates(t, "llm-canary", "--from", writeBundle(t, readFile(t, gatesObjects), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)}), "-o", "json")
	var r gatesReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	also := strings.Join(r.Verdict.Also, "\n")
	for _, want := range []string{"gate api of llm-canary/llm-canary-retried fails (allocation_retried)", "gate node of llm-canary/llm-canary-pending fails (absent)", "negative control llm-canary/control-allocated is broken"} {
		if !strings.Contains(also, want) {
			t.Errorf("verdict's other causes lack %q: %q", want, r.Verdict.Also)
		}
	}
}

func TestGatesUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"ns", "-o", "yaml"}, {"ns", "-l", "a in ("}, {"ns", "--window", "0s"}, {"ns", "extra"}} {
		if rc, _, _ := runGates(t, args...); rc != gatesUsage {
			t.Errorf("gates %v: exit %d, want %d", args, rc, gatesUsage)
		}
	}
	if rc, _, errOut := runGates(t, "ns", "--from", filepath.Join(t.TempDir(), "missing.tar.gz")); rc != gatesError || errOut == "" {
		t.Errorf("a missing bundle: exit %d, want %d with a message (%q)", rc, gatesError, errOut)
	}
	if rc, _, errOut := runGates(t, "ns", "--prometheus.url", "http://127.0.0.1:1", "--timeout", "2s"); rc != gatesError || !strings.Contains(errOut, "query") {
		t.Errorf("an unreachable Prometheus: exit %d, want %d with a message (%q)", rc, gatesError, errOut)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// promtoolBin is DRA_PROMTOOL; the test is skipped under DRA_E2E_SKIP=1.
func promtoolBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DRA_PROMTOOL"); p != "" {
		return p
	}
	if os.Getenv("DRA_E2E_SKIP") == "1" {
		t.Skip("DRA_E2E_SKIP=1 and DRA_PROMTOOL unset")
	}
	t.Fatal("DRA_PROMTOOL is unset: set it to .cache/tools/<version>/bin/promtool (make test does), or DRA_E2E_SKIP=1 to skip")
	return ""
}

// TestNodeGateMatchesRule: the node gate `gates --from` computes in Go is
// the recording rule's (rules/gates.yaml), evaluated by promtool over the
// same evidence: the exporter's series (snapshot of the objects) and the
// agent's. Each variant of the agent's /metrics makes one reason hold.
func TestNodeGateMatchesRule(t *testing.T) {
	bin := promtoolBin(t)
	objects := readFile(t, gatesObjects)
	agent := string(readFile(t, gatesAgent))
	okHolder := `dra_gpu_holder_info{claim="llm-canary-ok-gpu-a1b2c",gpu_uuid="GPU-b5934649-3623-97fb-5b4f-8b87f2c54026",lane="dra",namespace="llm-canary",node="gpu-node-1",pod="llm-canary-ok",pod_uid="` + okUID + `"} 1`
	variants := map[string]string{
		"as recorded":          agent,
		"pod-resources down":   strings.Replace(agent, "dra_node_podresources_up 1", "dra_node_podresources_up 0", 1),
		"without DRA":          strings.Replace(agent, "dra_node_podresources_dynamic_resources 1", "dra_node_podresources_dynamic_resources 0", 1),
		"processes not seen":   strings.Replace(agent, "dra_node_host_processes_visible 1", "dra_node_host_processes_visible 0", 1),
		"GPU source down":      strings.Replace(agent, `dra_gpu_source_up{source="recorded"} 1`, `dra_gpu_source_up{source="recorded"} 0`, 1),
		"not prepared":         strings.Replace(agent, okHolder+"\n", "", 1),
		"isolation violation":  agent + "# TYPE dra_gpu_isolation_violation gauge\n" + `dra_gpu_isolation_violation{gpu_uuid="GPU-7d8507f8-edea-e4f0-1538-c9110a0b4702",namespace="llm-canary",node="gpu-node-1",pod="llm-canary-ok",pod_uid="` + okUID + `"} 1` + "\n",
		"prepared, no claim":   agent + "# TYPE dra_node_claim_conflict gauge\n" + `dra_node_claim_conflict{claim="llm-canary-ok-gpu-a1b2c",device="gpu-3",driver="gpu.nvidia.com",gpu_uuid="GPU-7d8507f8-edea-e4f0-1538-c9110a0b4702",namespace="llm-canary",node="gpu-node-1",pod="llm-canary-ok",pod_uid="` + okUID + `",pool="gpu-node-1",reason="prepared_without_claim"} 1` + "\n",
		"no agent on the node": "",
	}
	if strings.Count(agent, okHolder) != 1 {
		t.Fatal("the agent fixture lost llm-canary-ok's holder")
	}
	var out bytes.Buffer
	var errOut bytes.Buffer
	if rc := run([]string{"snapshot", "--from", gatesObjects, "--now", goldenNow}, &out, &errOut); rc != 0 {
		t.Fatalf("snapshot: %s", errOut.String())
	}
	exporter := out.String()

	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	type group struct {
		Name      string     `json:"name"`
		Interval  string     `json:"interval"`
		Input     []series   `json:"input_series"`
		ExprTests []exprTest `json:"promql_expr_test"`
	}
	var groups []group
	names := make([]string, 0, len(variants))
	for n := range variants {
		names = append(names, n)
	}
	sort.Strings(names)
	reasons := map[string]bool{}
	for _, name := range names {
		text := variants[name]
		agents := map[string][]byte{}
		if text != "" {
			agents["gpu-node-1"] = []byte(text)
		}
		rc, js, errOut := runGates(t, "llm-canary", "--from", writeBundle(t, objects, agents), "-o", "json")
		if rc == gatesError || rc == gatesUsage {
			t.Fatalf("%s: gates exited %d: %s", name, rc, errOut)
		}
		var r gatesReport
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			t.Fatal(err)
		}
		g := group{Name: name, Interval: "1m"}
		for _, s := range exposition(t, exporter, "") {
			g.Input = append(g.Input, series{s, ""})
		}
		for _, s := range exposition(t, text, `instance="agent-1:9878",job="dra-node-agent"`) {
			g.Input = append(g.Input, series{s, ""})
		}
		for i := range g.Input {
			s, v, _ := strings.Cut(g.Input[i].Series, " ")
			g.Input[i] = series{s, v + "x5"}
		}
		test := exprTest{Expr: "namespace_pod:dra_pod_gate_node:status", EvalTime: "2m"}
		for _, p := range r.Pods {
			for _, gr := range p.Gates {
				if gr.Gate != "node" || p.Node == "" {
					continue
				}
				l := fmt.Sprintf(`namespace_pod:dra_pod_gate_node:status{gate="node", namespace=%q, node=%q, pod=%q, pod_uid=%q`, p.Namespace, p.Node, p.Pod, p.PodUID)
				if gr.Reason != "" {
					l += fmt.Sprintf(", reason=%q", gr.Reason)
				}
				v := 0.0
				if gr.State == statePass {
					v = 1
				}
				reasons[gr.Reason] = true
				test.ExpSamples = append(test.ExpSamples, sample{l + "}", v})
			}
		}
		g.ExprTests = []exprTest{test}
		groups = append(groups, g)
	}
	for _, want := range []string{"", nodegate.NoAgent, nodegate.PodResourcesDown, nodegate.PodResourcesNoDRA, nodegate.IsolationViolation, nodegate.PreparedWithoutClaim, nodegate.NotPrepared, nodegate.IsolationUnverified} {
		if !reasons[want] {
			t.Errorf("no variant gives node gate reason %q: the comparison does not cover it", want)
		}
	}
	rules, err := filepath.Abs("../../rules/gates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := yaml.Marshal(map[string]any{"rule_files": []string{rules}, "evaluation_interval": "1m", "tests": groups})
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(t.TempDir(), "node_gate_test.yaml")
	if err := os.WriteFile(testFile, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "test", "rules", testFile)
	if res, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the rule and gates --from disagree (promtool: %v):\n%s", err, res)
	}
}

// exposition returns the samples of a text exposition as name{labels} value
// lines, with extra labels added.
func exposition(t *testing.T, text, extra string) []string {
	t.Helper()
	if text == "" {
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name, f := range families {
		for _, m := range f.Metric {
			var ls []string
			if extra != "" {
				ls = append(ls, extra)
			}
			for _, lp := range m.Label {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), v))
		}
	}
	sort.Strings(out)
	return out
}

// prometheusBin is DRA_PROMETHEUS; the test is skipped under DRA_E2E_SKIP=1.
func prometheusBin(t *testing.T) string {
	t.Helper()
	prom := os.Getenv(cluster.EnvPrometheus)
	if prom == "" {
		if os.Getenv("DRA_E2E_SKIP") == "1" {
			t.Skip("DRA_E2E_SKIP=1 and DRA_PROMETHEUS unset")
		}
		t.Fatalf("%s is unset (make test sets it), or set DRA_E2E_SKIP=1 to skip", cluster.EnvPrometheus)
	}
	return prom
}

// TestGatesFromPrometheus: a real Prometheus scrapes a fixed exporter and a
// fixed node agent and evaluates rules/gates.yaml; gates reads the verdict
// from it. A canary whose three gates pass for the window, beside a
// negative control that holds, passes (exit 0); once a pod whose readiness
// fails joins it, the verdict fails on the workload gate and names its
// owner; then a pod that cannot be allocated fails it on the api gate
// first.
func TestGatesFromPrometheus(t *testing.T) {
	prom := prometheusBin(t)
	all := readFile(t, gatesObjects)
	snapshotOf := func(objects []byte) []byte {
		path := filepath.Join(t.TempDir(), "objects.yaml")
		if err := os.WriteFile(path, objects, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if rc := run([]string{"snapshot", "--from", path}, &out, &errOut); rc != 0 {
			t.Fatalf("snapshot: %s", errOut.String())
		}
		return out.Bytes()
	}
	var served atomic.Pointer[[]byte]
	pass := snapshotOf(onlyItems(t, all, "llm-canary-ok", "control-holds"))
	served.Store(&pass)
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(*served.Load())
		_, _ = w.Write([]byte("dra_exporter_watch_healthy{resource=\"pods\"} 1\ndra_exporter_apiserver_up 1\ndra_exporter_verdicts_held 0\n"))
	}))
	defer exporter.Close()
	agentText := readFile(t, gatesAgent)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(agentText) }))
	defer agent.Close()
	p, err := cluster.StartPrometheus(context.Background(), cluster.PrometheusOptions{
		Binary: prom, Dir: t.TempDir(), Target: strings.TrimPrefix(exporter.URL, "http://"), Interval: time.Second,
		RuleFiles: []string{"../../rules/gates.yaml"},
		ExtraJobs: []cluster.ScrapeJob{{Name: "dra-node-agent", Target: strings.TrimPrefix(agent.URL, "http://"), HonorLabels: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	gatesUntil := func(what string, wantRC int, check func(r gatesReport) error) gatesReport {
		t.Helper()
		deadline := time.Now().Add(40 * time.Second)
		for {
			rc, out, errOut := runGates(t, "llm-canary", "--prometheus.url", p.URL, "--window", "5s", "--step", "1s", "-o", "json")
			var r gatesReport
			err := json.Unmarshal([]byte(out), &r)
			if err == nil && rc == wantRC {
				if err = check(r); err == nil {
					return r
				}
			} else if err == nil {
				err = fmt.Errorf("exit %d, want %d: %+v", rc, wantRC, r.Verdict)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v\n%s%s", what, err, out, errOut)
			}
			time.Sleep(time.Second)
		}
	}
	r := gatesUntil("a canary that passes for the window", gatesPass, func(r gatesReport) error {
		if len(r.Pods) != 1 || len(r.Pods[0].Gates) != 3 || len(r.Controls) != 1 || r.Controls[0].HeldWindow == nil || !*r.Controls[0].HeldWindow {
			return fmt.Errorf("want one pod with three gates and one control that held: %+v", r)
		}
		return nil
	})
	var evidence []string
	for _, g := range r.Pods[0].Gates {
		if g.PassedWindow == nil || !*g.PassedWindow || g.State != statePass {
			t.Errorf("gate %s: %+v, want passed for the window", g.Gate, g)
		}
		evidence = append(evidence, g.Evidence...)
	}
	for _, want := range []string{
		"claim llm-canary-ok-gpu-a1b2c: allocated device gpu.nvidia.com/gpu-node-1/gpu-0 (uuid GPU-b5934649-3623-97fb-5b4f-8b87f2c54026) on node gpu-node-1, reserved for the pod",
		"the kubelet prepared GPU GPU-b5934649-3623-97fb-5b4f-8b87f2c54026 for claim llm-canary-ok-gpu-a1b2c (node agent of gpu-node-1)",
		"GPU GPU-b5934649-3623-97fb-5b4f-8b87f2c54026: up to 93% busy in the window (node agent)",
		"the pod is Ready",
	} {
		if !slices.Contains(evidence, want) {
			t.Errorf("evidence lacks %q: %q", want, evidence)
		}
	}

	warming := snapshotOf(onlyItems(t, all, "llm-canary-ok", "llm-canary-warming", "control-holds"))
	served.Store(&warming)
	gatesUntil("a pod whose readiness fails", gatesFail, func(r gatesReport) error {
		if r.Verdict.Gate != "workload" || !strings.Contains(r.Verdict.Summary, "llm-canary-warming") || !strings.Contains(r.Verdict.Owner, "inference owner") {
			return fmt.Errorf("verdict %+v, want the workload gate of llm-canary-warming, owned by the inference owner", r.Verdict)
		}
		return nil
	})
	// A namespace without a pod: nothing to judge, no team blamed.
	if rc, out, errOut := runGates(t, "empty", "--prometheus.url", p.URL, "--window", "5s", "--step", "1s"); rc != gatesError ||
		!strings.Contains(out, "Verdict: CANNOT_JUDGE: no DRA pod with gates in namespace empty: nothing to judge (Prometheus has no dra_pod_gate of namespace empty") ||
		strings.Contains(out, "Owner:") {
		t.Errorf("an empty namespace: exit %d, want %d, CANNOT_JUDGE and no owner:\n%s%s", rc, gatesError, out, errOut)
	}
	full := snapshotOf(all)
	served.Store(&full)
	gatesUntil("a pod that cannot be allocated, and a broken control", gatesFail, func(r gatesReport) error {
		if r.Verdict.Gate != "api" || !strings.Contains(r.Verdict.Owner, "platform team") {
			return fmt.Errorf("verdict %+v, want the api gate, owned by the platform team", r.Verdict)
		}
		for _, c := range r.Controls {
			if c.Pod == "control-allocated" && (c.Holds || c.Reason != "started" || c.Device != "gpu-2") {
				return fmt.Errorf("control-allocated: %+v", c)
			}
		}
		return nil
	})
}

// TestGatesOfflineNeverPromotes: offline, the workload gate is not
// evaluated, so a canary whose api and node gates pass is PARTIAL, with its
// own exit status, never PASS; its JSON states are identifiers and it
// claims no window it did not read. A namespace with no pod to judge is
// CANNOT_JUDGE and blames no team.
func TestGatesOfflineNeverPromotes(t *testing.T) {
	objects := onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok", "control-holds")
	path := writeBundle(t, objects, map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	rc, out, errOut := runGates(t, "llm-canary", "--from", path, "-o", "json")
	if rc != gatesPartial || rc == gatesPass || rc == gatesFail {
		t.Fatalf("exit %d, want %d (partial)\n%s%s", rc, gatesPartial, out, errOut)
	}
	for _, absent := range []string{`"passedWindow"`, `"heldWindow"`, `"window"`, "NOT EVALUATED"} {
		if strings.Contains(out, absent) {
			t.Errorf("offline JSON has %s:\n%s", absent, out)
		}
	}
	var r gatesReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Verdict.Outcome != outcomePartial || r.Verdict.Pass || r.Verdict.Owner != "" ||
		r.Verdict.Summary != "api and node pass for 1 pod(s), 1 negative control(s) held; workload not evaluated (needs Prometheus: readiness and GPU activity over a window)" {
		t.Errorf("verdict %+v, want PARTIAL naming the gates that passed and the one not evaluated", r.Verdict)
	}
	states := map[string]string{}
	for _, g := range r.Pods[0].Gates {
		states[g.Gate] = g.State
	}
	if want := map[string]string{"api": "PASS", "node": "PASS", "workload": "NOT_EVALUATED"}; !equalMaps(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	if len(r.Controls) != 1 || r.Controls[0].State != "HOLDS" {
		t.Errorf("controls %+v, want one that HOLDS", r.Controls)
	}

	// A failing gate found offline is a FAIL all the same.
	if rc, out, _ := runGates(t, "llm-canary", "--from", writeBundle(t, objects, nil)); rc != gatesFail || !strings.Contains(out, "Verdict: FAIL: gate node of llm-canary/llm-canary-ok fails (no_node_agent)") {
		t.Errorf("without the agent: exit %d, want %d failing the node gate:\n%s", rc, gatesFail, out)
	}

	// No pod at all: nothing to judge, no team to blame.
	if _, js, _ := runGates(t, "empty", "--from", path, "-o", "json"); !strings.Contains(js, `"pods": []`) || !strings.Contains(js, `"outcome": "CANNOT_JUDGE"`) {
		t.Errorf("an empty namespace, JSON:\n%s", js)
	}
	rc, out, _ = runGates(t, "empty", "--from", path)
	if rc != gatesError || !strings.Contains(out, "Verdict: CANNOT_JUDGE: no DRA pod with gates in namespace empty: nothing to judge") || strings.Contains(out, "Owner:") {
		t.Errorf("an empty namespace: exit %d, want %d, CANNOT_JUDGE and no owner:\n%s", rc, gatesError, out)
	}
}

// TestGatesWithoutGateRules: a real Prometheus scrapes the exporter but
// does not load rules/gates.yaml. Its rules API lists no gate rule and the
// exporter's series are there without the recorded ones: gates cannot
// judge, says so, blames no team and exits 3 (it used to fail every gate
// as absent and blame the platform team).
func TestGatesWithoutGateRules(t *testing.T) {
	prom := prometheusBin(t)
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok", "control-holds"), 0o600); err != nil {
		t.Fatal(err)
	}
	var snap, errOut bytes.Buffer
	if rc := run([]string{"snapshot", "--from", path}, &snap, &errOut); rc != 0 {
		t.Fatalf("snapshot: %s", errOut.String())
	}
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(snap.Bytes()) }))
	defer exporter.Close()
	p, err := cluster.StartPrometheus(context.Background(), cluster.PrometheusOptions{
		Binary: prom, Dir: t.TempDir(), Target: strings.TrimPrefix(exporter.URL, "http://"), Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	deadline := time.Now().Add(40 * time.Second)
	for {
		rc, out, errOut := runGates(t, "llm-canary", "--prometheus.url", p.URL, "--window", "5s", "--step", "1s", "-o", "json")
		var r gatesReport
		jerr := json.Unmarshal([]byte(out), &r)
		if jerr == nil && rc == gatesError && r.Verdict.Outcome == outcomeCannotJudge {
			for _, want := range []string{"Prometheus at " + p.URL + " does not evaluate rules/gates.yaml", "its rules API lists no recording rule " + gateSeries} {
				if !strings.Contains(r.Verdict.Summary, want) {
					t.Errorf("summary %q lacks %q", r.Verdict.Summary, want)
				}
			}
			if r.Verdict.Owner != "" || r.Verdict.Gate != "" || len(r.Pods) != 0 {
				t.Errorf("verdict %+v blames a gate or a team, or judged %d pod(s)", r.Verdict, len(r.Pods))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exit %d, want %d CANNOT_JUDGE (%v)\n%s%s", rc, gatesError, jerr, out, errOut)
		}
		time.Sleep(time.Second)
	}
	_, text, _ := runGates(t, "llm-canary", "--prometheus.url", p.URL, "--window", "5s", "--step", "1s")
	if !strings.Contains(text, "Verdict: CANNOT_JUDGE: Prometheus at ") || strings.Contains(text, "Owner:") {
		t.Errorf("text:\n%s", text)
	}
}

// TestGatesRuleFailing: a Prometheus whose gate rule is loaded but fails
// (its rules API says health "err") cannot judge either. Prometheus' API
// is served by a stub here: a real one only reports a rule failing for
// data it cannot build in a test (many-to-many matches).
func TestGatesRuleFailing(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/rules", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"groups":[{"name":"dra-gates.rules","file":"/etc/prometheus/rules/gates.yaml","interval":30,"limit":0,
"rules":[{"name":%q,"query":"max by (namespace) (dra_pod_gate)","health":"err","lastError":"found duplicate series for the match group","labels":{},
"evaluationTime":0.001,"lastEvaluation":"2026-12-01T12:00:00Z","type":"recording"}],"evaluationTime":0.001,"lastEvaluation":"2026-12-01T12:00:00Z"}]}}`, gateSeries)
	})
	mux.HandleFunc("/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		v := "[]"
		if strings.Contains(r.FormValue("query"), "dra_pod_gate{") {
			v = `[{"metric":{},"value":[1764590400,"2"]}]`
		}
		_, _ = fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, v)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rc, out, errOut := runGates(t, "llm-canary", "--prometheus.url", srv.URL)
	if rc != gatesError || !strings.Contains(out, "Verdict: CANNOT_JUDGE: Prometheus at "+srv.URL+" does not evaluate rules/gates.yaml (its recording rule "+gateSeries+
		" (group dra-gates.rules) fails: found duplicate series for the match group)") || strings.Contains(out, "Owner:") {
		t.Errorf("exit %d, want %d naming the failing rule:\n%s%s", rc, gatesError, out, errOut)
	}
}

// TestNegativeControlsAgree: for every negative control of the gates
// scenario, the exporter's dra_negative_control, gates --from and explain
// (text, JSON and exit status) say the same: HOLDS only for a selector that
// excludes every device, INVALID for a class that does not exist, BROKEN
// for a control that got a device. explain used to call the held control
// BLOCKED and exit 0 on the broken one.
func TestNegativeControlsAgree(t *testing.T) {
	var snap, errOut bytes.Buffer
	if rc := run([]string{"snapshot", "--from", gatesObjects, "--now", goldenNow}, &snap, &errOut); rc != 0 {
		t.Fatalf("snapshot: %s", errOut.String())
	}
	series := map[string]string{}
	for _, line := range exposition(t, snap.String(), "") {
		if !strings.HasPrefix(line, "dra_negative_control{") {
			continue
		}
		pod := line[strings.Index(line, `pod="`)+5:]
		pod = pod[:strings.Index(pod, `"`)]
		reason := line[strings.Index(line, `reason="`)+8:]
		reason = reason[:strings.Index(reason, `"`)]
		series[pod] = reason + " " + line[strings.LastIndex(line, " ")+1:]
	}
	_, js, _ := runGates(t, "llm-canary", "--from", writeBundle(t, readFile(t, gatesObjects), nil), "-o", "json")
	var r gatesReport
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	want := map[string]struct {
		state, reason, value string
		rc                   int
	}{
		"control-holds":     {"HOLDS", "selector_matches_nothing", "1", explainReady},
		"control-allocated": {"BROKEN", "started", "0", explainBlocked},
		"control-invalid":   {"INVALID", "device_class_not_found", "0", explainBlocked},
	}
	if len(series) != len(want) || len(r.Controls) != len(want) {
		t.Fatalf("series %v, gates %+v: want the %d controls", series, r.Controls, len(want))
	}
	for _, c := range r.Controls {
		w, ok := want[c.Pod]
		if !ok {
			t.Errorf("unexpected control %s", c.Pod)
			continue
		}
		if series[c.Pod] != w.reason+" "+w.value {
			t.Errorf("%s: dra_negative_control %q, want reason %s value %s", c.Pod, series[c.Pod], w.reason, w.value)
		}
		if c.State != w.state || c.Reason != w.reason {
			t.Errorf("%s: gates says %s %s, want %s %s", c.Pod, c.State, c.Reason, w.state, w.reason)
		}
		var out, errOut bytes.Buffer
		rc := run([]string{"explain", "--from", gatesObjects, "--now", goldenNow, "-o", "json", "llm-canary/" + c.Pod}, &out, &errOut)
		var e explainJSON
		if err := json.Unmarshal(out.Bytes(), &e); err != nil {
			t.Fatalf("explain %s -o json: %v\n%s%s", c.Pod, err, out.String(), errOut.String())
		}
		if rc != w.rc || e.NegativeControl == nil || e.NegativeControl.State != w.state || e.NegativeControl.Reason != w.reason {
			t.Errorf("explain %s: exit %d, control %+v, want exit %d, %s %s", c.Pod, rc, e.NegativeControl, w.rc, w.state, w.reason)
		}
		out.Reset()
		run([]string{"explain", "--from", gatesObjects, "--now", goldenNow, "llm-canary/" + c.Pod}, &out, &errOut)
		if line := "Verdict: negative control " + w.state + "  reason=" + w.reason; !strings.Contains(out.String(), line) || strings.Contains(out.String(), "Verdict: BLOCKED") || strings.Contains(out.String(), "Verdict: READY") {
			t.Errorf("explain %s lacks %q, or calls the control BLOCKED or READY:\n%s", c.Pod, line, out.String())
		}
		if w.state == "INVALID" && (!strings.Contains(out.String(), "its DeviceClass does not exist") || !strings.Contains(c.Why, "its DeviceClass does not exist")) {
			t.Errorf("%s: explain and gates must say why the control is invalid:\n%s\n%+v", c.Pod, out.String(), c)
		}
	}
	if !strings.Contains(r.Verdict.Summary+strings.Join(r.Verdict.Also, "\n"), "negative control llm-canary/control-invalid is invalid (device_class_not_found): it proves nothing of the boundary, its DeviceClass does not exist") {
		t.Errorf("the verdict does not fail on the invalid control: %+v", r.Verdict)
	}
}

// TestExplainOutputAndExitCodes: explain -o json carries the verdict the
// text prints; a Ready pod exits 0, a blocked one 1, a usage error 2, a pod
// that is not there 3.
func TestExplainOutputAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		pod, state, reason string
		rc                 int
	}{
		{"llm-canary-ok", "READY", "", explainReady},
		{"llm-canary-pending", "BLOCKED", "selector_matches_nothing", explainBlocked},
		{"llm-canary-warming", "BLOCKED", "not_ready", explainBlocked},
	} {
		var out, errOut bytes.Buffer
		rc := run([]string{"explain", "--from", gatesObjects, "--now", goldenNow, "-o", "json", "-n", "llm-canary", tc.pod}, &out, &errOut)
		var e explainJSON
		if err := json.Unmarshal(out.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v\n%s%s", tc.pod, err, out.String(), errOut.String())
		}
		if rc != tc.rc || e.Verdict.State != tc.state || e.Verdict.Reason != tc.reason || e.NegativeControl != nil || len(e.Links) == 0 || e.Pod != tc.pod {
			t.Errorf("%s: exit %d, %+v, want exit %d, %s %s", tc.pod, rc, e.Verdict, tc.rc, tc.state, tc.reason)
		}
	}
	var out, errOut bytes.Buffer
	if rc := run([]string{"explain", "--from", gatesObjects, "llm-canary/nobody"}, &out, &errOut); rc != explainUnreadable || !strings.Contains(errOut.String(), "not found") {
		t.Errorf("a pod that is not there: exit %d, want %d: %s", rc, explainUnreadable, errOut.String())
	}
	if rc := run([]string{"explain", "--from", gatesObjects, "-o", "yaml", "llm-canary/x"}, &out, &errOut); rc != explainUsage {
		t.Errorf("-o yaml: exit %d, want %d", rc, explainUsage)
	}
}

// TestExitCodeTablesMatchCode: the exit-code tables of docs/gates.md and
// docs/flags.md are the ones the commands' help is rendered from.
func TestExitCodeTablesMatchCode(t *testing.T) {
	for doc, codes := range map[string][]exitCode{"../../docs/gates.md": gatesExitCodes, "../../docs/flags.md": explainExitCodes} {
		if !strings.Contains(string(readFile(t, doc)), exitTable(codes)) {
			t.Errorf("%s lacks the exit-code table the code holds:\n%s", doc, exitTable(codes))
		}
	}
	seen := map[int]bool{}
	for _, c := range gatesExitCodes {
		seen[c.code] = true
	}
	for outcome, code := range gatesExit {
		if !seen[code] {
			t.Errorf("outcome %s exits %d, which the table does not document", outcome, code)
		}
	}
}

// TestGatesFromListsSkipped: gates --from names every object it skipped
// (file, document, item, kind), as snapshot and explain do, not only a
// count.
func TestGatesFromListsSkipped(t *testing.T) {
	objects := onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok", "control-holds")
	extra := "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: llm-canary\n  namespace: llm-canary\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: model\n  namespace: llm-canary\n"
	path := writeBundle(t, append(objects, []byte(extra)...), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	_, out, errOut := runGates(t, "llm-canary", "--from", path)
	for _, want := range []string{
		"skipped 2 objects of kinds dra-exporter does not use:\n",
		"objects/objects.yaml: document 2 (Deployment llm-canary/llm-canary)\n",
		"objects/objects.yaml: document 3 (ConfigMap llm-canary/model)\n",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s%s", want, errOut, out)
		}
	}
}
