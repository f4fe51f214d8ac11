package classify_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// leakStrings renders leaks in a stable order, the claim by key.
func leakStrings(ls []classify.Leak) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%s %s %s %s %s %s: %s", l.Claim.Key, l.Pod, l.PodUID, l.Node, l.Device, l.Reason, l.Detail))
	}
	slices.Sort(out)
	return out
}

// TestLeaksAskOnlyWhatChanged checks that the memo's leaks and the time
// they hold to equal Leaks' and LeaksChangeAt's at every step, and that
// after a change of claims and pods only the claims that changed, or that
// name a pod that changed, are asked again.
func TestLeaksAskOnlyWhatChanged(t *testing.T) {
	const grace = time.Minute
	now := time.Unix(2e9, 0)
	t0 := now.Add(-time.Hour)
	objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1,
		GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1"), GPUDevice("gpu-2", "GPU-2"), GPUDevice("gpu-3", "GPU-3"))}
	var pods []*corev1.Pod
	var claims []*resourceapi.ResourceClaim
	for i := range 4 {
		p := Ready(Bound(WithClaimStatus(WithTemplateClaim(Pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-p-%d", i)), "gpu", "tmpl"), "gpu", fmt.Sprintf("c-%d", i)), "node-1"))
		c := ReservedFor(Allocated(OwnedBy(Claim(fmt.Sprintf("c-%d", i), fmt.Sprintf("uid-c-%d", i), Request("gpu", "gpu.nvidia.com")), p, "gpu"),
			"node-1", t0, Result("gpu", "node-1", fmt.Sprintf("gpu-%d", i))), p)
		pods, claims = append(pods, p), append(claims, c)
		objs = append(objs, p, c)
	}
	ix := Build(t, index.Config{Now: func() time.Time { return now }}, objs...)
	var m classify.Memo
	check := func(what string, asks int, reasons ...classify.LeakReason) {
		t.Helper()
		before := m.LeakAsks()
		s := ix.Snapshot()
		got, want := m.Leaks(s, now, grace), classify.Leaks(s, now, grace)
		if g, w := leakStrings(got), leakStrings(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: kept leaks\n  %s\nLeaks\n  %s", what, strings.Join(g, "\n  "), strings.Join(w, "\n  "))
		}
		var gotReasons []classify.LeakReason
		for _, l := range got {
			gotReasons = append(gotReasons, l.Reason)
		}
		slices.Sort(gotReasons)
		slices.Sort(reasons)
		if !slices.Equal(gotReasons, reasons) {
			t.Errorf("%s: leak reasons %v, want %v", what, gotReasons, reasons)
		}
		if got, want := m.LeaksStableUntil(s, now, grace), classify.LeaksChangeAt(s, now, grace); !got.Equal(want) {
			t.Errorf("%s: kept leaks hold until %s, LeaksChangeAt %s", what, got, want)
		}
		if n := m.LeakAsks() - before; n != asks {
			t.Errorf("%s: %d claims asked, want %d", what, n, asks)
		}
	}
	check("first call", 4)
	check("nothing changed", 0)

	notReady := Running(pods[1])
	Upsert(t, ix, notReady, true)
	check("a pod's readiness (no placement)", 0)
	Upsert(t, ix, Finished(notReady, corev1.PodSucceeded), true)
	check("a pod finished", 1, classify.LeakPodFinished)

	Del(t, ix, pods[0])
	check("a pod deleted", 1, classify.LeakPodFinished, classify.LeakPodMissing)
	recreated := pods[0].DeepCopy()
	recreated.UID = "uid-p-0-again"
	Upsert(t, ix, recreated, true)
	check("a pod recreated under its name", 1, classify.LeakPodFinished, classify.LeakPodRecreated)

	// A claim reserved for a pod that never existed, then a pod of that name.
	ghost := Pod("p-9", "uid-p-9")
	stale := ReservedFor(Allocated(Claim("c-9", "uid-c-9", Request("gpu", "gpu.nvidia.com")), "node-1", t0, Result("gpu", "node-1", "gpu-3")), ghost)
	Upsert(t, ix, stale, true)
	check("a claim reserved for a missing pod", 1, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodMissing)
	Upsert(t, ix, WithTemplateClaim(Pod("p-9", "uid-p-9-other"), "gpu", "tmpl"), true)
	check("a pod of the missing pod's name", 1, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodRecreated)

	// Unreserved now: within the grace period, a time to wake at.
	Upsert(t, ix, ReservedFor(claims[2]), true)
	check("a claim unreserved", 1, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodRecreated)
	now = now.Add(2 * grace)
	check("its grace period passed", 5, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodRecreated, classify.LeakUnreserved)

	Del(t, ix, stale)
	check("a leaked claim deleted", 0, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakUnreserved)
	Upsert(t, ix, Deallocated(claims[2]), true)
	check("a claim deallocated", 1, classify.LeakPodFinished, classify.LeakPodRecreated)

	// A pod in deletion with no container running: stuck once its deadline
	// passed by the grace period.
	deleting := Finished(pods[3], corev1.PodRunning)
	deleting.DeletionTimestamp = Ptr(metav1.NewTime(now.Add(-grace / 2)))
	Upsert(t, ix, deleting, true)
	check("a pod in deletion, stopped", 1, classify.LeakPodFinished, classify.LeakPodRecreated)
	now = now.Add(grace)
	check("past its deadline by the grace period", 4, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodStuckTerminating)

	Upsert(t, ix, Slice("node-1", "node-1", 2, GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1"), GPUDevice("gpu-2", "GPU-2"), GPUDevice("gpu-3", "GPU-3")), true)
	check("a slice changed (every claim)", 4, classify.LeakPodFinished, classify.LeakPodRecreated, classify.LeakPodStuckTerminating)
}
