package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

const waitMetric = 30 * time.Second

// A canary pod gets its GPU from a ResourceClaimTemplate: the controller
// generates the claim, the scheduler allocates and reserves a device. While
// the simulated kubelet has not started the containers the pod is blocked at
// the node layer; once Ready, nothing is blocked and the allocation latency
// was observed.
func TestCanaryFromTemplate(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-canary")
	before, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	allocBefore := before.Sum("dra_claim_allocation_duration_seconds", map[string]string{"device_class": cluster.GPUClass})
	readyBefore := before.Sum("dra_pod_startup_duration_seconds", map[string]string{"lane": "dra", "stage": "ready"})

	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "llm-gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "llm-canary", "llm-gpu"))
	pod := scheduled(t, ns, "llm-canary")
	claim := generatedClaim(t, ns, "llm-canary")

	c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s not allocated by the scheduler: %+v", claim, c.Status)
	}
	dev := c.Status.Allocation.Devices.Results[0]
	var minor int
	fmt.Sscanf(dev.Device, "gpu-%d", &minor)

	eventually(t, waitMetric, "canary blocked at the node until the kubelet starts it", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "llm-canary", "pod_uid": string(pod.UID),
			"claim": claim, "node": pod.Spec.NodeName, "device": dev.Device, "layer": "node", "reason": "node_prepare_pending"}, 1)
	})
	if err := env.kubelet.SetRunning(ctx, ns, "llm-canary", true); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitMetric, "canary claim reserved, joined to its GPU, pod not blocked", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim, "state": "reserved"}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_claim_allocation_info", map[string]string{"namespace": ns, "claim": claim, "request": "gpu",
			"device_class": cluster.GPUClass, "driver": cluster.Driver, "pool": dev.Pool, "device": dev.Device,
			"node": pod.Spec.NodeName, "gpu_uuid": cluster.GPUUUID(pod.Spec.NodeName, minor)}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_claim_reserved_for_info", map[string]string{"namespace": ns, "claim": claim, "pod": "llm-canary", "pod_uid": string(pod.UID)}, 1); err != nil {
			return err
		}
		if err := none(m, "dra_pod_blocked", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		if got := m.Sum("dra_claim_allocation_duration_seconds", map[string]string{"device_class": cluster.GPUClass}); got < allocBefore+1 {
			return fmt.Errorf("allocation latency count %v, want at least %v", got, allocBefore+1)
		}
		if got := m.Sum("dra_pod_startup_duration_seconds", map[string]string{"lane": "dra", "stage": "ready"}); got < readyBefore+1 {
			return fmt.Errorf("startup ready count %v, want at least %v", got, readyBefore+1)
		}
		return nil
	})
	explain(t, ns+"/llm-canary", "Verdict: READY")
}

// The negative control: a claim whose selector no device meets stays
// Pending, and the exporter (not the scheduler's message, which is the same
// for exhaustion) says the selector matches nothing.
func TestNegativeControlSelector(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-negative")
	tmpl := cluster.ClaimTemplate(ns, "b200", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, cluster.PodWithTemplate(ns, "negative-control", "b200"))
	claim := generatedClaim(t, ns, "negative-control")
	eventually(t, waitMetric, "negative control blocked on its selector", func(m cluster.Metrics) error {
		if err := one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "negative-control", "pod_uid": string(pod.UID),
			"claim": claim, "node": "", "device": "", "layer": "scheduler", "reason": "selector_matches_nothing"}, 1); err != nil {
			return err
		}
		return one(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim, "state": "unallocated"}, 1)
	})
	out := explain(t, ns+"/negative-control", "Verdict: BLOCKED  layer=scheduler  reason=selector_matches_nothing")
	t.Log(out)
	if p, _ := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "negative-control", metav1.GetOptions{}); p.Spec.NodeName != "" {
		t.Fatalf("the negative control was scheduled to %s", p.Spec.NodeName)
	}
}

