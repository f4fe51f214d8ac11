package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestDoubleAllocation reproduces the state of kubernetes #141471 on the
// real API server: the real scheduler allocates a GPU to a pod's claim, and
// a second claim is then allocated the same GPU behind the scheduler's back
// (the test writes its status, as the race's outcome; the scheduler itself
// never allocates a device twice). Both claims get a conflict series with
// the device and its GPU UUID; deleting the second clears them.
func TestDoubleAllocation(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-double")
	bound, claim, held := allocatedPod(t, ns, "llm-0")

	second := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm-0-gpu-v2"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation = &resourceapi.AllocationResult{
			Devices:             resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: held.Driver, Pool: held.Pool, Device: held.Device}}},
			AllocationTimestamp: &metav1.Time{Time: time.Now()},
		}
		_, err = env.cp.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("allocate %s to the held device: %v", second.Name, err)
	}

	device := map[string]string{"namespace": ns, "driver": held.Driver, "pool": held.Pool, "device": held.Device, "node": bound.Spec.NodeName,
		"gpu_uuid": cluster.GPUUUID(bound.Spec.NodeName, deviceMinor(t, held.Device))}
	eventually(t, waitMetric, "both claims on the device reported", func(m cluster.Metrics) error {
		if err := one(m, "dra_device_allocation_conflict", with(device, "claim", claim, "pod", "llm-0", "pod_uid", string(bound.UID)), 1); err != nil {
			return err
		}
		return one(m, "dra_device_allocation_conflict", with(device, "claim", second.Name, "pod", "", "pod_uid", ""), 1)
	})

	if err := env.cp.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, second.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitMetric, "conflict cleared", func(m cluster.Metrics) error {
		return none(m, "dra_device_allocation_conflict", map[string]string{"namespace": ns})
	})
}

// with returns a copy of labels with more name/value pairs.
func with(labels map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(labels)+len(kv)/2)
	for k, v := range labels {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// deviceMinor is the minor number in a simulated device name gpu-<minor>.
func deviceMinor(t *testing.T, device string) int {
	t.Helper()
	var minor int
	if _, err := fmt.Sscanf(device, "gpu-%d", &minor); err != nil {
		t.Fatalf("device %q is not gpu-<minor>: %v", device, err)
	}
	return minor
}
