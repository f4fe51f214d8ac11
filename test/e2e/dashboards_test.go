package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/dashboards"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// The dashboards on data: a real Prometheus scrapes the exporter (and a
// recorded dcgm-exporter page) while the demo's scenario is seeded and
// churns, and every panel's query, with the variables set to the demo's
// values, must return data over the test's time range: a panel that is
// always empty on the demo is a bug. The demo's node agents run too (one per
// simulated node, cluster.StartNodeAgents), so the GPU dashboard's queries
// run for both sources, and the agent's holders of each GPU are checked
// against the rules' join over dcgm-exporter (TestAgentAgreesWithRulesJoin's
// part of this test).

func TestDashboardsHaveDataOnTheDemo(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	began := time.Now()
	c := env.cp.Client
	const ns = "demo-dashboards"
	// Registered before namespace(), so it runs after its cleanup: later
	// tests count devices, so wait until the demo's claims are gone.
	t.Cleanup(func() {
		_ = cluster.WaitFor(ctx, 30*time.Second, "claims of "+ns+" deleted", func(ctx context.Context) (bool, error) {
			l, err := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
	})
	namespace(t, ns)

	// The recorded page as dcgm-exporter 4.8.3+ serves it with
	// KUBERNETES_ENABLE_DRA: each held GPU's series copied per container,
	// with the claim device the kubelet gave it (cluster.DCGMWithDRA).
	dcgm, err := cluster.ServeFunc(func() ([]byte, error) {
		holders, err := cluster.DRAHolders(ctx, c)
		if err != nil {
			return nil, err
		}
		return cluster.DCGMWithDRA(cluster.DCGMExposition, holders)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dcgm.Stop()
	agents, err := cluster.StartNodeAgents(ctx, env.cp, env.exporter, repoPath("deploy/manifests/node-agent-clusterrole.yaml"),
		filepath.Join(env.dir, "dashboards-agents"), cluster.DemoNodes)
	if err != nil {
		t.Fatal(err)
	}
	defer agents.Stop()
	rules, err := filepath.Glob(repoPath("rules/*.yaml"))
	if err != nil || len(rules) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary: os.Getenv(cluster.EnvPrometheus), Dir: filepath.Join(env.dir, "prometheus-dashboards"),
		Target: strings.TrimPrefix(env.exp.URL, "http://"), Interval: time.Second,
		RuleFiles: rules, ZeroFor: true,
		ExtraJobs: []cluster.ScrapeJob{
			{Name: "dcgm-exporter", Target: dcgm.Addr},
			{Name: "dra-node-agent", Targets: agents.Targets(), HonorLabels: true},
		},
	})
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	defer prom.Stop()
	start := time.Now()

	// The demo's scenario, seeded while Prometheus scrapes, so that the
	// latency histograms move under its eyes; then two rounds of churn for
	// release latencies.
	if err := cluster.SeedDemo(ctx, c, ns); err != nil {
		t.Fatalf("seed: %v", err)
	}
	for i := 0; i < 2; i++ {
		names := cluster.StartReplica(ctx, c, ns, i)
		time.Sleep(2 * time.Second)
		for _, n := range names {
			if err := cluster.ForceDelete(ctx, c, ns, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Until the last transitions are scraped: releases observed, the idle
	// claim past the exporter's grace period, the dcgm joins recorded.
	for _, q := range []string{
		`dra_claim_release_duration_seconds_count{stage="deallocated"} > 0`,
		`dra_claim_reservation_leak{reason="allocated_unreserved", namespace="` + ns + `"}`,
		`namespace_claim_device:dcgm_gpu_utilization:ratio{namespace="` + ns + `"}`,
		`namespace_claim_device:dcgm_dra_gpu_utilization:ratio{namespace="` + ns + `"}`,
		`driver_pool_device:dcgm_dra_pods:count > 1`,
		`dra_gpu_holder_info{namespace="` + ns + `", pod="reranker-b"}`,
		`ALERTS{alertname="DRAGPUActivityOnUnallocatedGPU", alertstate="firing"}`,
		`ALERTS{alertname="DRAGPUIsolationViolation", alertstate="firing", pod="gpu-debug"}`,
	} {
		err := cluster.WaitFor(ctx, 30*time.Second, q, func(ctx context.Context) (bool, error) {
			s, err := prom.QueryAt(ctx, q, time.Now())
			return err == nil && len(s) > 0, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// One more release once Prometheus has seen the first ones: the release
	// histogram's series are born with their first observation, which rate()
	// cannot see as an increase.
	names := cluster.StartReplica(ctx, c, ns, 2)
	for _, n := range names {
		if err := cluster.ForceDelete(ctx, c, ns, n); err != nil {
			t.Fatal(err)
		}
	}
	err = cluster.WaitFor(ctx, 30*time.Second, "a release rate() sees", func(ctx context.Context) (bool, error) {
		s, err := prom.QueryAt(ctx, `increase(dra_claim_release_duration_seconds_count{stage="deallocated"}[1m]) > 0`, time.Now())
		return err == nil && len(s) > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Past the comparison offset ("compare" below), so that the lines of
	// "$compare ago" have that release and startup too.
	time.Sleep(7 * time.Second)
	end := time.Now()

	values := map[string]string{
		"__rate_interval": "20s",
		"__interval":      "1s",
		"__range":         fmt.Sprintf("%ds", int(end.Sub(start).Seconds())+1),
		// The comparison lines look back a week in use; the test has seconds.
		"compare": "5s",
	}
	variables := resolveVariables(t, prom, end, map[string]string{
		"namespace": ns, "device_class": cluster.GPUClass, "node": "gpu-node-1",
	})
	agreeWithRulesJoin(t, prom, ns, end)
	draLabelsAgreeWithUUIDJoin(t, c, prom, ns, end)
	sources := []string{dashboards.SourceDCGM, dashboards.SourceAgent}

	var report, empty, unchecked []string
	for _, d := range dashboards.All() {
		raw, err := os.ReadFile(repoPath("dashboards/" + d.File))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashboards.Queries(d.File, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Variable != "" {
				continue
			}
			runs := dashboards.Sources(q.Expr)
			if len(runs) == 0 {
				runs = []string{""}
			}
			for _, src := range runs {
				where := fmt.Sprintf("%s | %s | %s", d.File, q.Panel, q.RefID)
				if src != "" {
					where += " | source=" + src
				}
				if src != "" && !slices.Contains(sources, src) {
					unchecked = append(unchecked, where)
					continue
				}
				vals := map[string]string{"source": src}
				for k, v := range values {
					vals[k] = v
				}
				for k, v := range variables {
					vals[k] = v
				}
				expr := dashboards.Substitute(q.Expr, vals)
				var series []cluster.Series
				if q.Instant {
					series, err = prom.QueryAt(ctx, expr, end)
				} else {
					series, err = prom.QueryRange(ctx, expr, start, end, time.Second)
				}
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				n := finite(series)
				report = append(report, fmt.Sprintf("%s | %d series, %d values", where, len(series), n))
				if n == 0 {
					empty = append(empty, where+"\n    "+expr)
				}
			}
		}
	}
	t.Logf("variables: %v; data over %s of scraping; every query:\n%s", variables, end.Sub(start).Round(time.Second), strings.Join(report, "\n"))
	if len(unchecked) > 0 {
		t.Errorf("queries of an unknown source, not checked:\n%s", strings.Join(unchecked, "\n"))
	}
	if len(empty) > 0 {
		t.Errorf("queries without data on the demo:\n%s", strings.Join(empty, "\n"))
	}
	bad, err := prom.RuleHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("rules failing to evaluate:\n%s", strings.Join(bad, "\n"))
	}
	t.Logf("took %s", time.Since(began).Round(100*time.Millisecond))
}

// agreeWithRulesJoin checks that, GPU by GPU, the node agents and the rule
// bundle's join over dcgm-exporter (rules/gpu.yaml: the GPU's UUID ->
// dra_claim_allocation_info -> dra_claim_reserved_for_info) name the same
// namespace, pod and claim. Pods the kubelet has not prepared (llm-prepare's
// NodePrepareResources failed) are where they differ by design: the rules
// read the API's reservation, the agent what the kubelet prepared; they are
// left out, and so is the device-plugin lane (the rules join claims only).
func agreeWithRulesJoin(t *testing.T, prom *cluster.Prometheus, ns string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	devices, err := prom.QueryAt(ctx, `namespace_claim_device:dcgm_gpu_utilization:ratio{namespace="`+ns+`"}`, at)
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := prom.QueryAt(ctx, `dra_claim_reserved_for_info{namespace="`+ns+`"}`, at)
	if err != nil {
		t.Fatal(err)
	}
	holders, err := prom.QueryAt(ctx, `dra_gpu_holder_info{namespace="`+ns+`", lane=~"dra|dra-extended"}`, at)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string][]string{} // claim -> pods
	for _, s := range reserved {
		pods[s.Labels["claim"]] = append(pods[s.Labels["claim"]], s.Labels["pod"])
	}
	viaRules, viaAgent := map[string]bool{}, map[string]bool{}
	for _, s := range devices {
		for _, pod := range pods[s.Labels["claim"]] {
			if pod == "llm-prepare" {
				continue
			}
			viaRules[strings.Join([]string{s.Labels["gpu_uuid"], s.Labels["namespace"], pod, s.Labels["claim"]}, " ")] = true
		}
	}
	// llm-prepare's claim is allocated and reserved, but its kubelet failed
	// to prepare it: an agent reads it as a holder only where it does not
	// read the kubelet's DRA claims (dra_node_podresources_dynamic_resources
	// is 0, or absent while the agent cannot tell, e.g. before a pod of the
	// node runs) and so falls back to the claim allocations, as documented.
	// Where it is 1 the dra lane is what the kubelet prepared, and
	// llm-prepare must not be in it.
	kubelet, err := prom.QueryAt(ctx, `dra_node_podresources_dynamic_resources == 1`, at)
	if err != nil {
		t.Fatal(err)
	}
	fromKubelet := map[string]bool{}
	for _, s := range kubelet {
		fromKubelet[s.Labels["instance"]] = true
	}
	for _, s := range holders {
		if s.Labels["pod"] == "llm-prepare" {
			if fromKubelet[s.Labels["instance"]] {
				t.Errorf("node %s: the agent reads llm-prepare (preparation failed) as a holder while it reads the kubelet's DRA claims", s.Labels["node"])
				continue
			}
			t.Logf("llm-prepare read as a holder from the claim allocations on %s (the agent does not read DRA claims from its kubelet there)", s.Labels["node"])
			continue
		}
		viaAgent[strings.Join([]string{s.Labels["gpu_uuid"], s.Labels["namespace"], s.Labels["pod"], s.Labels["claim"]}, " ")] = true
	}
	if len(viaRules) < 5 {
		t.Errorf("the rules' join attributes %d GPU holders on the demo, want the demo's Ready and loading pods: %v", len(viaRules), viaRules)
	}
	for k := range viaRules {
		if !viaAgent[k] {
			t.Errorf("gpu_uuid namespace pod claim %q: in the rules' join, not in the node agent's dra_gpu_holder_info", k)
		}
	}
	for k := range viaAgent {
		if !viaRules[k] {
			t.Errorf("gpu_uuid namespace pod claim %q: in the node agent's dra_gpu_holder_info, not in the rules' join", k)
		}
	}
	t.Logf("node agents and rules agree on %d GPU holders", len(viaAgent))
}

// draLabelsAgreeWithUUIDJoin: the rules over dcgm-exporter's own DRA labels
// (the claim device the kubelet names) give exactly the whole-GPU claim
// devices of the demo's running pods, each with the value of the rules over
// its GPU UUID (the claim allocations joined to the slices' uuid attribute);
// per pod, only a device's sole holder gets a value, and the demo's shared
// claim (two pods) gets none.
func draLabelsAgreeWithUUIDJoin(t *testing.T, c kubernetes.Interface, prom *cluster.Prometheus, ns string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	query := func(q string) map[string]float64 {
		series, err := prom.QueryAt(ctx, q, at)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, s := range series {
			v := math.NaN()
			if len(s.Values) > 0 {
				v = s.Values[0]
			}
			out[strings.Join([]string{s.Labels["namespace"], s.Labels["pod"], s.Labels["claim"], s.Labels["pool"], s.Labels["device"]}, " ")] = v
		}
		return out
	}
	holders, err := cluster.DRAHolders(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	wantDevices, wantPods := map[string]bool{}, map[string]bool{}
	podsOf := map[string]map[string]bool{} // pool/device -> pods
	for _, hs := range holders {
		for _, h := range hs {
			if h.MIGUUID != "" || h.MIGProfile != "" {
				continue
			}
			if podsOf[h.Pool+"/"+h.Device] == nil {
				podsOf[h.Pool+"/"+h.Device] = map[string]bool{}
			}
			podsOf[h.Pool+"/"+h.Device][h.Namespace+"/"+h.Pod] = true
		}
	}
	shared := false
	for _, hs := range holders {
		for _, h := range hs {
			if h.Namespace != ns || h.MIGUUID != "" || h.MIGProfile != "" {
				continue
			}
			wantDevices[strings.Join([]string{h.ClaimNamespace, "", h.ClaimName, h.Pool, h.Device}, " ")] = true
			if len(podsOf[h.Pool+"/"+h.Device]) == 1 {
				wantPods[strings.Join([]string{h.Namespace, h.Pod, h.ClaimName, h.Pool, h.Device}, " ")] = true
			} else if h.ClaimName == "shared-gpu" {
				shared = true
			}
		}
	}
	if len(wantDevices) < 3 || !shared {
		t.Fatalf("the demo's running pods hold %d whole-GPU claim devices (shared claim among them: %v), want at least 3 and the shared claim: %v", len(wantDevices), shared, holders)
	}
	byLabels := query(`namespace_claim_device:dcgm_dra_gpu_utilization:ratio{namespace="` + ns + `"}`)
	byUUID := query(`max by (namespace, claim, pool, device) (namespace_claim_device:dcgm_gpu_utilization:ratio{namespace="` + ns + `"})`)
	for k := range wantDevices {
		v, ok := byLabels[k]
		switch {
		case !ok:
			t.Errorf("claim device %q: no series from dcgm-exporter's DRA labels", k)
		case v != byUUID[k]:
			t.Errorf("claim device %q: %v from the DRA labels, %v from the UUID join", k, v, byUUID[k])
		}
	}
	for k := range byLabels {
		if !wantDevices[k] {
			t.Errorf("claim device %q from the DRA labels, held by no running pod's container", k)
		}
	}
	perPod := query(`namespace_pod_claim:dcgm_dra_gpu_utilization:ratio{namespace="` + ns + `"}`)
	for k := range wantPods {
		if _, ok := perPod[k]; !ok {
			t.Errorf("pod claim device %q (its sole holder): no per-pod series", k)
		}
	}
	for k := range perPod {
		if !wantPods[k] {
			t.Errorf("pod claim device %q: a per-pod series for a device several pods share (or nobody holds)", k)
		}
	}
	t.Logf("dcgm-exporter's DRA labels and the UUID join agree on %d claim devices; %d sole holders get a per-pod value", len(wantDevices), len(wantPods))
}

// resolveVariables runs every dashboard variable's label_values query, as
// Grafana does, checks that it offers the demo's value (want), and returns
// the value to use: want, or All (".*") for a variable the demo has no
// values for (cluster: a single Prometheus has no cluster label) or that
// would hide pods not yet on a node (node: pending pods have node="").
func resolveVariables(t *testing.T, prom *cluster.Prometheus, at time.Time, want map[string]string) map[string]string {
	t.Helper()
	chosen := map[string]string{"cluster": ".*"}
	seen := map[string]bool{}
	for _, d := range dashboards.All() {
		raw, err := os.ReadFile(repoPath("dashboards/" + d.File))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashboards.Queries(d.File, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Variable == "" || seen[q.Variable] {
				continue
			}
			seen[q.Variable] = true
			label := q.Label
			expr := fmt.Sprintf("group by (%s) (%s)", label, dashboards.Substitute(q.Expr, chosen))
			series, err := prom.QueryAt(context.Background(), expr, at)
			if err != nil {
				t.Fatalf("variable %s: %v", q.Variable, err)
			}
			var offered []string
			for _, s := range series {
				if v := s.Labels[label]; v != "" {
					offered = append(offered, v)
				}
			}
			w, ok := want[q.Variable]
			switch {
			case !ok:
				if len(offered) > 0 {
					t.Errorf("variable %s offers %v on the demo, which has no such label", q.Variable, offered)
				}
			case !slices.Contains(offered, w):
				t.Errorf("variable %s offers %v, not the demo's %s", q.Variable, offered, w)
			case q.Variable == "node":
				chosen[q.Variable] = ".*"
			default:
				chosen[q.Variable] = w
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no dashboard has a variable %s", name)
		}
	}
	return chosen
}

func finite(series []cluster.Series) int {
	n := 0
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				n++
			}
		}
	}
	return n
}