// More pods than GPUs: the third pod asking for one of the two L4s waits
// with capacity_exhausted, and the class capacity shows no free L4.
func TestCapacityExhausted(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-capacity")
	tmpl := cluster.ClaimTemplate(ns, "l4", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("l4-worker-%d", i)
		createPod(t, cluster.PodWithTemplate(ns, name, "l4"))
		if p := scheduled(t, ns, name); p.Spec.NodeName != "gpu-node-3" {
			t.Fatalf("%s scheduled to %s, want gpu-node-3", name, p.Spec.NodeName)
		}
	}
	// The third pod outranks both workers: with the device plugin the
	// scheduler would preempt one; for DRA devices it does not.
	critical := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-critical"}, Value: 1000000}
	if _, err := env.cp.Client.SchedulingV1().PriorityClasses().Create(ctx, critical, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cp.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), critical.Name, metav1.DeleteOptions{})
	})
	third := cluster.PodWithTemplate(ns, "l4-worker-2", "l4")
	third.Spec.PriorityClassName = critical.Name
	createPod(t, third)
	eventually(t, waitMetric, "third L4 pod capacity_exhausted, behind two lower-priority holders", func(m cluster.Metrics) error {
		if err := one(m, "dra_pod_blocked", blockedLabels(ns, "l4-worker-2", "scheduler", "capacity_exhausted"), 1); err != nil {
			return err
		}
		if err := one(m, "dra_pod_lower_priority_holders", map[string]string{"namespace": ns, "pod": "l4-worker-2", "device_class": cluster.GPUClass}, 2); err != nil {
			return err
		}
		return one(m, "dra_device_class_devices", map[string]string{"device_class": cluster.GPUClass, "node": "gpu-node-3", "state": "free"}, 0)
	})
	// The scheduler has tried (and, for DRA devices, declined) to preempt
	// once the pod is marked unschedulable: the workers keep their GPUs.
	unschedulable(t, ns, "l4-worker-2")
	for i := 0; i < 2; i++ {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("l4-worker-%d", i), metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the scheduler preempted l4-worker-%d for a DRA device (err %v): the no-preemption evidence would be wrong", i, err)
		}
	}
	if out := explain(t, ns+"/l4-worker-2", "reason=capacity_exhausted"); !strings.Contains(out, "preemption will not help") {
		t.Errorf("explain does not say that preemption will not help:\n%s", out)
	}
}

// unschedulable waits for the scheduler to mark a pod PodScheduled=False
// (its scheduling cycle, preemption included, is over).
func unschedulable(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s/%s not marked unschedulable: %v", ns, name, err)
	}
}

// A request for a DeviceClass that does not exist.
func TestMissingDeviceClass(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-noclass")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "typo", "gpu.nvidia.co"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "typo-class", "typo"))
	eventually(t, waitMetric, "device_class_not_found", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", blockedLabels(ns, "typo-class", "scheduler", "device_class_not_found"), 1)
	})
	explain(t, ns+"/typo-class", "reason=device_class_not_found")
}

