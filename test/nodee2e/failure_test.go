package nodee2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// kubeletMetrics scrapes the real kubelet's /metrics with a token the API
// server authorizes (the kubelet's webhook authentication).
func kubeletMetrics(t *testing.T) cluster.Metrics {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:%d/metrics", env.node.IP, node.KubeletPort), nil)
	req.Header.Set("Authorization", "Bearer "+cluster.AdminToken)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's self-signed serving certificate
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("kubelet /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("kubelet /metrics: %s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("kubelet /metrics: %v", err)
	}
	return cluster.Metrics(families)
}

// kubeletOperations counts the kubelet's DRA operations of a kind, failed
// or not.
func kubeletOperations(t *testing.T, operation string) float64 {
	t.Helper()
	return kubeletMetrics(t).Sum("dra_operations_duration_seconds", map[string]string{"operation_name": operation})
}

// waitAlert waits until the real Prometheus fires an alert with labels.
func waitAlert(t *testing.T, name string, labels map[string]string) cluster.Alert {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var seen []cluster.Alert
	for time.Now().Before(deadline) {
		alerts, err := env.prom.Alerts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		seen = alerts
		for _, a := range alerts {
			if a.Labels["alertname"] != name || a.State != "firing" {
				continue
			}
			match := true
			for k, v := range labels {
				match = match && a.Labels[k] == v
			}
			if match {
				return a
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("alert %s%v not firing within 60s; active alerts: %v", name, labels, seen)
	return cluster.Alert{}
}

var bogusSharing = node.BogusSharing

// TestPrepareFailure: the driver rejects a claim's opaque config when the
// kubelet asks it to prepare the device. The real kubelet's
// FailedPrepareDynamicResources event makes the pod node_prepare_failed
// (layer node; explain quotes the driver's message); the agent sees the
// claim reported without devices and counts nothing prepared; the kubelet's
// own /metrics, scraped by the real Prometheus, fire DRAKubeletOperationErrors,
// although its gRPC metric counts the failures as OK; and the driver's own
// /metrics fire DRAExampleDriverPrepareErrors.
func TestPrepareFailure(t *testing.T) {
	ns := namespace(t, "prepare-failure")
	failedBefore := kubeletMetrics(t).Sum("dra_operations_duration_seconds", map[string]string{"operation_name": "PrepareResources", "is_error": "true"})
	template(t, ns, "bogus", bogusSharing())
	pod := create(t, workload(ns, "llm-0", "bogus"))
	claim := claimOf(t, ns, "llm-0")
	allocatedDevice(t, ns, claim.Name)

	labels := map[string]string{"namespace": ns, "pod": "llm-0", "layer": "node", "reason": "node_prepare_failed"}
	eventually(t, env.exp, 60*time.Second, "node_prepare_failed", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", labels, 1)
	})
	explain(t, ns+"/llm-0", "node_prepare_failed", "unknown GPU sharing strategy: Bogus")
	if p := waitPod(t, ns, "llm-0", "Pending", 5*time.Second, func(p *corev1.Pod) bool { return true }); p.Status.Phase != corev1.PodPending {
		t.Fatalf("pod with a rejected config is %s", p.Status.Phase)
	}

	eventually(t, env.agent, 30*time.Second, "agent: nothing prepared for the pod", func(m cluster.Metrics) error {
		if err := none(m, "dra_gpu_holder_info", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		return none(m, "dra_node_claim_conflict", map[string]string{"namespace": ns})
	})

	km := kubeletMetrics(t)
	if failed := km.Sum("dra_operations_duration_seconds", map[string]string{"operation_name": "PrepareResources", "is_error": "true"}); failed <= failedBefore {
		t.Errorf("the kubelet's failed PrepareResources did not grow (%v -> %v)", failedBefore, failed)
	}
	// Why the rule reads dra_operations_duration_seconds: the per-claim
	// error travels inside an OK gRPC response.
	for _, s := range km.Find("dra_grpc_operations_duration_seconds", map[string]string{"driver_name": node.Driver}) {
		if s.Labels["grpc_status_code"] != "OK" {
			t.Logf("the kubelet's gRPC metric now counts a %s: %v (the rule could read it)", s.Labels["grpc_status_code"], s)
		}
	}
	waitAlert(t, "DRAKubeletOperationErrors", map[string]string{"node": env.node.Name, "operation_name": "PrepareResources"})
	// The driver's own count of the same failure, scraped from its
	// /metrics (job dra-example-driver), fires its alert too.
	waitAlert(t, "DRAExampleDriverPrepareErrors", map[string]string{"node": env.node.Name})
	_ = pod
}

// TestDriverDown: with the driver stopped, the scheduler still allocates a
// device from its stale ResourceSlice and the kubelet cannot prepare it (the
// driver's socket is gone, then the driver is not registered):
// node_prepare_failed. Started again, the driver
// registers, the kubelet's next retry starts the pod and the verdict clears.
func TestDriverDown(t *testing.T) {
	ns := namespace(t, "driver-down")
	template(t, ns, "gpu", nil)
	startDriver := stopDriver(t)
	create(t, workload(ns, "llm-0", "gpu"))
	allocatedDevice(t, ns, claimOf(t, ns, "llm-0").Name)
	labels := map[string]string{"namespace": ns, "pod": "llm-0", "layer": "node", "reason": "node_prepare_failed"}
	eventually(t, env.exp, 60*time.Second, "node_prepare_failed while the driver is down", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", labels, 1)
	})
	// The kubelet's message is "...dra.sock: connect: no such file or
	// directory" until its plugin watcher sees the socket go, then "DRA
	// driver gpu.example.com is not registered": both name the driver.
	explain(t, ns+"/llm-0", "node_prepare_failed", "Failed to prepare dynamic resources", node.Driver)

	startDriver()
	waitPod(t, ns, "llm-0", "Ready after the driver returned", 90*time.Second, ready)
	eventually(t, env.exp, 30*time.Second, "verdict cleared", func(m cluster.Metrics) error {
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "llm-0"})
	})
}

