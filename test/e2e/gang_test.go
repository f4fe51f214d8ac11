package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestGangWaitsForQuorum runs gang scheduling on the real scheduler
// (GenericWorkload, beta and off by default in 1.37: the harness turns it
// on, cluster.FeatureGangScheduling): a PodGroup asks for two members and only one
// exists. The scheduler holds it unbound with its claim unallocated, which
// without the group would read scheduler/unallocated; the exporter says it
// waits for its group and calls it blocked nowhere. The second member
// completes the quorum and both are scheduled.
func TestGangWaitsForQuorum(t *testing.T) {
	requireFeature(t, cluster.FeatureGangScheduling)
	ctx := context.Background()
	ns := namespace(t, "e2e-gang")
	c := env.cp.Client
	createTemplate(t, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass))
	group := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainer"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, group, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server does not serve PodGroups (scheduling.k8s.io/v1beta1, GenericWorkload): %v", err)
	}
	member := func(name string) *corev1.Pod {
		p := cluster.PodWithTemplate(ns, name, "gpu")
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group.Name)}
		return p
	}
	createPod(t, member("trainer-0"))
	claim := generatedClaim(t, ns, "trainer-0")

	// Long enough for the scheduler to have tried: the member stays unbound
	// and its claim unallocated, and the exporter never blames DRA.
	deadline := time.Now().Add(8 * time.Second)
	eventually(t, waitMetric, "trainer-0 indexed and not blocked", func(m cluster.Metrics) error {
		if len(m.Find("dra_pod_info", map[string]string{"namespace": ns, "pod": "trainer-0"})) == 0 {
			return fmt.Errorf("no dra_pod_info for trainer-0")
		}
		if err := none(m, "dra_pod_blocked", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		if time.Now().Before(deadline) {
			return fmt.Errorf("holding until %s", deadline.Format(time.TimeOnly))
		}
		return nil
	})
	p, err := c.CoreV1().Pods(ns).Get(ctx, "trainer-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || rc.Status.Allocation != nil {
		t.Fatalf("the scheduler did not hold the lone gang member: node %q, allocated %v", p.Spec.NodeName, rc.Status.Allocation != nil)
	}
	t.Logf("the scheduler on the lone member: conditions %+v", p.Status.Conditions)
	explain(t, ns+"/trainer-0", "waiting for the group, not a DRA failure")
	// spec.schedulingGroup survives the informers and the trimmer.
	liveMatchesSnapshot(t)

	createPod(t, member("trainer-1"))
	for _, name := range []string{"trainer-0", "trainer-1"} {
		scheduled(t, ns, name)
	}
}

// TestPodGroupClaim runs a PodGroup's shared claim on the real scheduler
// (DRAWorkloadResourceClaims, beta and off by default in 1.37, on in the
// harness): the claim is reserved for the PodGroup rather than for its
// pods, and once the members run it is held by both, blocked for none and
// leaked by nobody, live as from a dump.
func TestPodGroupClaim(t *testing.T) {
	requireFeature(t, cluster.FeatureGangScheduling, cluster.FeaturePodGroupClaims)
	ctx := context.Background()
	ns := namespace(t, "e2e-podgroup-claim")
	c := env.cp.Client
	// An H100: the L4s of gpu-node-3 are what the capacity tests count.
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ring-gpu"},
		Spec: cluster.ClaimSpec(cluster.GPUClass, fmt.Sprintf("device.attributes['gpu.nvidia.com'].productName == %q", nvidia.H100))}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	group := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ring"},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(shared.Name)}}}}
	if _, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, group, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a PodGroup with a claim (DRAWorkloadResourceClaims): %v", err)
	}
	// The claim is reserved for the group: it is released only once the
	// group is gone (before the namespace's cleanup deletes the claims).
	t.Cleanup(func() {
		_ = c.SchedulingV1beta1().PodGroups(ns).Delete(context.Background(), group.Name, metav1.DeleteOptions{})
	})
	members := []string{"ring-0", "ring-1"}
	for _, name := range members {
		p := cluster.PodWithClaim(ns, name, shared.Name)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group.Name)}
		createPod(t, p)
	}
	for _, name := range members {
		scheduled(t, ns, name)
		if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, shared.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Status.Allocation == nil || len(rc.Status.ReservedFor) != 1 || rc.Status.ReservedFor[0].Resource != "podgroups" {
		t.Fatalf("the scheduler did not reserve the claim for the PodGroup: %+v", rc.Status.ReservedFor)
	}
	eventually(t, waitMetric, "the group's claim held by both members, no leak, none blocked", func(m cluster.Metrics) error {
		if len(m.Find("dra_claim_allocation_info", map[string]string{"namespace": ns, "claim": shared.Name})) == 0 {
			return fmt.Errorf("no dra_claim_allocation_info for %s", shared.Name)
		}
		if err := none(m, "dra_claim_reservation_leak", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
	liveMatchesSnapshot(t)
}