// A claim created by name and shared by two pods: one device, two
// reservations.
func TestSharedNamedClaim(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-shared")
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-gpu"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := createPod(t, cluster.PodWithClaim(ns, "reranker-a", "shared-gpu"))
	b := createPod(t, cluster.PodWithClaim(ns, "reranker-b", "shared-gpu"))
	pa, pb := scheduled(t, ns, "reranker-a"), scheduled(t, ns, "reranker-b")
	if pa.Spec.NodeName != pb.Spec.NodeName {
		t.Fatalf("pods sharing a claim on different nodes: %s, %s", pa.Spec.NodeName, pb.Spec.NodeName)
	}
	for _, name := range []string{"reranker-a", "reranker-b"} {
		if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitMetric, "shared claim reserved for both pods", func(m cluster.Metrics) error {
		for _, p := range []struct{ name, uid string }{{"reranker-a", string(a.UID)}, {"reranker-b", string(b.UID)}} {
			if err := one(m, "dra_claim_reserved_for_info", map[string]string{"namespace": ns, "claim": "shared-gpu", "pod": p.name, "pod_uid": p.uid}, 1); err != nil {
				return err
			}
		}
		if n := len(m.Find("dra_claim_allocation_info", map[string]string{"namespace": ns, "claim": "shared-gpu"})); n != 1 {
			return fmt.Errorf("shared claim has %d allocated devices, want 1", n)
		}
		if err := one(m, "dra_claim_info", map[string]string{"namespace": ns, "claim": "shared-gpu", "lane": "dra", "pod": ""}, 1); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
}

// The kubelet reports that the DRA driver failed to prepare the device.
func TestNodePrepareFailed(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-prepare")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "llm-prepare", "gpu"))
	pod := scheduled(t, ns, "llm-prepare")
	if err := env.kubelet.SetContainerCreating(ctx, ns, "llm-prepare"); err != nil {
		t.Fatal(err)
	}
	msg := "error preparing devices: CDI spec generation failed: nvidia-container-toolkit: failed to get device info"
	if err := env.kubelet.PrepareFailed(ctx, pod, msg); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitMetric, "node_prepare_failed", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "llm-prepare", "node": pod.Spec.NodeName,
			"layer": "node", "reason": "node_prepare_failed"}, 1)
	})
	out := explain(t, ns+"/llm-prepare", "reason=node_prepare_failed")
	if !strings.Contains(out, "CDI spec generation failed") {
		t.Fatalf("explain does not quote the kubelet's event:\n%s", out)
	}
}

// Containers run but readiness fails: the application layer owns it.
func TestRunningNotReady(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-notready")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "llm-loading", "gpu"))
	scheduled(t, ns, "llm-loading")
	if err := env.kubelet.SetRunning(ctx, ns, "llm-loading", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitMetric, "not_ready", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", blockedLabels(ns, "llm-loading", "application", "not_ready"), 1)
	})
	explain(t, ns+"/llm-loading", "layer=application  reason=not_ready")
}

// A pod asks for nvidia.com/gpu the device-plugin way; on a node without a
// device plugin the scheduler serves it through the DeviceClass that maps
// the extended resource (DRAExtendedResource). A pod on the device-plugin
// node is counted in the other lane.
func TestExtendedResourceLanes(t *testing.T) {
	requireFeature(t, cluster.FeatureExtendedResource)
	ns := namespace(t, "e2e-lanes")
	dra := cluster.PodWithGPUs(ns, "llm-ext", 1)
	dra.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-node-2"}
	dra = createPod(t, dra)
	legacy := cluster.PodWithGPUs(ns, "llm-legacy", 2)
	legacy.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "dp-node-1"}
	createPod(t, legacy)
	scheduled(t, ns, "llm-ext")
	scheduled(t, ns, "llm-legacy")
	eventually(t, waitMetric, "both lanes", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_info", map[string]string{"namespace": ns, "lane": "dra-extended", "pod": "llm-ext", "pod_uid": string(dra.UID)}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_pod_info", map[string]string{"namespace": ns, "pod": "llm-ext", "lane": "dra-extended", "node": "gpu-node-2"}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_pod_info", map[string]string{"namespace": ns, "pod": "llm-legacy", "lane": "device-plugin", "node": "dp-node-1"}, 1); err != nil {
			return err
		}
		if got := m.Sum("dra_lane_devices", map[string]string{"lane": "dra-extended", "node": "gpu-node-2", "state": "allocated"}); got != 1 {
			return fmt.Errorf("dra-extended allocated on gpu-node-2 = %v, want 1", got)
		}
		return one(m, "dra_lane_devices", map[string]string{"lane": "device-plugin", "node": "dp-node-1", "device_class": cluster.GPUClass, "state": "allocated"}, 2)
	})
}

