package agent

import (
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

func slice(name, driver, pool string) *objects.Slice {
	return &objects.Slice{ResourceSlice: resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool}},
	}}
}

// TestVanishedSlicesAreKeptForAWhile: a pool whose slices disappear (the
// kubelet wipes its node's slices when it starts) keeps its last slices
// until it publishes again or VanishedSliceTTL passes; another pool's
// current slices are untouched.
func TestVanishedSlicesAreKeptForAWhile(t *testing.T) {
	var m sliceMemory
	t0 := time.Unix(1000, 0)
	a, b := slice("a", "gpu.example.com", "node-1"), slice("b", "other.example.com", "node-1")
	if got := m.withVanished([]*objects.Slice{a, b}, t0); len(got) != 2 {
		t.Fatalf("current slices: %d", len(got))
	}
	// The kubelet restarts: a's pool is gone, b's is still there.
	got := m.withVanished([]*objects.Slice{b}, t0.Add(time.Minute))
	if len(got) != 2 || got[0] != b || got[1] != a {
		t.Fatalf("while a's pool is gone: %v", names(got))
	}
	// The driver publishes again: the new slice, not the remembered one.
	a2 := slice("a2", "gpu.example.com", "node-1")
	if got := m.withVanished([]*objects.Slice{a2, b}, t0.Add(2*time.Minute)); len(got) != 2 || got[0] != a2 {
		t.Fatalf("after republishing: %v", names(got))
	}
	// A pool gone for longer than the TTL is forgotten.
	m.withVanished([]*objects.Slice{b}, t0.Add(3*time.Minute))
	if got := m.withVanished([]*objects.Slice{b}, t0.Add(3*time.Minute+VanishedSliceTTL+time.Second)); len(got) != 1 {
		t.Fatalf("after the TTL: %v", names(got))
	}
}

func names(ss []*objects.Slice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}
