package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestNoExecuteEvictsExtendedResourcePods checks kubernetes#141290 (the
// device taint eviction controller skips pods that got their device as an
// extended resource, reported on 1.36.1, fixed for 1.38) on the harness's
// real kube-controller-manager: a DeviceTaintRule puts a NoExecute taint on
// the device of a pod with a claim of its own and on the device of a pod
// that got nvidia.com/gpu through the extended-resource mapping. On v1.37.2
// both are evicted, so the exporter must report no noexecute_not_evicted
// leak for either: the leak is for a controller that does skip one, which
// only the golden scenario noexecute-not-evicted shows.
func TestNoExecuteEvictsExtendedResourcePods(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	c := env.cp.Client
	ns := namespace(t, "e2e-noexec")

	ext := cluster.PodWithGPUs(ns, "llm-ext", 1)
	ext.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "gpu-node-2"}
	ext = createPod(t, ext)
	var extClaim string
	if err := cluster.WaitFor(ctx, 30*time.Second, "the extended-resource claim", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "llm-ext", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" || p.Status.ExtendedResourceClaimStatus == nil {
			return false, err
		}
		extClaim = p.Status.ExtendedResourceClaimStatus.ResourceClaimName
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	claim, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, extClaim, metav1.GetOptions{})
	if err != nil || claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: %v %+v", extClaim, err, claim.Status)
	}
	extDevice := claim.Status.Allocation.Devices.Results[0]
	plain, plainClaim, plainDevice := allocatedPod(t, ns, "llm-0")
	for _, name := range []string{"llm-ext", "llm-0"} {
		if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
			t.Fatal(err)
		}
	}

	for i, r := range []resourceapi.DeviceRequestAllocationResult{extDevice, plainDevice} {
		rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: ns + []string{"-ext", "-plain"}[i]}, Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: &r.Driver, Pool: &r.Pool, Device: &r.Device},
			Taint:          resourceapi.DeviceTaint{Key: "maintenance.example.com/drain", Effect: resourceapi.DeviceTaintEffectNoExecute},
		}}
		if _, err := c.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
		})
	}

	// Both pods are evicted, and no leak names either on the way.
	for _, pod := range []*corev1.Pod{plain, ext} {
		if err := cluster.WaitFor(ctx, 60*time.Second, "the eviction of "+pod.Name, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && (p.UID != pod.UID || p.DeletionTimestamp != nil), err
		}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitMetric, "no noexecute_not_evicted", func(m cluster.Metrics) error {
		if err := none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": extClaim, "reason": "noexecute_not_evicted"}); err != nil {
			return err
		}
		return none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": plainClaim, "reason": "noexecute_not_evicted"})
	})
}
