package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestDeviceHealthAndTaintRules: a DeviceTaintRule (GA in 1.37) taints the
// GPU a running pod holds, and the kubelet (the test) reports the device
// Unhealthy in the pod's allocatedResourcesStatus. The exporter, under its
// read-only role, watches the rule and attributes both to the pod, claim
// and device; the tainted device is no longer free.
func TestDeviceHealthAndTaintRules(t *testing.T) {
	requireFeature(t, cluster.FeatureDeviceTaints, cluster.FeatureDeviceTaintRules)
	ctx := context.Background()
	ns := namespace(t, "e2e-health")
	bound, claim, r := allocatedPod(t, ns, "llm-0")
	if err := env.kubelet.SetRunning(ctx, ns, "llm-0", true); err != nil {
		t.Fatal(err)
	}

	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: ns + "-maintenance"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: &r.Driver, Pool: &r.Pool, Device: &r.Device},
		Taint:          nvidia.XIDTaint(79), // the driver's own taint for a fatal XID, here from a rule
	}}
	if _, err := env.cp.Client.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cp.Client.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
	})
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "llm-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.ContainerStatuses[0].AllocatedResourcesStatus = []corev1.ResourceStatus{{Name: "claim:gpu", Resources: []corev1.ResourceHealth{
			{ResourceID: corev1.ResourceID(r.Driver + "/" + r.Pool + "/" + r.Device), Health: corev1.ResourceHealthStatusUnhealthy}}}}
		_, err = env.cp.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("report the device unhealthy: %v", err)
	}

	held := map[string]string{"namespace": ns, "pod": "llm-0", "pod_uid": string(bound.UID), "claim": claim,
		"driver": r.Driver, "pool": r.Pool, "device": r.Device, "node": bound.Spec.NodeName}
	eventually(t, waitMetric, "the held GPU's taint rule and health", func(m cluster.Metrics) error {
		if err := one(m, "dra_allocated_device_taint", with(held, "taint", "gpu.nvidia.com/xid", "effect", "NoSchedule", "rule", rule.Name), 1); err != nil {
			return err
		}
		return one(m, "dra_allocated_device_health", with(held, "health", "unhealthy"), 1)
	})
	explain(t, ns+"/llm-0", "(DeviceTaintRule "+rule.Name+")")
	// The rule, the slice taint fields and allocatedResourcesStatus read
	// the same live and from a dump.
	liveMatchesSnapshot(t)

	if err := env.cp.Client.ResourceV1().DeviceTaintRules().Delete(ctx, rule.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitMetric, "the rule's taint gone", func(m cluster.Metrics) error {
		return none(m, "dra_allocated_device_taint", map[string]string{"namespace": ns})
	})
}
