package nodee2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// histogram returns a histogram series' count and sum.
func histogram(m cluster.Metrics, name string, labels map[string]string) (count uint64, sum float64) {
	mf := m[name]
	if mf == nil {
		return 0, 0
	}
	for _, metric := range mf.GetMetric() {
		ok := true
		for _, lp := range metric.GetLabel() {
			if v, want := labels[lp.GetName()]; want && v != lp.GetValue() {
				ok = false
			}
		}
		if ok && metric.Histogram != nil {
			count += metric.Histogram.GetSampleCount()
			sum += metric.Histogram.GetSampleSum()
		}
	}
	return count, sum
}

// TestLifecycle: a pod with a ResourceClaimTemplate goes through the real
// scheduler (allocation), the real kubelet and driver (prepare, CDI) and
// runs with its device. The exporter reads the claim allocated and
// reserved, never calls the pod blocked once it is Ready, and observes each
// startup stage once from the real transitions; the agent names the holder
// from the real kubelet's pod-resources List.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "lifecycle")
	template(t, ns, "gpu", nil)

	before, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	created := create(t, workload(ns, "llm-0", "gpu"))
	pod := waitPod(t, ns, "llm-0", "Ready", 90*time.Second, ready)
	readyAt := time.Now()
	claim := claimOf(t, ns, "llm-0")
	device := allocatedDevice(t, ns, claim.Name)
	uuid := deviceUUID(t, device)
	if pod.Spec.NodeName != env.node.Name {
		t.Fatalf("bound to %q, want %s", pod.Spec.NodeName, env.node.Name)
	}

	m := eventually(t, env.exp, 30*time.Second, "exporter: claim reserved, stages observed", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim.Name, "state": "reserved"}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_claim_allocation_info", map[string]string{"namespace": ns, "claim": claim.Name,
			"driver": node.Driver, "pool": env.node.Name, "device": device, "node": env.node.Name}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_claim_reserved_for_info", map[string]string{"namespace": ns, "claim": claim.Name, "pod": "llm-0", "pod_uid": string(created.UID)}, 1); err != nil {
			return err
		}
		for _, stage := range []string{"claim_created", "allocated", "bound", "started", "ready"} {
			labels := map[string]string{"lane": "dra", "stage": stage}
			n0, _ := histogram(before, "dra_pod_startup_duration_seconds", labels)
			n1, _ := histogram(m, "dra_pod_startup_duration_seconds", labels)
			if n1 != n0+1 {
				return fmt.Errorf("stage %s: observed %d times, want once", stage, n1-n0)
			}
		}
		// The real kubelet names the device by its CDI ID
		// (k8s.gpu.example.com/gpu=common) and the driver reports no
		// health: unknown, attributed to the claim's one device.
		if err := one(m, "dra_allocated_device_health", map[string]string{"namespace": ns, "pod": "llm-0", "claim": claim.Name,
			"device": device, "gpu_uuid": uuid, "health": "unknown"}, 1); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "llm-0"})
	})
	// Each stage's duration is measured from the pod's creation: they grow
	// stage by stage and the last is within the time the test saw it take.
	prev := 0.0
	for _, stage := range []string{"claim_created", "allocated", "bound", "started", "ready"} {
		labels := map[string]string{"lane": "dra", "stage": stage}
		_, s0 := histogram(before, "dra_pod_startup_duration_seconds", labels)
		_, s1 := histogram(m, "dra_pod_startup_duration_seconds", labels)
		d := s1 - s0
		if d < prev-0.001 || d > readyAt.Sub(created.CreationTimestamp.Time).Seconds()+2 {
			t.Errorf("stage %s took %.3fs after creation (previous stage %.3fs, ready seen after %s)", stage, d, prev, readyAt.Sub(created.CreationTimestamp.Time))
		}
		prev = d
	}
	explain(t, ns+"/llm-0", "READY")

	want := map[string]string{"node": env.node.Name, "gpu_uuid": uuid, "lane": "dra", "namespace": ns,
		"pod": "llm-0", "pod_uid": string(created.UID), "claim": claim.Name}
	eventually(t, env.agent, 30*time.Second, "agent: the holder from the kubelet's pod-resources", func(m cluster.Metrics) error {
		if err := one(m, "dra_node_podresources_dynamic_resources", nil, 1); err != nil {
			return err
		}
		if err := one(m, "dra_gpu_holder_info", want, 1); err != nil {
			return err
		}
		series := map[string]string{"driver": node.Driver, "pool": env.node.Name, "device": device}
		for k, v := range want {
			series[k] = v
		}
		if err := one(m, "dra_gpu_utilization_ratio", series, 0); err != nil {
			return err
		}
		return none(m, "dra_node_claim_conflict", nil)
	})

	// Once Ready, no scrape calls the pod blocked.
	w := watch([]*cluster.Exporter{env.exp}, 250*time.Millisecond, func(_ int, m cluster.Metrics) error {
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "llm-0"})
	})
	time.Sleep(3 * time.Second)
	w.Stop(t)
	_ = ctx
}

var deviceLine = regexp.MustCompile(`^GPU_DEVICE_[0-9]+=(.*)$`)

