package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestClassSelectorErrorRulesOutANode: a device published without the
// attribute a DeviceClass's selector reads makes the selector fail at
// runtime on that device. The real scheduler (1.37.2) turns the error into
// an error of the whole scheduling attempt (PodScheduled=False, reason
// SchedulerError, the CEL error as its message), so the pod stays pending.
// With the only other node full the exporter says capacity_exhausted,
// although a device is free on the node with the error; explain names the
// class, the device, its node and the CEL error, and
// dra_device_class_selector_error_info the device. Once the other node has
// a free device the scheduler still gives up on the error: the pod reads
// unallocated, and explain says why. The class and its driver are the
// test's own, so that the error cannot reach other tests' pods.
func TestClassSelectorErrorRulesOutANode(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const driver = "cel.example.com"
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-cel.example.com"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: "device.driver == 'cel.example.com' && device.attributes['cel.example.com'].type == 'gpu'"}}}},
	}
	if _, err := env.cp.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cp.Client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	typed := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}}}
	}
	slice := func(node string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: devices},
		}
	}
	ns := namespace(t, "e2e-cel-error")
	createTemplate(t, cluster.ClaimTemplate(ns, "cel", class.Name))

	// node-a's one device goes to a holder before node-b exists: a CEL
	// error on any node keeps a pod of the class from scheduling.
	addSlicesNode(t, "cel-node-a", slice("cel-node-a", typed("dev-0")))
	createPod(t, cluster.PodWithTemplate(ns, "holder", "cel"))
	if p := scheduled(t, ns, "holder"); p.Spec.NodeName != "cel-node-a" {
		t.Fatalf("holder scheduled to %s, want cel-node-a", p.Spec.NodeName)
	}
	// node-b publishes dev-0 without the type attribute, dev-1 with it.
	addSlicesNode(t, "cel-node-b", slice("cel-node-b", resourceapi.Device{Name: "dev-0"}, typed("dev-1")))

	createPod(t, cluster.PodWithTemplate(ns, "trainer", "cel"))
	unschedulable(t, ns, "trainer")
	if msg := failedScheduling(t, ns, "trainer"); !strings.Contains(msg, "CEL runtime error") {
		t.Errorf("the scheduler's FailedScheduling does not name the CEL error: %q", msg)
	} else {
		t.Logf("the scheduler: %s", msg)
	}
	errorInfo := map[string]string{"device_class": class.Name, "driver": driver, "pool": "cel-node-b", "device": "dev-0", "node": "cel-node-b"}
	eventually(t, waitMetric, "trainer capacity_exhausted, the untyped device named", all(
		func(m cluster.Metrics) error {
			return one(m, "dra_pod_blocked", blockedLabels(ns, "trainer", "scheduler", "capacity_exhausted"), 1)
		},
		func(m cluster.Metrics) error { return one(m, "dra_device_class_selector_error_info", errorInfo, 1) },
		func(m cluster.Metrics) error {
			return one(m, "dra_device_class_selector_errors", map[string]string{"device_class": class.Name}, 1)
		}))
	out := explain(t, ns+"/trainer", "reason=capacity_exhausted")
	for _, want := range []string{
		"the selectors of DeviceClass e2e-cel.example.com fail to evaluate (CEL runtime error) on 1 devices, on cel-node-b: a node that reaches one cannot be used",
		"device cel.example.com/cel-node-b/dev-0 on node cel-node-b: DeviceClass e2e-cel.example.com selector #0: CEL runtime error: no such key: type",
		"1 of the 1 free matching devices are on those nodes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain does not say %q:\n%s", want, out)
		}
	}
	liveMatchesSnapshot(t)

	// node-a's device freed: the scheduler still meets the error on
	// node-b and gives up the whole attempt, so the pod stays pending;
	// the exporter calls it unallocated (a device is free on a node
	// without errors) and says why the scheduler does not use it.
	freed := time.Now().Truncate(time.Second)
	if err := cluster.ForceDelete(ctx, env.cp.Client, ns, "holder"); err != nil {
		t.Fatal(err)
	}
	err := cluster.WaitFor(ctx, 60*time.Second, "the scheduler's next attempt at trainer", func(ctx context.Context) (bool, error) {
		events, err := env.cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.Reason != "FailedScheduling" || e.Regarding.Name != "trainer" {
				continue
			}
			if !e.EventTime.Time.Before(freed) || (e.Series != nil && !e.Series.LastObservedTime.Time.Before(freed)) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("trainer bound to %q (err %v) although the class's selector fails on cel-node-b: the premise of the evidence is gone", p.Spec.NodeName, err)
	}
	eventually(t, waitMetric, "trainer unallocated once node-a is free", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", blockedLabels(ns, "trainer", "scheduler", "unallocated"), 1)
	})
	out = explain(t, ns+"/trainer", "reason=unallocated")
	for _, want := range []string{"but the scheduler gives up on the errors above", "CEL runtime error: no such key: type"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain does not say %q:\n%s", want, out)
		}
	}

	// The runbook's stopgap: cordoned, node-b is filtered out before the
	// DynamicResources filter meets the error, and trainer schedules.
	if _, err := env.cp.Client.CoreV1().Nodes().Patch(ctx, "cel-node-b", types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := scheduled(t, ns, "trainer"); p.Spec.NodeName != "cel-node-a" {
		t.Errorf("trainer scheduled to %s, want cel-node-a", p.Spec.NodeName)
	}
}

// failedScheduling returns the message of the scheduler's latest
// FailedScheduling event about the pod (events.k8s.io, as the scheduler
// writes them).
func failedScheduling(t *testing.T, ns, pod string) string {
	t.Helper()
	var msg string
	err := cluster.WaitFor(context.Background(), waitMetric, "FailedScheduling of "+ns+"/"+pod, func(ctx context.Context) (bool, error) {
		events, err := env.cp.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.Reason == "FailedScheduling" && e.Regarding.Kind == "Pod" && e.Regarding.Name == pod {
				msg = e.Note
			}
		}
		return msg != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}
