package classify_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	var m classify.Memo
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

// TestMemoGatesEvaluateOnlyWhatChanged checks that the memo's gates equal a
// fresh memo's, and that a gate is evaluated again (a new pointer) only
// when what it reads changed: its pod's records or verdict, or the devices;
// not when the verdicts are walked again and say the same. A deleted pod's
// entry goes.
func TestMemoGatesEvaluateOnlyWhatChanged(t *testing.T) {
	objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0"))}
	var pods []*corev1.Pod
	for i := range 3 {
		p := WithClaimStatus(WithTemplateClaim(Pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-p-%d", i)), "gpu", "tmpl"), "gpu", fmt.Sprintf("c-%d", i))
		if i == 2 {
			p.Labels = map[string]string{"control": "true"}
		}
		pods = append(pods, p)
		objs = append(objs, p, OwnedBy(Claim(fmt.Sprintf("c-%d", i), fmt.Sprintf("uid-c-%d", i), Request("gpu", GPUClassName)), p, "gpu"))
	}
	ready := Ready(Running(Bound(WithClaimStatus(WithTemplateClaim(Pod("ready", "uid-ready"), "gpu", "tmpl"), "gpu", "c-ready"), "node-1")))
	pods = append(pods, ready)
	readyClaim := func() *resourceapi.ResourceClaim {
		return OwnedBy(Claim("c-ready", "uid-c-ready", Request("gpu", GPUClassName)), ready, "gpu")
	}
	objs = append(objs, ready, ReservedFor(Allocated(readyClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), ready))
	ix := Build(t, index.Config{}, objs...)
	isControl := func(p *index.Pod) bool { return p.Obj.Labels["control"] == "true" }
	m := classify.NewMemo(isControl)
	last := map[string]*classify.PodGate{}
	check := func(what string, changed ...string) {
		t.Helper()
		s := ix.Snapshot()
		got, want := m.Gates(s), classify.NewMemo(isControl).Gates(s)
		if len(got) != len(want) {
			t.Fatalf("%s: %d gates, a fresh memo %d", what, len(got), len(want))
		}
		now := map[string]*classify.PodGate{}
		var moved []string
		for i, g := range got {
			if !reflect.DeepEqual(*g, *want[i]) {
				t.Errorf("%s: kept gate %+v, fresh %+v", what, *g, *want[i])
			}
			name := g.Pod.Key.Name
			now[name] = g
			if last[name] != g {
				moved = append(moved, name)
			}
		}
		slices.Sort(moved)
		if fmt.Sprint(moved) != fmt.Sprint(changed) {
			t.Errorf("%s: gates evaluated again %v, want %v", what, moved, changed)
		}
		last = now
	}
	check("first call", "p-0", "p-1", "p-2", "ready")
	if g := last["p-2"]; g == nil || g.Control == nil {
		t.Fatalf("p-2 is no negative control: %+v", g)
	}
	if g := last["ready"]; g == nil || !g.API.Pass {
		t.Fatalf("the ready pod's api gate does not pass: %+v", g)
	}
	check("nothing changed")
	Upsert(t, ix, Event("e-1", pods[1], "FailedScheduling", "0/1 nodes are available", time.Unix(1e9, 0)), true)
	check("an event about one pod", "p-1")
	// The driver writes its device status on the ready pod's claim: no
	// change of placement, so no gate moves (the verdicts walk again). A
	// change of placement of p-0's claim after it moves p-0's gate only:
	// the ready pod's claim is not among the claims changed since, though
	// its gate was made with the claim's record before the status.
	allocated := ReservedFor(Allocated(readyClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), ready)
	withStatus := allocated.DeepCopy()
	withStatus.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: Driver, Pool: "node-1", Device: "gpu-0",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.NewTime(T0)}}}}
	Upsert(t, ix, withStatus, true)
	check("a driver's device status on the ready pod's claim")
	c0 := OwnedBy(Claim("c-0", "uid-c-0", Request("gpu", GPUClassName)), pods[0], "gpu")
	c0.Generation = 2
	Upsert(t, ix, c0, true)
	check("a change of placement of p-0's claim", "p-0")
	before := m.Walks()
	Upsert(t, ix, Node("node-2", 0), true)
	check("a new node: the verdicts say the same")
	if m.Walks() == before {
		t.Error("a new node walked no verdict again; the case no longer covers a walk that says the same")
	}
	// The ready pod's claim lets its device go: the others' verdicts turn
	// from capacity_exhausted to unallocated, though their own records
	// did not change.
	Upsert(t, ix, readyClaim(), true)
	check("another pod's claim released", "p-0", "p-1", "p-2", "ready")
	Upsert(t, ix, Slice("node-2", "node-2", 1, GPUDevice("gpu-0", "GPU-2")), true)
	check("a new slice (the devices)", "p-0", "p-1", "p-2", "ready")
	entries := m.Entries()
	if err := ix.Delete(pods[0]); err != nil {
		t.Fatal(err)
	}
	check("a pod deleted")
	if n := m.Entries(); n != entries-1 {
		t.Errorf("after a pod's deletion the memo holds %d entries, want %d", n, entries-1)
	}
}
