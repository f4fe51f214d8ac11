package e2e

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestNoExecuteNotEvictedExtendedResource (kubernetes#141290, fixed in
// 1.38): a DeviceTaintRule puts a NoExecute taint on the device of a pod
// with a claim of its own and on the device of a pod that got its GPU as
// the extended resource nvidia.com/gpu. The real kube-controller-manager's
// device taint eviction controller evicts the first; the exporter names
// the second, which runs on, as leak noexecute_not_evicted once the taint
// is older than the grace period (3s here).
func TestNoExecuteNotEvictedExtendedResource(t *testing.T) {
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

	// The pod with a claim of its own is evicted: the controller runs.
	if err := cluster.WaitFor(ctx, 60*time.Second, "the eviction of llm-0", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "llm-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && (p.UID != plain.UID || p.DeletionTimestamp != nil), err
	}); err != nil {
		t.Fatal(err)
	}
	// The extended-resource pod is not, and the exporter says so.
	eventually(t, waitMetric, "noexecute_not_evicted for llm-ext", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": extClaim, "pod": "llm-ext",
			"pod_uid": string(ext.UID), "device": extDevice.Device, "reason": "noexecute_not_evicted"}, 1); err != nil {
			return err
		}
		return none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": plainClaim, "reason": "noexecute_not_evicted"})
	})
	p, err := c.CoreV1().Pods(ns).Get(ctx, "llm-ext", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("llm-ext: %v, deletionTimestamp %v: the eviction controller evicted it (kubernetes#141290 fixed in this version?)", err, p.DeletionTimestamp)
	}
	explain(t, ns+"/llm-ext", "kubernetes#141290")
}
