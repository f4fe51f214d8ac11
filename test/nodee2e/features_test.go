package nodee2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// The 1.37 DRA features on the real driver: dra-example-driver v0.4.0
// restarted with the flag of each feature publishes it for real, the real
// scheduler allocates against it, and the exporter's capacity and verdicts
// must agree with what the scheduler did.

// withDriver restarts the real node's driver with features for the rest of
// the test, and restores the default driver afterwards. Call it before
// namespace(): cleanups run last first, so the pods and claims of the test
// are gone (unprepared by this driver) before the default one returns.
func withDriver(t *testing.T, f node.DriverFeatures) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		env.node.StopDriver()
		if err := env.node.StartDriver(ctx); err != nil {
			t.Errorf("restore the default driver: %v", err)
		}
	})
	env.node.StopDriver()
	if err := env.node.StartDriverWith(ctx, f); err != nil {
		t.Fatalf("driver with %+v: %v", f, err)
	}
}

// unschedulable reports a pod the scheduler could not place.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// TestDriverPartitions (KEP-4815): with --gpu-partitions=2 each of the
// node's 4 GPUs is a counter set drawn on by two partitions and one full
// device. Eight pods take the eight partitions; the real scheduler then
// places neither a ninth partition nor a full GPU (the counters are spent),
// and the exporter says capacity_exhausted for both and counts no device of
// the class free, though four full devices are unallocated. Deleting one
// partition pod frees its counters: the waiting partition pod is placed and
// its verdict clears.
func TestDriverPartitions(t *testing.T) {
	withDriver(t, node.DriverFeatures{Partitions: 2})
	ns := namespace(t, "partitions")
	template(t, ns, "partition", nil, `"partition" in device.attributes["`+node.Driver+`"]`)
	template(t, ns, "full", nil, `"full" in device.attributes["`+node.Driver+`"]`)
	var names []string
	for i := range 8 {
		name := fmt.Sprintf("part-%d", i)
		names = append(names, name)
		create(t, workload(ns, name, "partition"))
	}
	perGPU := map[string]int{}
	for _, name := range names {
		waitPod(t, ns, name, "Running", 120*time.Second, running)
		perGPU[allocatedDevice(t, ns, claimOf(t, ns, name).Name)]++
	}
	if len(perGPU) != 8 {
		t.Fatalf("eight partition pods got devices %v, want eight distinct partitions", perGPU)
	}

	create(t, workload(ns, "part-8", "partition"))
	create(t, workload(ns, "whole", "full"))
	for _, name := range []string{"part-8", "whole"} {
		waitPod(t, ns, name, "unschedulable", 60*time.Second, unschedulable)
	}
	eventually(t, env.exp, 30*time.Second, "capacity_exhausted for both, nothing of the class free", func(m cluster.Metrics) error {
		for _, name := range []string{"part-8", "whole"} {
			if err := one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": name, "reason": "capacity_exhausted"}, 1); err != nil {
				return err
			}
		}
		for state, v := range map[string]float64{"total": 12, "allocated": 8, "free": 0} {
			if err := one(m, "dra_device_class_devices", map[string]string{"device_class": node.DeviceClass, "node": env.node.Name, "state": state}, v); err != nil {
				return err
			}
		}
		return nil
	})
	explain(t, ns+"/whole", "capacity_exhausted")

	// One partition back: the scheduler places the waiting partition pod.
	if err := cluster.ForceDelete(context.Background(), env.cp.Client, ns, "part-0"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, ns, "part-8", "Running once a partition's counters are back", 120*time.Second, running)
	eventually(t, env.exp, 30*time.Second, "part-8's verdict cleared, whole still waits", func(m cluster.Metrics) error {
		if err := none(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "part-8"}); err != nil {
			return err
		}
		return one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "whole", "reason": "capacity_exhausted"}, 1)
	})
}

