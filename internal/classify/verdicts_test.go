package classify_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testobj"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// TestVerdictsWalkOnlyWhatChanged checks that kept verdicts equal Blocked's
// and that the tree is walked again only for the pods whose own records
// changed, unless a placement changed.
func TestVerdictsWalkOnlyWhatChanged(t *testing.T) {
	objs := []any{GPUClass(), Node("node-1", 0)}
	var pods []*corev1.Pod
	for i := range 4 {
		p := WithClaimStatus(WithTemplateClaim(Pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-p-%d", i)), "gpu", "tmpl"), "gpu", fmt.Sprintf("c-%d", i))
		pods = append(pods, p)
		objs = append(objs, p, OwnedBy(Claim(fmt.Sprintf("c-%d", i), fmt.Sprintf("uid-c-%d", i), Request("gpu", "gpu.nvidia.com")), p, "gpu"))
	}
	ix := Build(t, index.Config{}, objs...)
	var m classify.Verdicts
	check := func(what string, walks int) {
		t.Helper()
		before := m.Walks()
		s := ix.Snapshot()
		got, want := m.Blocked(s), classify.Blocked(s)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: kept verdicts %+v, Blocked %+v", what, got, want)
		}
		if len(got) != len(pods) {
			t.Fatalf("%s: %d pods blocked, want %d", what, len(got), len(pods))
		}
		if n := m.Walks() - before; n != walks {
			t.Errorf("%s: %d walks, want %d", what, n, walks)
		}
	}
	check("first call", 4)
	check("nothing changed", 0)
	restarted := pods[1].DeepCopy()
	restarted.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 1}}
	Upsert(t, ix, restarted, true)
	check("one pod's container status", 1)
	Upsert(t, ix, Event("e-2", pods[2], "FailedScheduling", "0/1 nodes are available", time.Unix(1e9, 0)), true)
	check("an event about one pod", 1)
	priority := restarted.DeepCopy()
	priority.Spec.Priority = Ptr(int32(10))
	Upsert(t, ix, priority, true)
	check("a pod's priority (placement)", 4)
	Upsert(t, ix, Node("node-2", 0), true)
	check("a new node", 4)
}