// TestUnprepareStuck (kubernetes#139772): the driver is down when a running
// pod is deleted. The real kubelet stops the containers but cannot
// unprepare the claim, so it keeps the pod, Terminating past its deadline,
// and the claim stays reserved. An exporter with a 10 s grace reports the
// leak pod_stuck_terminating on the pod's device (DRAPodStuckTerminating's
// series) while the harness's exporter, at the default 5 minutes, does not
// yet; the driver back, the kubelet's retry unprepares, the pod goes and
// the leak clears.
func TestUnprepareStuck(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "unprepare-stuck")
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "llm-0", "gpu"))
	waitPod(t, ns, "llm-0", "Ready", 90*time.Second, ready)
	device := allocatedDevice(t, ns, claimOf(t, ns, "llm-0").Name)
	exp, err := cluster.StartExporter(ctx, env.exporter, env.kubeconfig, t.TempDir(), "--claim.unreserved-grace-period=10s")
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Stop()

	startDriver := stopDriver(t)
	if err := env.cp.Client.CoreV1().Pods(ns).Delete(ctx, "llm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	leak := map[string]string{"namespace": ns, "pod": "llm-0", "device": device, "node": env.node.Name, "reason": "pod_stuck_terminating"}
	eventually(t, exp, 60*time.Second, "pod_stuck_terminating past the 10 s grace", func(m cluster.Metrics) error {
		return one(m, "dra_claim_reservation_leak", leak, 1)
	})
	p := waitPod(t, ns, "llm-0", "still there, deleted, no container running", 5*time.Second, func(p *corev1.Pod) bool {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				return false
			}
		}
		return p.DeletionTimestamp != nil
	})
	t.Logf("pod %s: deadline %s, %s ago; no container running", p.Name, p.DeletionTimestamp.UTC().Format(time.RFC3339), time.Since(p.DeletionTimestamp.Time).Round(time.Second))
	if m, err := env.exp.Scrape(); err != nil {
		t.Fatal(err)
	} else if err := none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "reason": "pod_stuck_terminating"}); err != nil {
		t.Errorf("the harness's exporter (grace 5m) reports it already: %v", err)
	}

	startDriver()
	err = cluster.WaitFor(ctx, 90*time.Second, "the pod gone once the driver unprepares", func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "llm-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, exp, 30*time.Second, "the leak cleared", func(m cluster.Metrics) error {
		return none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns})
	})
}

// stopDriver stops the real node's driver and returns what starts it
// again; a test that ends before calling it gets the driver back anyway.
func stopDriver(t *testing.T) (start func()) {
	t.Helper()
	env.node.StopDriver()
	started := false
	t.Cleanup(func() {
		if !started {
			if err := env.node.StartDriver(context.Background()); err != nil {
				t.Errorf("restart the driver: %v", err)
			}
		}
	})
	return func() {
		t.Helper()
		started = true
		if err := env.node.StartDriver(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