// TestDriverSharedCapacity (KEP-5075): with --gpu-allow-multiple-allocations
// every GPU may serve several requests, each consuming memory and compute.
// Two pods asking for 30Gi and 30 compute of GPU 0 share it (the real
// scheduler allocates gpu-0 to both); the exporter reports what is left
// (20Gi, 40), no double-allocation conflict (the cluster's nor the node
// agent's), and a third pod whose 30Gi no longer fits is capacity_exhausted.
func TestDriverSharedCapacity(t *testing.T) {
	withDriver(t, node.DriverFeatures{MultipleAllocations: true})
	ns := namespace(t, "shared-capacity")
	tmpl := node.ClaimTemplate(ns, "slice-of-gpu0", nil, `device.attributes["`+node.Driver+`"].index == 0`)
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{
			"memory":  resource.MustParse("30Gi"),
			"compute": resource.MustParse("30"),
		},
	}
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		create(t, workload(ns, name, "slice-of-gpu0"))
	}
	for _, name := range []string{"a", "b"} {
		waitPod(t, ns, name, "Running", 120*time.Second, running)
		if d := allocatedDevice(t, ns, claimOf(t, ns, name).Name); d != "gpu-0" {
			t.Fatalf("pod %s got %s, want gpu-0 (its selector)", name, d)
		}
	}
	device := map[string]string{"driver": node.Driver, "pool": env.node.Name, "device": "gpu-0"}
	with := func(extra ...string) map[string]string {
		l := map[string]string{}
		for k, v := range device {
			l[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	eventually(t, env.exp, 30*time.Second, "gpu-0's remaining capacity after two shares", func(m cluster.Metrics) error {
		if err := one(m, "dra_device_capacity_remaining", with("capacity", "memory"), 20*1024*1024*1024); err != nil {
			return err
		}
		if err := one(m, "dra_device_capacity_remaining", with("capacity", "compute"), 40); err != nil {
			return err
		}
		return none(m, "dra_device_allocation_conflict", device)
	})

	create(t, workload(ns, "c", "slice-of-gpu0"))
	waitPod(t, ns, "c", "unschedulable", 60*time.Second, unschedulable)
	eventually(t, env.exp, 30*time.Second, "c capacity_exhausted, still no conflict", func(m cluster.Metrics) error {
		if err := one(m, "dra_pod_blocked", map[string]string{"namespace": ns, "pod": "c", "reason": "capacity_exhausted"}, 1); err != nil {
			return err
		}
		return none(m, "dra_device_allocation_conflict", device)
	})
	eventually(t, env.agent, 30*time.Second, "the node agent sees both holders and no conflict", func(m cluster.Metrics) error {
		return none(m, "dra_node_claim_conflict", map[string]string{"device": "gpu-0"})
	})
}

// TestDriverBindingConditions (KEP-5007): with --binding-conditions every
// device of the driver carries the binding condition "BindingConditions".
// The real scheduler allocates and reserves a device, then holds the pod in
// PreBind: the pod is waiting (not blocked) and explain names the condition.
// The test then plays the example driver's controller
// (cmd/dra-example-controller, plugin BindingConditions: it sets the
// condition True with reason Ready on every allocated device): the
// scheduler binds the pod, the real kubelet prepares the device and the pod
// gets Ready. The wait the scheduler held the pod is logged.
func TestDriverBindingConditions(t *testing.T) {
	ctx := context.Background()
	withDriver(t, node.DriverFeatures{BindingConditions: true})
	ns := namespace(t, "binding-conditions")
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "held", "gpu"))
	claim := claimOf(t, ns, "held")
	device := allocatedDevice(t, ns, claim.Name)
	eventually(t, env.exp, 30*time.Second, "claim reserved, the pod not bound and not blocked", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim.Name, "state": "reserved"}, 1); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
	held := time.Now()
	explain(t, ns+"/held", "binding condition BindingConditions")
	time.Sleep(3 * time.Second) // the scheduler's PreBind keeps waiting
	if p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "held", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the scheduler bound the pod before its binding condition (node %q, err %v)", p.Spec.NodeName, err)
	}

	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: node.Driver, Pool: env.node.Name, Device: device,
			Conditions: []metav1.Condition{{Type: "BindingConditions", Status: metav1.ConditionTrue, Reason: "Ready", Message: "Device is ready", LastTransitionTime: metav1.Now()}}})
		_, err = env.cp.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set the binding condition: %v", err)
	}
	released := time.Now()
	p := waitPod(t, ns, "held", "bound once its binding condition is True", 60*time.Second, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	bound := time.Now()
	waitPod(t, ns, "held", "Ready", 90*time.Second, ready)
	eventually(t, env.exp, 30*time.Second, "no verdict on the running pod, the condition on /metrics", func(m cluster.Metrics) error {
		if err := none(m, "dra_pod_blocked", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		cond := map[string]string{"namespace": ns, "claim": claim.Name, "driver": node.Driver, "pool": env.node.Name, "device": device, "condition": "BindingConditions"}
		for status, want := range map[string]float64{"true": 1, "false": 0, "unknown": 0} {
			cond["status"] = status
			if err := one(m, "dra_claim_device_condition", cond, want); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("the scheduler held %s at least %s for its binding condition, and bound it to %s %s after the condition turned True",
		p.Name, released.Sub(held).Round(time.Millisecond), p.Spec.NodeName, bound.Sub(released).Round(time.Millisecond))
}
