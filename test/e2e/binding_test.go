package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestBindingConditions runs KEP-5007 on the real scheduler (beta and on by
// default in 1.37: DRADeviceBindingConditions, DRAResourceClaimDeviceStatus):
// a fabric-attached GPU must report attached=True before a pod may bind.
// While the scheduler waits, the pod is waiting, not blocked, and explain
// shows the condition; when the test (playing the attach controller) sets
// it, the real scheduler binds the pod.
func TestBindingConditions(t *testing.T) {
	requireFeature(t, cluster.FeatureBindingConditions)
	ctx := context.Background()
	ns := namespace(t, "e2e-binding")
	const node, uuid = "fabric-node-1", "GPU-fabric-0000-0000-0000-000000000001"
	if err := cluster.AddNode(ctx, env.cp.Client, cluster.GPUNode{Name: node}); err != nil {
		t.Fatal(err)
	}
	dev := nvidia.GPUDevice("gpu-0", uuid, nvidia.H100)
	dev.BindsToNode = new(true)
	dev.BindingConditions = []string{"gpu.example.com/attached"}
	dev.BindingFailureConditions = []string{"gpu.example.com/attach-failed"}
	slice := nvidia.Slice(node+"-fabric", node, 1, dev)
	slice.TypeMeta = metav1.TypeMeta{}
	if _, err := env.cp.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cp.Client.ResourceV1().ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{})
		_ = cluster.RemoveNode(context.Background(), env.cp.Client, node)
	})
	tmpl := cluster.ClaimTemplate(ns, "fabric", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].uuid == '"+uuid+"'")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithTemplate(ns, "llm-fabric", "fabric"))
	t.Cleanup(func() { _ = cluster.ForceDelete(context.Background(), env.cp.Client, ns, "llm-fabric") })

	// The scheduler allocates and reserves, then waits in PreBind.
	claim := generatedClaim(t, ns, "llm-fabric")
	eventually(t, waitMetric, "claim reserved, pod not bound and not blocked", func(m cluster.Metrics) error {
		if err := one(m, "dra_claim_status", map[string]string{"namespace": ns, "claim": claim, "state": "reserved"}, 1); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
	if p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "llm-fabric", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the scheduler bound the pod before its binding condition (node %q, err %v)", p.Spec.NodeName, err)
	}
	explain(t, ns+"/llm-fabric", "binding condition gpu.example.com/attached is not set yet")
	// The slice's and the allocation's binding fields read the same live
	// and from a dump.
	dump := filepath.Join(t.TempDir(), "cluster.json")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Second) {
		diff, err := compareLiveWithSnapshot(ctx, dump)
		if err != nil {
			t.Fatal(err)
		}
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live /metrics and snapshot differ while the pod waits for its binding condition:\n%s", diff)
		}
	}

	// The attach controller reports the device attached: the pod binds.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: cluster.Driver, Pool: node, Device: "gpu-0", Conditions: []metav1.Condition{
			{Type: "gpu.example.com/attached", Status: metav1.ConditionTrue, Reason: "Attached", Message: "attached over the fabric", LastTransitionTime: metav1.Now()}}}}
		_, err = env.cp.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set the binding condition: %v", err)
	}
	err = cluster.WaitFor(ctx, 60*time.Second, "pod bound after its binding condition", func(ctx context.Context) (bool, error) {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "llm-fabric", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == node && p.Status.Phase == corev1.PodPending, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
