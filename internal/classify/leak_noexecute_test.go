package classify_test

import (
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
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
)

// A running pod on a device with a NoExecute taint it does not tolerate,
// past the grace period, is a leak noexecute_not_evicted; the detail names
// kubernetes#141290 only for a claim of extended resources.
func TestLeaksNotEvicted(t *testing.T) {
	const grace = 5 * time.Minute
	taint := func(effect resourceapi.DeviceTaintEffect, ago time.Duration) resourceapi.DeviceTaint {
		return resourceapi.DeviceTaint{Key: "maintenance.example.com/drain", Effect: effect, TimeAdded: Ptr(metav1.NewTime(T0.Add(-ago)))}
	}
	sliceWith := func(taints ...resourceapi.DeviceTaint) *resourceapi.ResourceSlice {
		d := gpus("gpu-0", "gpu-1")
		d[0].Taints = taints
		return Slice("node-1", "node-1", 1, d...)
	}
	running := func(name string) *corev1.Pod { return Running(Bound(Pod(name, "uid-"+name), "node-1")) }
	extPod := WithExtendedClaimStatus(running("ext"), "ext-claim")
	extClaim := ReservedFor(Allocated(ExtendedFor(Claim("ext-claim", "uid-ext-claim", Request("container-0-request-0", GPUClassName)), extPod),
		"node-1", T0.Add(-time.Hour), Result("container-0-request-0", "node-1", "gpu-0")), extPod)
	podClaim := func(p *corev1.Pod, tolerations ...resourceapi.DeviceToleration) []any {
		p = WithNamedClaim(p, "gpu", p.Name+"-claim")
		r := Request("gpu", GPUClassName)
		r.Exactly.Tolerations = tolerations
		c := ReservedFor(Allocated(Claim(p.Name+"-claim", "uid-"+p.Name+"-claim", r), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), p)
		return []any{p, c}
	}
	deleting := running("leaving")
	deleting.DeletionTimestamp = Ptr(metav1.NewTime(T0.Add(time.Minute)))
	noTime := taint(resourceapi.DeviceTaintEffectNoExecute, 0)
	noTime.TimeAdded = nil

	for _, tt := range []struct {
		name   string
		slice  *resourceapi.ResourceSlice
		objs   []any
		want   []leakRow
		detail string // in the one leak's detail
	}{
		{"extended resource, tainted an hour ago", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, time.Hour)), []any{extPod, extClaim},
			[]leakRow{{"ext-claim", "ext", "uid-ext", "node-1", "gpu-0", classify.LeakNotEvicted}}, "kubernetes#141290"},
		{"pod claim, tainted an hour ago", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, time.Hour)), podClaim(running("plain")),
			[]leakRow{{"plain-claim", "plain", "uid-plain", "node-1", "gpu-0", classify.LeakNotEvicted}}, "eviction controller of kube-controller-manager has not deleted it"},
		{"the driver's fatal XID, tainted NoSchedule: not evicted by design", sliceWith(nvidia.XIDTaint(79)), []any{extPod, extClaim}, nil, ""},
		{"within the grace period", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, 2*time.Minute)), []any{extPod, extClaim}, nil, ""},
		{"tolerated", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, time.Hour)),
			podClaim(running("tolerant"), resourceapi.DeviceToleration{Key: "maintenance.example.com/drain", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoExecute}), nil, ""},
		{"a toleration of another key does not count", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, time.Hour)),
			podClaim(running("other"), resourceapi.DeviceToleration{Key: "gpu.nvidia.com/xid", Operator: resourceapi.DeviceTolerationOpExists}),
			[]leakRow{{"other-claim", "other", "uid-other", "node-1", "gpu-0", classify.LeakNotEvicted}}, "maintenance.example.com/drain:NoExecute"},
		{"no timeAdded: no age to judge", sliceWith(noTime), []any{extPod, extClaim}, nil, ""},
		{"being deleted: the eviction is under way", sliceWith(taint(resourceapi.DeviceTaintEffectNoExecute, time.Hour)), podClaim(deleting), nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]any{GPUClass(), MIGClass(), Node("node-1", 0), tt.slice}, tt.objs...)
			s := snapshotOf(t, objs...)
			leaks := classify.Leaks(s, T0, grace)
			if got := leakRows(leaks); !slices.Equal(got, tt.want) {
				t.Fatalf("Leaks =\n%+v\nwant\n%+v", got, tt.want)
			}
			if tt.detail != "" && !strings.Contains(leaks[0].Detail, tt.detail) {
				t.Errorf("detail %q does not say %q", leaks[0].Detail, tt.detail)
			}
		})
	}
}

// LeaksChangeAt wakes the exporter when a NoExecute taint on a held device
// passes the grace period: no event marks that moment.
func TestLeaksChangeAtNotEvicted(t *testing.T) {
	const grace = 5 * time.Minute
	added := T0.Add(-2 * time.Minute)
	d := gpus("gpu-0", "gpu-1")
	d[0].Taints = []resourceapi.DeviceTaint{{Key: "maintenance.example.com/drain", Effect: resourceapi.DeviceTaintEffectNoExecute, TimeAdded: Ptr(metav1.NewTime(added))}}
	p := WithExtendedClaimStatus(Running(Bound(Pod("ext", "uid-ext"), "node-1")), "ext-claim")
	c := ReservedFor(Allocated(ExtendedFor(Claim("ext-claim", "uid-ext-claim", Request("container-0-request-0", GPUClassName)), p),
		"node-1", T0.Add(-time.Hour), Result("container-0-request-0", "node-1", "gpu-0")), p)
	s := snapshotOf(t, GPUClass(), MIGClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, d...), p, c)
	leakAppearsAt(t, s, grace, added.Add(grace), classify.LeakNotEvicted)
}

// leakAppearsAt checks that no leak is there at T0, that LeaksChangeAt
// names the moment just after want, and that one leak of the reason is
// there then.
func leakAppearsAt(t *testing.T, s *index.Snapshot, grace time.Duration, want time.Time, reason classify.LeakReason) {
	t.Helper()
	if leaks := classify.Leaks(s, T0, grace); len(leaks) != 0 {
		t.Fatalf("within the grace period: %+v", leaks)
	}
	at := classify.LeaksChangeAt(s, T0, grace)
	if at.Before(want) || at.After(want.Add(time.Second)) {
		t.Fatalf("LeaksChangeAt = %s, want just after %s", at, want)
	}
	if leaks := classify.Leaks(s, at, grace); len(leaks) != 1 || leaks[0].Reason != reason {
		t.Fatalf("at %s: %+v, want one %s", at, leaks, reason)
	}
}
