package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// startPrometheus runs a real Prometheus that scrapes the exporter every
// second and evaluates the rule bundle with every `for:` rewritten to 0s:
// the test checks the expressions and the labels the alerts carry, not the
// production durations.
func startPrometheus(ctx context.Context) (*cluster.Prometheus, error) {
	bin := os.Getenv(cluster.EnvPrometheus)
	if bin == "" {
		return nil, fmt.Errorf("%s is not set (make test builds Prometheus and sets it)", cluster.EnvPrometheus)
	}
	rules, err := filepath.Glob(repoPath("rules/*.yaml"))
	if err != nil || len(rules) == 0 {
		return nil, fmt.Errorf("no rule files in rules/: %v", err)
	}
	return cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary:    bin,
		Dir:       filepath.Join(env.dir, "prometheus"),
		Target:    strings.TrimPrefix(env.exp.URL, "http://"),
		Interval:  time.Second,
		RuleFiles: rules,
		ZeroFor:   true,
	})
}

// waitAlert waits until an alert with the labels is firing (want true) or
// absent (want false), and returns it.
func waitAlert(t *testing.T, prom *cluster.Prometheus, name string, labels map[string]string, want bool) cluster.Alert {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(45 * time.Second)
	var seen []cluster.Alert
	for time.Now().Before(deadline) {
		alerts, err := prom.Alerts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen = alerts
		var found *cluster.Alert
		for i, a := range alerts {
			if a.Labels["alertname"] != name || a.State != "firing" {
				continue
			}
			match := true
			for k, v := range labels {
				if a.Labels[k] != v {
					match = false
					break
				}
			}
			if match {
				found = &alerts[i]
				break
			}
		}
		if want && found != nil {
			return *found
		}
		if !want && found == nil {
			return cluster.Alert{}
		}
		time.Sleep(300 * time.Millisecond)
	}
	state := "firing"
	if !want {
		state = "resolved"
	}
	var names []string
	for _, a := range seen {
		names = append(names, fmt.Sprintf("%s%v", a.Labels["alertname"], a.Labels))
	}
	t.Fatalf("alert %s%v not %s within 45s; active alerts:\n%s", name, labels, state, strings.Join(names, "\n"))
	return cluster.Alert{}
}

