package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// addSlicesNode adds a Ready node without GPUs and publishes the slices
// for it; the test's end removes both.
func addSlicesNode(t *testing.T, name string, slices ...*resourceapi.ResourceSlice) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.AddNode(ctx, env.cp.Client, cluster.GPUNode{Name: name}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range slices {
			_ = env.cp.Client.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		}
		_ = cluster.RemoveNode(context.Background(), env.cp.Client, name)
	})
	for _, s := range slices {
		if _, err := env.cp.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server rejects slice %s: %v", s.Name, err)
		}
	}
}

func createTemplate(t *testing.T, tmpl *resourceapi.ResourceClaimTemplate) {
	t.Helper()
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func classFree(class, node string, v float64) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error {
		return one(m, "dra_device_class_devices", map[string]string{"device_class": class, "node": node, "state": "free"}, v)
	}
}

func all(checks ...func(cluster.Metrics) error) func(cluster.Metrics) error {
	return func(m cluster.Metrics) error {
		for _, c := range checks {
			if err := c(m); err != nil {
				return err
			}
		}
		return nil
	}
}

// exhausted waits for the scheduler to give up on the pod and the exporter
// to call it capacity_exhausted, and for explain to give the evidence.
func exhausted(t *testing.T, ns, pod, evidence string) {
	t.Helper()
	unschedulable(t, ns, pod)
	eventually(t, waitMetric, pod+" capacity_exhausted", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", blockedLabels(ns, pod, "scheduler", "capacity_exhausted"), 1)
	})
	if out := explain(t, ns+"/"+pod, "reason=capacity_exhausted"); !strings.Contains(out, evidence) {
		t.Errorf("explain %s/%s does not say %q:\n%s", ns, pod, evidence, out)
	}
}

// TestPartitionableDevices (KEP-4815, beta and on by default in 1.37: no
// feature gate): a node publishes a partitionable A100 as the API requires
// (a counter slice and a device slice, which the API server validates);
// the real scheduler allocates a 3g.20gb placement; the whole GPU and the
// overlapping 4g.20gb stop being free, and a pod asking for the whole GPU
// reads capacity_exhausted.
func TestPartitionableDevices(t *testing.T) {
	requireFeature(t, cluster.FeaturePartitionableDevices)
	const node = "part-node-1"
	addSlicesNode(t, node, nvidia.PartitionableSlices(node, 1, "GPU-e2e-a100-0")...)
	ns := namespace(t, "e2e-partitionable")
	// Nothing allocated: the whole GPU, and two placements together.
	eventually(t, waitMetric, "partitionable GPU published", all(classFree(cluster.GPUClass, node, 1), classFree(cluster.MIGClass, node, 2)))

	createTemplate(t, cluster.ClaimTemplate(ns, "mig-3g", cluster.MIGClass, "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"))
	createPod(t, cluster.PodWithTemplate(ns, "detector-0", "mig-3g"))
	if p := scheduled(t, ns, "detector-0"); p.Spec.NodeName != node {
		t.Fatalf("detector-0 scheduled to %s, want %s", p.Spec.NodeName, node)
	}
	eventually(t, waitMetric, "a placement allocated: whole GPU not free, overlapping placements count once", all(
		classFree(cluster.GPUClass, node, 0),
		classFree(cluster.MIGClass, node, 1),
		func(m cluster.Metrics) error {
			return one(m, "dra_device_class_devices", map[string]string{"device_class": cluster.MIGClass, "node": node, "state": "allocated"}, 1)
		}))

	createTemplate(t, cluster.ClaimTemplate(ns, "whole-a100", cluster.GPUClass, fmt.Sprintf("device.attributes['gpu.nvidia.com'].productName == %q", nvidia.A100)))
	createPod(t, cluster.PodWithTemplate(ns, "trainer-0", "whole-a100"))
	exhausted(t, ns, "trainer-0", "shares counters with allocated partitions")
	// Counter slices, consumesCounters and the allocation survive the
	// informers and the trimmer as they survive a file.
	liveMatchesSnapshot(t)
}

// TestConsumableCapacity (KEP-5075, beta and on by default in 1.37): a GPU
// that allows multiple allocations; the real scheduler gives two claims a
// share of its memory (shareID, consumedCapacity), the exporter exports
// what is left, and a third claim asking more reads capacity_exhausted.
func TestConsumableCapacity(t *testing.T) {
	requireFeature(t, cluster.FeatureConsumableCapacity)
	const node = "share-node-1"
	gpu := nvidia.WithMinor(nvidia.GPUDevice("gpu-0", "GPU-e2e-h200-0", nvidia.H200), 0)
	gpu.AllowMultipleAllocations = ptr.To(true)
	addSlicesNode(t, node, nvidia.Slice(node+"-"+cluster.Driver, node, 1, gpu))
	ns := namespace(t, "e2e-consumable")
	tmpl := cluster.ClaimTemplate(ns, "h200-64g", cluster.GPUClass, fmt.Sprintf("device.attributes['gpu.nvidia.com'].productName == %q", nvidia.H200))
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("64Gi")}}
	createTemplate(t, tmpl)
	for i := range 2 {
		name := fmt.Sprintf("chat-%d", i)
		createPod(t, cluster.PodWithTemplate(ns, name, "h200-64g"))
		if p := scheduled(t, ns, name); p.Spec.NodeName != node {
			t.Fatalf("%s scheduled to %s, want %s", name, p.Spec.NodeName, node)
		}
	}
	device := map[string]string{"driver": cluster.Driver, "pool": node, "node": node, "device": "gpu-0", "capacity": "memory"}
	left := resource.MustParse("13Gi") // 141Gi less two shares of 64Gi
	eventually(t, waitMetric, "two shares: 13Gi left, allocated and free", all(
		func(m cluster.Metrics) error {
			return one(m, "dra_device_capacity_remaining", device, left.AsApproximateFloat64())
		},
		classFree(cluster.GPUClass, node, 1)))

	createPod(t, cluster.PodWithTemplate(ns, "chat-2", "h200-64g"))
	exhausted(t, ns, "chat-2", "13Gi of 141Gi memory left, the request needs 64Gi")
	// shareID and consumedCapacity survive the informers and the trimmer.
	liveMatchesSnapshot(t)
}