// The read-only contract: the ClusterRole grants get/list/watch only, the
// exporter synced under it, and the API server refuses it any write.
func TestExporterIsReadOnly(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	for _, r := range []struct{ group, resource string }{
		{"resource.k8s.io", "deviceclasses"}, {"resource.k8s.io", "resourceslices"}, {"resource.k8s.io", "resourceclaims"},
		{"resource.k8s.io", "devicetaintrules"}, {"", "pods"}, {"", "nodes"}, {"", "events"},
	} {
		for _, verb := range []string{"get", "list", "watch"} {
			if ok, err := cluster.CanI(ctx, env.cp.Client, verb, r.group, r.resource); err != nil || !ok {
				t.Errorf("exporter cannot %s %s: %v", verb, r.resource, err)
			}
		}
		for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			if ok, err := cluster.CanI(ctx, env.cp.Client, verb, r.group, r.resource); err != nil || ok {
				t.Errorf("exporter may %s %s (err %v): the role must be read-only", verb, r.resource, err)
			}
		}
	}
	for _, r := range []struct{ group, resource string }{{"", "secrets"}, {"", "configmaps"}, {"resource.k8s.io", "resourceclaimtemplates"}} {
		if ok, _ := cluster.CanI(ctx, env.cp.Client, "list", r.group, r.resource); ok {
			t.Errorf("exporter may list %s, which it does not need", r.resource)
		}
	}
	m, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Find("dra_exporter_informer_synced", nil) {
		if s.Value != 1 {
			t.Errorf("informer not synced under the deploy ClusterRole: %s", s)
		}
	}
	// devicetaintrules is served from 1.37: before, the exporter does not
	// watch it and says so.
	taintRules := env.cp.Version.Has(cluster.FeatureDeviceTaintRules)
	informers := 6
	if taintRules {
		informers = 7
	}
	if n := len(m.Find("dra_exporter_informer_synced", nil)); n != informers {
		t.Errorf("want %d informers on %s, got %d", informers, env.cp.Version, n)
	}
	for _, r := range []string{"deviceclasses", "resourceslices", "resourceclaims", "pods", "nodes", "events", "devicetaintrules"} {
		want := 1.0
		if r == "devicetaintrules" && !taintRules {
			want = 0
		}
		if err := one(m, "dra_exporter_resource_served", map[string]string{"resource": r}, want); err != nil {
			t.Errorf("on %s: %v", env.cp.Version, err)
		}
	}
}

// The API server goes away: the exporter keeps serving what it knows, stays
// alive, says the API server is unreachable, and catches up when it
// returns. Declared last: the whole control plane reconnects afterwards.
func TestExporterSurvivesAPIServerOutage(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	before, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	devices := len(before.Find("dra_device_info", nil))
	if devices == 0 {
		t.Fatal("no devices before the outage")
	}
	if err := one(before, "dra_exporter_apiserver_up", nil, 1); err != nil {
		t.Fatal(err)
	}

	env.cp.StopAPIServer()
	restarted := false
	defer func() {
		if !restarted {
			if err := env.cp.StartAPIServer(ctx); err != nil {
				t.Errorf("restart kube-apiserver: %v", err)
			}
		}
	}()
	eventually(t, 60*time.Second, "last known state served while watches fail", func(m cluster.Metrics) error {
		if n := len(m.Find("dra_device_info", nil)); n != devices {
			return fmt.Errorf("%d devices served during the outage, want %d", n, devices)
		}
		return one(m, "dra_exporter_apiserver_up", nil, 0)
	})
	resp, err := http.Get(env.exp.URL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz during the outage: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz during the outage: %s", resp.Status)
	}

	if err := env.cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := cluster.CreateDeviceClass(ctx, env.cp.Client, "after-outage.example.com", "after-outage.example.com"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cp.Client.ResourceV1().DeviceClasses().Delete(context.Background(), "after-outage.example.com", metav1.DeleteOptions{})
	})
	eventually(t, 90*time.Second, "exporter caught up after the outage", func(m cluster.Metrics) error {
		if err := one(m, "dra_exporter_apiserver_up", nil, 1); err != nil {
			return err
		}
		return one(m, "dra_device_class_devices", map[string]string{"device_class": "after-outage.example.com", "node": "", "state": "total"}, 0)
	})
}
