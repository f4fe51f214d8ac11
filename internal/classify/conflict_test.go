package classify_test

import (
	"strings"
	"time"

	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// Two claims holding one device is a conflict only when the device cannot be
// shared and both really hold it.
func TestDoubleAllocations(t *testing.T) {
	oldPod, newPod := Pod("llm-0", "uid-old"), Pod("llm-0", "uid-new")
	gpu0 := Result("gpu", "node-1", "gpu-0")
	shareable := GPUDevice("gpu-0", "GPU-0")
	shareable.AllowMultipleAllocations = Ptr(true)
	admin := Allocated(Claim("dcgm", "uid-dcgm", Request("gpu", GPUClassName)), "node-1", T0, gpu0)
	admin.Status.Allocation.Devices.Results[0].AdminAccess = Ptr(true)
	twice := Allocated(Claim("twice", "uid-twice", Request("gpu", GPUClassName)), "node-1", T0, gpu0, gpu0)

	oldClaim := ReservedFor(Allocated(Claim("old", "uid-claim-old", Request("gpu", GPUClassName)), "node-1", T0, gpu0), oldPod)
	newClaim := ReservedFor(Allocated(Claim("new", "uid-claim-new", Request("gpu", GPUClassName)), "node-1", T0, gpu0), newPod)
	idle := Allocated(Claim("idle", "uid-idle", Request("gpu", GPUClassName)), "node-1", T0, gpu0)

	tests := []struct {
		name string
		objs []any
		want []string // claim/pod of each conflict series
	}{
		{"two claims, each reserved for a pod", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, oldClaim, newClaim},
			[]string{"old/llm-0", "new/llm-0"}},
		{"a claim reserving nobody still holds the device", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, newClaim, idle},
			[]string{"idle/", "new/llm-0"}},
		{"a shareable device", []any{GPUClass(), Slice("node-1", "node-1", 1, shareable), newPod, oldClaim, newClaim}, nil},
		{"an admin-access claim does not hold the device", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), newPod, newClaim, admin}, nil},
		{"one claim naming the device twice", []any{GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), twice}, nil},
		{"a device no slice publishes", []any{GPUClass(), newPod, oldClaim, newClaim}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, c := range classify.DoubleAllocations(snapshotOf(t, tt.objs...)) {
				got = append(got, c.Claim.Key.Name+"/"+c.Pod)
				if c.Device.Key.Device != "gpu-0" || len(c.Others) != 1 {
					t.Errorf("conflict %+v: want device gpu-0 and one other claim", c)
				}
			}
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("conflicts = %v, want %v", got, want)
			}
		})
	}
}

// The scheduler does not preempt pods to free DRA devices: a pending pod of
// high priority waiting behind lower-priority holders says so.
func TestLowerPriorityHolders(t *testing.T) {
	withPriority := func(p *corev1.Pod, prio int32) *corev1.Pod {
		p.Spec.Priority = Ptr(prio)
		return p
	}
	holding := func(name, device string, prio int32) []any {
		p := withPriority(Running(Bound(WithNamedClaim(Pod("holder-"+name, "uid-holder-"+name), "gpu", name), "node-1")), prio)
		c := ReservedFor(Allocated(Claim(name, "uid-"+name), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", device)), p)
		return []any{p, c}
	}
	tests := []struct {
		name     string
		pending  int32
		holders  []int32 // priorities of the holders of gpu-0 and gpu-1
		want     int
		evidence bool
	}{
		{"a critical pod behind two batch pods", 1000000, []int32{0, 0}, 2, true},
		{"behind one lower and one higher", 1000, []int32{0, 2000}, 1, true},
		{"equal priority: preemption would not pick them either", 0, []int32{0, 0}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []any{withPriority(statusPod(), tt.pending), genClaim(Request("gpu", GPUClassName))}
			objs = append(objs, holding("a", "gpu-0", tt.holders[0])...)
			objs = append(objs, holding("b", "gpu-1", tt.holders[1])...)
			v := verdictOf(t, podName, world(objs...)...)
			checkVerdict(t, v, want{classify.CapacityExhausted, classify.LayerScheduler, claimName, "", ""})
			if v.LowerPriorityHolders != tt.want {
				t.Errorf("LowerPriorityHolders = %d, want %d", v.LowerPriorityHolders, tt.want)
			}
			var ev []string
			for _, l := range v.Links {
				ev = append(ev, l.Evidence...)
			}
			if got := strings.Contains(strings.Join(ev, "\n"), "preemption will not help"); got != tt.evidence {
				t.Errorf("preemption evidence = %v, want %v:\n%s", got, tt.evidence, strings.Join(ev, "\n"))
			}
			// The scrape path (no evidence) counts the same.
			for _, b := range classify.Blocked(snapshotOf(t, world(objs...)...)) {
				if b.Pod.Key.Name == podName && b.LowerPriorityHolders != tt.want {
					t.Errorf("Blocked: LowerPriorityHolders = %d, want %d", b.LowerPriorityHolders, tt.want)
				}
			}
		})
	}
}

// A gang member's claims are allocated only once minCount members fit: until
// then it waits for its group, unless the scheduler says something else.
func TestGangMemberWaitsForItsGroup(t *testing.T) {
	member := func() *corev1.Pod {
		p := statusPod()
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: Ptr("llama-pretrain")}
		return p
	}
	unschedulable := func(p *corev1.Pod, msg string) *corev1.Pod {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: msg})
		return p
	}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		blocked classify.Reason // "" when waiting
	}{
		{"a member the scheduler has said nothing about", member(), ""},
		{"a member the gang plugin holds", unschedulable(member(), "waiting for minCount pods from a gang to appear in scheduling queue"), ""},
		{"a member rejected for another reason", unschedulable(member(), "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."), classify.Unallocated},
		{"a pod of no group", statusPod(), classify.Unallocated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, world(tt.pod, genClaim())...)
			if got := v.Reason; v.Blocked != (tt.blocked != "") || (v.Blocked && got != tt.blocked) {
				t.Errorf("blocked=%v reason=%q, want %q: %s", v.Blocked, got, tt.blocked, linkSummary(v))
			}
			if tt.blocked == "" {
				if last := v.Links[len(v.Links)-1]; last.Step != "pod group quorum" || last.State != classify.Wait {
					t.Errorf("last link %q %s, want the group's WAIT: %s", last.Step, last.State, linkSummary(v))
				}
			}
		})
	}
}
