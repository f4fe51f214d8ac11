package classify_test

import (
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/classify"
)

// TestHeldHealthReadsBothResourceIDForms: the kubelet names a device in
// allocatedResourcesStatus by its first CDI device ID, and by
// driver/pool/device only when it has none (kubernetes v1.37
// pkg/kubelet/cm/dra/manager.go, buildResourceHealth). Seen on a real
// kubelet with the dra-example-driver: "k8s.gpu.example.com/gpu=common",
// a name every device of the driver shares. A CDI name that ends in a device
// name belongs to that device; one that names none belongs to the request's
// device when it has only one, and to nobody when several could have made
// it.
func TestHeldHealthReadsBothResourceIDForms(t *testing.T) {
	cases := []struct {
		name    string
		results []string // devices allocated to the claim's request "gpu"
		reports map[string]corev1.ResourceHealthStatus
		want    map[string]string // device -> health of the held series
	}{
		{"driver/pool/device", []string{"gpu-0"},
			map[string]corev1.ResourceHealthStatus{"gpu.nvidia.com/node-1/gpu-0": corev1.ResourceHealthStatusUnhealthy},
			map[string]string{"gpu-0": "unhealthy"}},
		{"a CDI name shared by every device, one device", []string{"gpu-1"},
			map[string]corev1.ResourceHealthStatus{"k8s.gpu.nvidia.com/gpu=common": corev1.ResourceHealthStatusUnknown},
			map[string]string{"gpu-1": "unknown"}},
		{"a CDI name shared by every device, two devices", []string{"gpu-0", "gpu-1"},
			map[string]corev1.ResourceHealthStatus{"k8s.gpu.nvidia.com/gpu=common": corev1.ResourceHealthStatusUnhealthy},
			map[string]string{}},
		{"per-claim CDI names ending in the device", []string{"gpu-0", "gpu-1"},
			map[string]corev1.ResourceHealthStatus{
				"k8s.gpu.nvidia.com/claim=uid-claim-gpu-0": corev1.ResourceHealthStatusHealthy,
				"k8s.gpu.nvidia.com/claim=uid-claim-gpu-1": corev1.ResourceHealthStatusUnhealthy,
			},
			map[string]string{"gpu-0": "healthy", "gpu-1": "unhealthy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var results []resourceapi.DeviceRequestAllocationResult
			for _, d := range tc.results {
				results = append(results, Result("gpu", "node-1", d))
			}
			claim := Allocated(genClaim(Request("gpu", "gpu.nvidia.com")), "node-1", T0.Add(-time.Minute), results...)
			pod := Running(Bound(statusPod(), "node-1"))
			claim = ReservedFor(claim, pod)
			var health []corev1.ResourceHealth
			for id, h := range tc.reports {
				health = append(health, corev1.ResourceHealth{ResourceID: corev1.ResourceID(id), Health: h})
			}
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "server",
				AllocatedResourcesStatus: []corev1.ResourceStatus{{Name: "claim:gpu", Resources: health}}}}
			s := snapshotOf(t, world(pod, claim)...)
			got := map[string]string{}
			for _, h := range classify.HeldWithSignal(s) {
				if h.Health != "" {
					got[h.Device.Key.Device] = h.Health
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("health %v, want %v", got, tc.want)
			}
			for d, h := range tc.want {
				if got[d] != h {
					t.Errorf("%s: health %q, want %q (all: %v)", d, got[d], h, got)
				}
			}
		})
	}
}