// The rule bundle on a real Prometheus: the negative-control selector, a
// prepare failure and a leaked reservation each page with the labels an
// on-call engineer needs, and each alert resolves when its cause is fixed.
func TestAlertsFireAndResolve(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	prom, err := startPrometheus(ctx)
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	defer prom.Stop()
	ns := namespace(t, "e2e-alerts")
	c := env.cp.Client
	gpuAndB200Templates(t, ns)

	// 1. The negative control pages the scheduler layer ...
	neg := createPod(t, cluster.PodWithTemplate(ns, "negative-control", "b200"))
	negClaim := generatedClaim(t, ns, "negative-control")
	a := waitAlert(t, prom, "DRAPodBlockedScheduler", map[string]string{
		"namespace": ns, "pod": "negative-control", "pod_uid": string(neg.UID), "claim": negClaim,
		"layer": "scheduler", "reason": "selector_matches_nothing", "severity": "warning",
	}, true)
	if !strings.Contains(a.Annotations["description"], ns+"/negative-control") || !strings.HasSuffix(a.Annotations["runbook_url"], "#drapodblockedscheduler") {
		t.Errorf("annotations do not name the pod or the runbook: %v", a.Annotations)
	}
	// ... until a node publishing a B200 appears: the scheduler allocates
	// it, and once the kubelet has the pod Ready every alert resolves.
	if err := cluster.AddNode(ctx, c, cluster.GPUNode{Name: "b200-node-1", GPUs: 1, Product: "NVIDIA B200"}); err != nil {
		t.Fatal(err)
	}
	// Later tests expect no B200 anywhere (their negative control).
	t.Cleanup(func() { _ = cluster.RemoveNode(context.Background(), c, "b200-node-1") })
	if p := scheduled(t, ns, "negative-control"); p.Spec.NodeName != "b200-node-1" {
		t.Fatalf("negative-control bound to %s, want b200-node-1", p.Spec.NodeName)
	}
	waitAlert(t, prom, "DRAPodBlockedScheduler", map[string]string{"namespace": ns, "pod": "negative-control"}, false)
	if err := env.kubelet.SetRunning(ctx, ns, "negative-control", true); err != nil {
		t.Fatal(err)
	}
	waitAlert(t, prom, "DRAPodBlockedNode", map[string]string{"namespace": ns, "pod": "negative-control"}, false)

	// 2. A prepare failure pages the node layer with node and device, and
	// resolves when the driver recovers and the pod runs.
	createPod(t, cluster.PodWithTemplate(ns, "llm-prepare", "gpu"))
	bound := scheduled(t, ns, "llm-prepare")
	if err := env.kubelet.SetContainerCreating(ctx, ns, "llm-prepare"); err != nil {
		t.Fatal(err)
	}
	if err := env.kubelet.PrepareFailed(ctx, bound, "error preparing devices for claim: CDI: device gpu-0 not found"); err != nil {
		t.Fatal(err)
	}
	prepClaim := generatedClaim(t, ns, "llm-prepare")
	a = waitAlert(t, prom, "DRAPodBlockedNode", map[string]string{
		"namespace": ns, "pod": "llm-prepare", "pod_uid": string(bound.UID), "claim": prepClaim,
		"node": bound.Spec.NodeName, "layer": "node", "reason": "node_prepare_failed",
	}, true)
	if a.Labels["device"] == "" {
		t.Errorf("node alert carries no device: %v", a.Labels)
	}
	if err := env.kubelet.SetRunning(ctx, ns, "llm-prepare", true); err != nil {
		t.Fatal(err)
	}
	waitAlert(t, prom, "DRAPodBlockedNode", map[string]string{"namespace": ns, "pod": "llm-prepare"}, false)

	// 3. A leaked reservation pages (critical) while the controller-manager
	// is down, and resolves when it returns and lets go of the device.
	env.cp.StopControllerManager()
	restarted := false
	defer func() {
		if !restarted {
			_ = env.cp.StartControllerManager(ctx)
		}
	}()
	if err := cluster.ForceDelete(ctx, c, ns, "llm-prepare"); err != nil {
		t.Fatal(err)
	}
	a = waitAlert(t, prom, "DRAClaimReservationLeak", map[string]string{
		"namespace": ns, "claim": prepClaim, "pod": "llm-prepare", "pod_uid": string(bound.UID),
		"node": bound.Spec.NodeName, "reason": "pod_missing", "severity": "critical",
	}, true)
	if a.Labels["device"] == "" {
		t.Errorf("leak alert carries no device: %v", a.Labels)
	}
	if err := env.cp.StartControllerManager(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitAlert(t, prom, "DRAClaimReservationLeak", map[string]string{"namespace": ns}, false)

	// 4. A DeviceClass that selects nothing, with a pod waiting on it.
	if err := createEmptyClass(ctx, "tpu.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "tpu", "tpu.example.com"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "tpu-job", "tpu"))
	waitAlert(t, prom, "DRADeviceClassNoDevices", map[string]string{"device_class": "tpu.example.com", "severity": "warning"}, true)
	if err := cluster.ForceDelete(ctx, c, ns, "tpu-job"); err != nil {
		t.Fatal(err)
	}
	waitAlert(t, prom, "DRADeviceClassNoDevices", map[string]string{"device_class": "tpu.example.com"}, false)

	bad, err := prom.RuleHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("rules failing to evaluate:\n%s", strings.Join(bad, "\n"))
	}
	// Nothing in the healthy exporter should page about the exporter itself.
	for _, name := range []string{"DRAExporterDown", "DRAExporterInformerNotSynced", "DRAExporterCollectorFailed"} {
		waitAlert(t, prom, name, nil, false)
	}
}

func createEmptyClass(ctx context.Context, name string) error {
	return cluster.CreateDeviceClass(ctx, env.cp.Client, name, name)
}
