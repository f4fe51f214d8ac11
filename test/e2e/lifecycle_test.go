package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// releaseCounts reads how many releases the exporter has timed per stage,
// once the count has stopped moving (earlier tests' cleanups settle).
func settledReleaseCounts(t *testing.T) (unreserved, deallocated float64) {
	t.Helper()
	read := func() (float64, float64) {
		m, err := env.exp.Scrape()
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("dra_claim_release_duration_seconds", map[string]string{"device_class": cluster.GPUClass, "stage": "unreserved"}),
			m.Sum("dra_claim_release_duration_seconds", map[string]string{"device_class": cluster.GPUClass, "stage": "deallocated"})
	}
	// The tests before this one leave claims that their cleanup deletes,
	// and each of those releases is timed too; on a loaded machine the
	// controller-manager takes more than a second between a claim's steps,
	// so the counts settle only once four reads a second apart agree.
	u, d := read()
	same := 0
	for i := 0; i < 60 && same < 3; i++ {
		time.Sleep(time.Second)
		u2, d2 := read()
		if u2 == u && d2 == d {
			same++
			continue
		}
		u, d, same = u2, d2, 0
	}
	if same == 3 {
		return u, d
	}
	t.Fatal("release counts never settled")
	return 0, 0
}

// Twenty create/delete cycles of a Deployment-like workload: each replica
// gets a generated claim, runs, and is deleted; each release is timed, and
// nothing leaks.
func TestReleaseCycles(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-cycles")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u0, d0 := settledReleaseCounts(t)
	const cycles = 20
	start := time.Now()
	for i := 0; i < cycles; i++ {
		name := fmt.Sprintf("llm-replica-%02d", i)
		createPod(t, cluster.PodWithTemplate(ns, name, "gpu"))
		scheduled(t, ns, name)
		claim := generatedClaim(t, ns, name)
		if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
			t.Fatal(err)
		}
		if err := cluster.ForceDelete(ctx, env.cp.Client, ns, name); err != nil {
			t.Fatal(err)
		}
		err := cluster.WaitFor(ctx, 30*time.Second, "claim "+claim+" deleted", func(ctx context.Context) (bool, error) {
			_, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d cycles in %s", cycles, time.Since(start).Round(time.Millisecond))
	eventually(t, waitMetric, "20 releases timed, no leak", func(m cluster.Metrics) error {
		u := m.Sum("dra_claim_release_duration_seconds", map[string]string{"device_class": cluster.GPUClass, "stage": "unreserved"})
		d := m.Sum("dra_claim_release_duration_seconds", map[string]string{"device_class": cluster.GPUClass, "stage": "deallocated"})
		if u-u0 != cycles || d-d0 != cycles {
			return fmt.Errorf("releases timed: unreserved %v, deallocated %v; want %d each", u-u0, d-d0, cycles)
		}
		if err := none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		return none(m, "dra_claim_info", map[string]string{"namespace": ns})
	})
}

// With the controller-manager down nobody cleans up: a force-deleted pod
// stays in its claim's reservedFor, and a reservation names a pod that never
// existed. Both leak series appear, with the node and device, and clear
// once the controller-manager is back.
func TestLeaksClearWhenControllerReturns(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-leak")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, cluster.PodWithTemplate(ns, "llm-doomed", "gpu"))
	bound := scheduled(t, ns, "llm-doomed")
	claim := generatedClaim(t, ns, "llm-doomed")
	if err := env.kubelet.SetRunning(ctx, ns, "llm-doomed", true); err != nil {
		t.Fatal(err)
	}
	c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || c.Status.Allocation == nil {
		t.Fatalf("claim %s not allocated: %v", claim, err)
	}
	device := c.Status.Allocation.Devices.Results[0].Device

	// A named claim that the test allocates by hand, as a broken
	// controller would, reserved for a pod that never existed.
	named := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan-gpu"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, named, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env.cp.StopControllerManager()
	restarted := false
	defer func() {
		if !restarted {
			if err := env.cp.StartControllerManager(ctx); err != nil {
				t.Errorf("restart controller-manager: %v", err)
			}
		}
	}()
	if err := cluster.ForceDelete(ctx, env.cp.Client, ns, "llm-doomed"); err != nil {
		t.Fatal(err)
	}
	ghost := types.UID("00000000-0000-4000-8000-00000000dead")
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, "orphan-gpu", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: cluster.Driver, Pool: "gpu-node-3", Device: "gpu-1"},
			}},
			AllocationTimestamp: &metav1.Time{Time: time.Now()},
		}
		cur.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "ghost-0", UID: ghost}}
		_, err = env.cp.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("reserve orphan-gpu for a missing pod: %v", err)
	}

	eventually(t, waitMetric, "both leaks reported", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": claim, "pod": "llm-doomed",
			"pod_uid": string(pod.UID), "node": bound.Spec.NodeName, "device": device, "reason": "pod_missing"}, 1); err != nil {
			return err
		}
		return one(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns, "claim": "orphan-gpu", "pod": "ghost-0",
			"pod_uid": string(ghost), "node": "gpu-node-3", "device": "gpu-1", "reason": "pod_missing"}, 1)
	})

	if err := env.cp.StartControllerManager(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, 60*time.Second, "leaks cleared by the controller-manager", func(m cluster.Metrics) error {
		return none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns})
	})
}
