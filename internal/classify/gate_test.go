package classify_test

import (
	"slices"
	"strings"
	"testing"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// gateOf evaluates the api gate of llm-0 with the verdict the exporter
// would hand it (Memo.Kept keeps only blocked pods).
func gateOf(t *testing.T, explain bool, objs ...any) classify.GateResult {
	t.Helper()
	s := snapshotOf(t, objs...)
	p := s.Pod(index.Key{Namespace: NS, Name: podName})
	if p == nil {
		t.Fatal("pod not indexed")
	}
	return classify.APIGate(s, p, blockedVerdict(s, p), explain)
}

func blockedVerdict(s *index.Snapshot, p *index.Pod) *classify.Verdict {
	for _, v := range (&classify.Memo{}).Kept(s) {
		if v.Pod.Key == p.Key {
			return v
		}
	}
	return nil
}

func allocatedClaim(node string) any {
	return ReservedFor(Allocated(genClaim(), node, T0, Result("gpu", "node-1", "gpu-0")), statusPod())
}

func TestAPIGate(t *testing.T) {
	failures := func(n int32) *corev1.Event {
		e := Event("fs", statusPod(), vocab.FailedScheduling, "0/2 nodes are available: 2 cannot allocate all claims.", T0)
		e.Count = n
		return e
	}
	cpuOnly := Event("fs", statusPod(), vocab.FailedScheduling, "0/2 nodes are available: 2 Insufficient cpu.", T0)
	cpuOnly.Count = 9
	gated := statusPod()
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	cases := []struct {
		name   string
		objs   []any
		pass   bool
		reason string
		claim  string
	}{
		{"ready on the node of its allocation", world(Ready(Bound(statusPod(), "node-1")), allocatedClaim("node-1")), true, "", ""},
		{"claim not generated yet", world(tmplPod()), false, string(classify.ClaimNotCreated), ""},
		{"the tree says why the claim is unallocated", world(statusPod(), genClaim(withSelectors(Request("gpu", GPUClassName), `device.attributes["gpu.nvidia.com"].productName == "B200"`))),
			false, string(classify.SelectorMatchesNothing), claimName},
		{"allocated, reserved for someone else", world(statusPod(), ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), Pod("other", "uid-other"))),
			false, string(classify.NotReserved), claimName},
		{"allocated and reserved, binding in progress", world(statusPod(), allocatedClaim("node-1")), false, classify.GateNotBound, ""},
		{"scheduling gates", world(gated, genClaim()), false, classify.GateSchedulingGated, ""},
		{"bound to another node than the allocation's", world(Node("node-2", 0), Running(Bound(statusPod(), "node-2")), allocatedClaim("node-1")), false, classify.GateNodeMismatch, ""},
		{"Ready, but the claim was deleted under it", world(Ready(Bound(statusPod(), "node-1"))), false, string(classify.ClaimNotCreated), claimName},
		{"bound after two allocation failures", world(Ready(Bound(statusPod(), "node-1")), allocatedClaim("node-1"), failures(2)), true, "", ""},
		{"bound after three allocation failures", world(Ready(Bound(statusPod(), "node-1")), allocatedClaim("node-1"), failures(3)), false, classify.GateAllocationRetried, ""},
		{"repeated failures of CPU alone are not allocation failures", world(Ready(Bound(statusPod(), "node-1")), allocatedClaim("node-1"), cpuOnly), true, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := gateOf(t, true, tc.objs...)
			if g.Gate != classify.GateAPI || g.Pass != tc.pass || g.Reason != tc.reason || g.Claim != tc.claim {
				t.Errorf("gate = pass %v reason %q claim %q, want pass %v reason %q claim %q\nevidence: %s",
					g.Pass, g.Reason, g.Claim, tc.pass, tc.reason, tc.claim, strings.Join(g.Evidence, "; "))
			}
			if len(g.Evidence) == 0 {
				t.Error("no evidence")
			}
			// The scrape path (no evidence) gives the same answer.
			if q := gateOf(t, false, tc.objs...); q.Pass != g.Pass || q.Reason != g.Reason || len(q.Evidence) > 0 {
				t.Errorf("without explain: %+v, with: %+v", q, g)
			}
		})
	}
}

