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
		"llm-canary-ok/api": "PASS ", "llm-canary-ok/node": "PASS ", "llm-canary-ok/workload": "NOT EVALUATED ",
		"llm-canary-pending/api": "FAIL selector_matches_nothing", "llm-canary-pending/node": "FAIL absent", "llm-canary-pending/workload": "NOT EVALUATED ",
		"llm-canary-retried/api": "FAIL allocation_retried", "llm-canary-retried/node": "FAIL no_node_agent", "llm-canary-retried/workload": "NOT EVALUATED ",
		"llm-canary-warming/api": "PASS ", "llm-canary-warming/node": "PASS ", "llm-canary-warming/workload": "NOT EVALUATED ",
	}
	if !equalMaps(got, want) {
		t.Errorf("gates:\n%v\nwant\n%v", got, want)
	}
	controls := map[string]string{}
	for _, c := range r.Controls {
		controls[c.Pod] = fmt.Sprintf("%v %s %s", c.Holds, c.Reason, c.Device)
	}
	if want := map[string]string{"control-holds": "true selector_matches_nothing ", "control-allocated": "false started gpu-2"}; !equalMaps(controls, want) {
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
	if rc != gatesPass {
		t.Fatalf("exit %d, want 0\n%s%s", rc, out, errOut)
	}
	for _, want := range []string{
		"Pod llm-canary/llm-canary-ok (uid " + okUID + ", node gpu-node-1)",
		"  api       PASS\n",
		"claim llm-canary-ok-gpu-a1b2c: allocated device gpu.nvidia.com/gpu-node-1/gpu-0 (uuid GPU-b5934649-3623-97fb-5b4f-8b87f2c54026) on node gpu-node-1; reserved for the pod",
		"the kubelet prepared GPU GPU-b5934649-3623-97fb-5b4f-8b87f2c54026 for claim llm-canary-ok-gpu-a1b2c",
		"  workload  NOT EVALUATED\n",
		"llm-canary/control-holds (uid 10c989a2-69cb-3bbf-a027-db6efc53654b): HOLDS selector_matches_nothing",
		"Verdict: PASS: every gate of 1 pod(s) passed, 1 negative control(s) held",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	noControl := writeBundle(t, onlyItems(t, readFile(t, gatesObjects), "llm-canary-ok"), map[string][]byte{"gpu-node-1": readFile(t, gatesAgent)})
	if rc, out, _ := runGates(t, "llm-canary", "--from", noControl); rc != gatesFail || !strings.Contains(out, "no negative control in namespace llm-canary") {
		t.Errorf("without a negative control: exit %d, want 1 naming the missing control:\n%s", rc, out)
	}
	if rc, out, _ := runGates(t, "llm-canary", "--from", noControl, "--require-negative-control=false"); rc != gatesPass {
		t.Errorf("without a negative control, not required: exit %d, want 0:\n%s", rc, out)
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
	for _, want := range []string{"", nodeNoAgent, nodePodResourcesDown, nodePodResourcesNoDRA, nodeIsolationViolation, nodePreparedWithoutClaim, nodeNotPrepared, nodeIsolationUnverified} {
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

// TestGatesFromPrometheus: a real Prometheus scrapes a fixed exporter and a
// fixed node agent and evaluates rules/gates.yaml; gates reads the verdict
// from it. A canary whose three gates pass for the window, beside a
// negative control that holds, passes (exit 0); once a pod whose readiness
// fails joins it, the verdict fails on the workload gate and names its
// owner; then a pod that cannot be allocated fails it on the api gate
// first.
func TestGatesFromPrometheus(t *testing.T) {
	prom := os.Getenv(cluster.EnvPrometheus)
	if prom == "" {
		if os.Getenv("DRA_E2E_SKIP") == "1" {
			t.Skip("DRA_E2E_SKIP=1 and DRA_PROMETHEUS unset")
		}
		t.Fatalf("%s is unset (make test sets it), or set DRA_E2E_SKIP=1 to skip", cluster.EnvPrometheus)
	}
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
		if len(r.Pods) != 1 || len(r.Pods[0].Gates) != 3 || len(r.Controls) != 1 || !r.Controls[0].HeldWindow {
			return fmt.Errorf("want one pod with three gates and one control that held: %+v", r)
		}
		return nil
	})
	var evidence []string
	for _, g := range r.Pods[0].Gates {
		if !g.PassedWindow || g.State != statePass {
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