// TestNegativeControl: two pods on the node each see exactly their own
// device and not the other's (what the container printed, from the
// kubelet's log files); a pod whose claim's selector matches no published
// device stays Pending as selector_matches_nothing, and the real
// Prometheus fires the scheduler-layer alert for it.
func TestNegativeControl(t *testing.T) {
	ns := namespace(t, "negative-control")
	template(t, ns, "gpu", nil)
	seen := map[string]string{}
	for _, name := range []string{"a", "b"} {
		create(t, workload(ns, name, "gpu"))
	}
	for _, name := range []string{"a", "b"} {
		pod := waitPod(t, ns, name, "Running", 90*time.Second, running)
		device := allocatedDevice(t, ns, claimOf(t, ns, name).Name)
		lines := containerLog(t, pod, "workload")
		// The driver's CDI spec gives the container GPU_DEVICE_<n>=<device>
		// for each device it may use (and settings of each, which are not
		// devices).
		var got []string
		for _, l := range lines {
			if m := deviceLine.FindStringSubmatch(l); m != nil {
				got = append(got, m[1])
			}
		}
		if len(got) != 1 || got[0] != device {
			t.Errorf("pod %s holds %s: its container saw devices %v, want exactly [%s]:\n%s", name, device, got, device, strings.Join(lines, "\n"))
		}
		seen[name] = device
	}
	if seen["a"] == seen["b"] {
		t.Fatalf("both pods got %s", seen["a"])
	}

	// The negative control: a selector no published device satisfies.
	template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
	create(t, workload(ns, "control", "no-such-gpu"))
	waitPod(t, ns, "control", "unschedulable", 60*time.Second, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	labels := map[string]string{"namespace": ns, "pod": "control", "layer": "scheduler", "reason": "selector_matches_nothing"}
	eventually(t, env.exp, 30*time.Second, "control blocked", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", labels, 1)
	})
	explain(t, ns+"/control", "selector_matches_nothing", "NVIDIA B300")
	waitAlert(t, "DRAPodBlockedScheduler", map[string]string{"namespace": ns, "pod": "control", "reason": "selector_matches_nothing"})
	if p, _ := env.cp.Client.CoreV1().Pods(ns).Get(context.Background(), "control", metav1.GetOptions{}); p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Fatalf("the negative control left Pending: %s", describe(p))
	}
}

// TestRelease: deleting a running pod makes the kubelet call the driver's
// NodeUnprepareResources; the claim is unreserved, deallocated and deleted;
// the release-latency histogram observes both stages once; and no scrape
// taken every 250 ms through the sequence shows a leak.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "release")
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "llm-0", "gpu"))
	waitPod(t, ns, "llm-0", "Ready", 90*time.Second, ready)
	claim := claimOf(t, ns, "llm-0")

	before, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	unprepares := kubeletOperations(t, "UnprepareResources")
	// The kubelet moves a deleted pod to a terminal phase before the API
	// server removes it, and the resourceclaim controller unreserves the
	// claim after that: between the two the API shows a finished pod still
	// reserved, and the exporter says so (pod_finished, as it leaks "at
	// once"; DRAClaimReservationLeak's `for` outlasts the window). Any
	// other leak, or one left once the claim is gone, fails.
	w := watch([]*cluster.Exporter{env.exp}, 250*time.Millisecond, func(_ int, m cluster.Metrics) error {
		for _, s := range m.Find("dra_claim_reservation_leak", nil) {
			if s.Labels["pod"] != "llm-0" || s.Labels["reason"] != "pod_finished" {
				return fmt.Errorf("a leak during the release: %s", s)
			}
		}
		return nil
	})
	deleted := time.Now()
	if err := env.cp.Client.CoreV1().Pods(ns).Delete(ctx, "llm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, claim.Name)
	released := time.Since(deleted)
	m := eventually(t, env.exp, 30*time.Second, "release observed", func(m cluster.Metrics) error {
		for _, stage := range []string{"unreserved", "deallocated"} {
			labels := map[string]string{"device_class": node.DeviceClass, "stage": stage}
			n0, _ := histogram(before, "dra_claim_release_duration_seconds", labels)
			n1, _ := histogram(m, "dra_claim_release_duration_seconds", labels)
			if n1 != n0+1 {
				return fmt.Errorf("stage %s observed %d times, want once", stage, n1-n0)
			}
		}
		if err := none(m, "dra_claim_reservation_leak", nil); err != nil {
			return err
		}
		return none(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim.Name})
	})
	time.Sleep(time.Second)
	if n := w.Stop(t); n < 4 {
		t.Errorf("only %d scrapes during the release", n)
	}
	for _, stage := range []string{"unreserved", "deallocated"} {
		labels := map[string]string{"device_class": node.DeviceClass, "stage": stage}
		_, s0 := histogram(before, "dra_claim_release_duration_seconds", labels)
		_, s1 := histogram(m, "dra_claim_release_duration_seconds", labels)
		if d := s1 - s0; d < 0 || d > released.Seconds()+1 {
			t.Errorf("release stage %s took %.3fs; the whole release took %s", stage, d, released)
		}
	}
	if got := kubeletOperations(t, "UnprepareResources"); got <= unprepares {
		t.Errorf("the kubelet's UnprepareResources operations did not grow (%v -> %v)", unprepares, got)
	}
	eventually(t, env.agent, 30*time.Second, "agent: no holder left", func(m cluster.Metrics) error {
		return none(m, "dra_gpu_holder_info", map[string]string{"namespace": ns})
	})
}