func TestAPIGateEvidenceNamesTheDevice(t *testing.T) {
	g := gateOf(t, true, world(Ready(Bound(statusPod(), "node-1")), allocatedClaim("node-1"))...)
	text := strings.Join(g.Evidence, "\n")
	for _, want := range []string{"claim llm-0-gpu: allocated device gpu.nvidia.com/node-1/gpu-0 (uuid GPU-gpu-0) on node node-1; reserved for the pod",
		"bound the pod to node node-1", "no repeated allocation failure"} {
		if !strings.Contains(text, want) {
			t.Errorf("evidence lacks %q:\n%s", want, text)
		}
	}
}

func TestNegativeControl(t *testing.T) {
	nothing := withSelectors(Request("gpu", GPUClassName), `device.attributes["gpu.nvidia.com"].productName == "B200"`)
	tooBig := Request("gpu", GPUClassName)
	tooBig.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("1Ti")}}
	cases := []struct {
		name   string
		objs   []any
		state  classify.ControlState
		reason string
		device string
	}{
		{"selector matches nothing: holds", world(statusPod(), genClaim(nothing)), classify.ControlHolds, string(classify.SelectorMatchesNothing), ""},
		{"capacity no device meets: holds", world(statusPod(), genClaim(tooBig)), classify.ControlHolds, string(classify.SelectorMatchesNothing), ""},
		// A control that could get no device whatever its selectors proves
		// nothing: it used to hold.
		{"class does not exist: invalid", world(statusPod(), genClaim(Request("gpu", "vfio.gpu.nvidia.com"))), classify.ControlInvalid, string(classify.DeviceClassNotFound), ""},
		{"class publishes no device: invalid", world(statusPod(), genClaim(Request("gpu", MIGClass().Name))), classify.ControlInvalid, string(classify.NoDevicesForClass), ""},
		{"matching devices all taken", world(statusPod(), genClaim(), holder("a", "gpu-0"), holder("b", "gpu-1")), classify.ControlBroken, classify.ControlMatchesDevices, ""},
		{"allocated", world(statusPod(), allocatedClaim("node-1")), classify.ControlBroken, classify.ControlAllocated, "gpu-0"},
		{"ran and finished", world(Finished(Bound(statusPod(), "node-1"), corev1.PodSucceeded), allocatedClaim("node-1")), classify.ControlBroken, classify.ControlStarted, "gpu-0"},
		{"no claim yet", world(tmplPod()), classify.ControlBroken, string(classify.ControlNotEvaluated), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotOf(t, tc.objs...)
			p := s.Pod(index.Key{Namespace: NS, Name: podName})
			r := classify.NegativeControl(s, p, blockedVerdict(s, p), true)
			if r.State != tc.state || r.Holds != (tc.state == classify.ControlHolds) || r.Reason != tc.reason || r.Device != tc.device {
				t.Errorf("control = %s (holds %v) reason %q device %q, want %s %q %q\nevidence: %v", r.State, r.Holds, r.Reason, r.Device, tc.state, tc.reason, tc.device, r.Evidence)
			}
			if len(r.Evidence) == 0 {
				t.Error("no evidence")
			}
			if (r.State == classify.ControlInvalid) != (r.Why != "") {
				t.Errorf("why %q: an invalid control, and only one, says why", r.Why)
			}
			if st, _ := classify.ControlStateOf(r.Reason); st != r.State || !slices.Contains(classify.ControlReasons, r.Reason) {
				t.Errorf("reason %q: state %s from the reason alone (what gates reads of the series), %s here; in ControlReasons: %v", r.Reason, st, r.State, classify.ControlReasons)
			}
		})
	}
}

func TestGateOwners(t *testing.T) {
	for _, g := range classify.Gates {
		if g.Owner() == "" {
			t.Errorf("gate %s has no owner", g)
		}
	}
}
