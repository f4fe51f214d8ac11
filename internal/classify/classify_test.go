package classify_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

const (
	podName   = "llm-0"
	podUID    = "uid-llm-0"
	claimName = "llm-0-gpu"
)

func gpus(names ...string) []resourceapi.Device {
	out := make([]resourceapi.Device, len(names))
	for i, n := range names {
		out[i] = GPUDevice(n, "GPU-"+n)
	}
	return out
}

// world: two H100s on node-1, the gpu and mig classes.
func world(extra ...any) []any {
	return append([]any{GPUClass(), MIGClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...)}, extra...)
}

// tmplPod is llm-0 with one pod claim "gpu" from template llm-gpu.
func tmplPod() *corev1.Pod { return WithTemplateClaim(Pod(podName, podUID), "gpu", "llm-gpu") }

// statusPod is tmplPod with the generated claim recorded in its status.
func statusPod() *corev1.Pod { return WithClaimStatus(tmplPod(), "gpu", claimName) }

// genClaim is the claim generated for statusPod.
func genClaim(requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return OwnedBy(Claim(claimName, "uid-claim", requests...), tmplPod(), "gpu")
}

// sandbox sets the pod's PodReadyToStartContainers condition.
func sandbox(p *corev1.Pod, status corev1.ConditionStatus, at time.Time) *corev1.Pod {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReadyToStartContainers,
		Status: status, LastTransitionTime: metav1.NewTime(at)})
	return p
}

func withSelectors(r resourceapi.DeviceRequest, exprs ...string) resourceapi.DeviceRequest {
	r.Exactly = r.Exactly.DeepCopy()
	r.Exactly.Selectors = CEL(exprs...)
	return r
}

// holder is a claim of someone else that holds a device of node-1.
func holder(name, device string) *resourceapi.ResourceClaim {
	other := Pod("holder-"+name, "uid-holder-"+name)
	return ReservedFor(Allocated(Claim(name, "uid-"+name), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", device)), other)
}

func snapshotOf(t *testing.T, objs ...any) *index.Snapshot {
	t.Helper()
	return Build(t, index.Config{Now: func() time.Time { return T0 }, DevicePluginResources: []string{GPUResource}}, objs...).Snapshot()
}

func verdictOf(t *testing.T, name string, objs ...any) classify.Verdict {
	t.Helper()
	s := snapshotOf(t, objs...)
	p := s.Pod(index.Key{Namespace: NS, Name: name})
	if p == nil {
		t.Fatalf("pod %s not indexed", name)
	}
	v := classify.Pod(s, p)
	// Blocked agrees with Pod.
	inBlocked := false
	for _, b := range classify.Blocked(s) {
		if b.Pod.Key == p.Key {
			inBlocked = true
			if b.Reason != v.Reason || b.Claim != v.Claim || b.Node != v.Node || b.Device != v.Device {
				t.Errorf("Blocked gives %+v, Pod gives %+v", b, v)
			}
		}
	}
	if inBlocked != v.Blocked {
		t.Errorf("Blocked lists the pod: %v, Pod says blocked: %v", inBlocked, v.Blocked)
	}
	return v
}

type want struct {
	reason classify.Reason
	layer  classify.Layer
	claim  string
	node   string
	device string
}

func checkVerdict(t *testing.T, v classify.Verdict, w want) {
	t.Helper()
	if !v.Blocked {
		t.Fatalf("not blocked (note %q, links %s), want %s", v.Note, linkSummary(v), w.reason)
	}
	got := want{v.Reason, v.Layer, v.Claim, v.Node, v.Device}
	if got != w {
		t.Errorf("verdict = %+v\nwant      %+v\nlinks: %s", got, w, linkSummary(v))
	}
}

func linkSummary(v classify.Verdict) string {
	var parts []string
	for _, l := range v.Links {
		s := string(l.State) + " " + l.Step
		if l.Reason != "" {
			s += " (" + string(l.Reason) + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// withBinding gives the claim's first device the binding conditions of a
// fabric-attached GPU (KEP-5007) and the conditions of its status.devices.
func withBinding(c *resourceapi.ResourceClaim, conds ...metav1.Condition) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	r := &c.Status.Allocation.Devices.Results[0]
	r.BindingConditions = []string{"gpu.example.com/attached"}
	r.BindingFailureConditions = []string{"gpu.example.com/attach-failed"}
	c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: r.Driver, Pool: r.Pool, Device: r.Device, Conditions: conds}}
	return c
}

// Binding conditions (KEP-5007): the scheduler waits for them before it
// binds the pod, and gives the allocation up on a failure condition.
func TestBindingConditions(t *testing.T) {
	reserved := ReservedFor(Allocated(genClaim(), "node-1", T0.Add(-time.Minute), Result("gpu", "node-1", "gpu-0")), statusPod())
	cond := func(typ string, st metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: "Test", LastTransitionTime: metav1.NewTime(T0)}
	}
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		blocked bool
		step    string // the last link, and its state
		state   classify.State
	}{
		{"no condition set yet: waiting", withBinding(reserved), false, "device binding conditions", classify.Wait},
		{"attach in progress: waiting", withBinding(reserved, cond("gpu.example.com/attached", metav1.ConditionFalse)), false, "device binding conditions", classify.Wait},
		{"attached: binding", withBinding(reserved, cond("gpu.example.com/attached", metav1.ConditionTrue)), false, "pod bound to a node", classify.Wait},
		{"attach failed", withBinding(reserved, cond("gpu.example.com/attached", metav1.ConditionFalse), cond("gpu.example.com/attach-failed", metav1.ConditionTrue)), true, "device binding conditions", classify.Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, world(statusPod(), tt.claim)...)
			if v.Blocked != tt.blocked || (tt.blocked && v.Reason != classify.BindingFailed) {
				t.Errorf("blocked=%v reason=%s, want blocked=%v (binding_failed when blocked): %s", v.Blocked, v.Reason, tt.blocked, linkSummary(v))
			}
			last := v.Links[len(v.Links)-1]
			if last.Step != tt.step || last.State != tt.state {
				t.Errorf("last link %q %s, want %q %s: %s", last.Step, last.State, tt.step, tt.state, linkSummary(v))
			}
		})
	}
}

func TestEveryReason(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	allocatedClaim := Allocated(genClaim(), "node-1", T0.Add(-time.Minute), gpu0)
	reservedClaim := ReservedFor(allocatedClaim, statusPod())
	boundPod := Bound(statusPod(), "node-1")
	attachFailed := withBinding(reservedClaim, metav1.Condition{Type: "gpu.example.com/attach-failed", Status: metav1.ConditionTrue, Reason: "FabricError", LastTransitionTime: metav1.NewTime(T0)})
	// The sandbox stands (the devices were prepared) and the container
	// cannot be created: no spec defines the devices the driver named.
	specLost := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
	specLost.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CreateContainerError", Message: "failed to create containerd container: CDI device injection failed: unresolvable CDI devices k8s.gpu.nvidia.com/claim=gpu-0"}}}}

	tests := []struct {
		name string
		pod  string
		objs []any
		want want
	}{
		{"claim_not_created", podName, world(tmplPod(),
			Event("ev", tmplPod(), vocab.FailedResourceClaimCreation, "template llm-gpu not found", T0)),
			want{classify.ClaimNotCreated, classify.LayerController, "", "", ""}},
		{"claim_not_found", podName, world(WithNamedClaim(Pod(podName, podUID), "gpu", "shared-gpu")),
			want{classify.ClaimNotFound, classify.LayerController, "shared-gpu", "", ""}},
		{"device_class_not_found", podName, world(statusPod(), genClaim(Request("gpu", "typo-class"))),
			want{classify.DeviceClassNotFound, classify.LayerScheduler, claimName, "", ""}},
		{"no_devices_for_class", podName, world(statusPod(), genClaim(Request("gpu", MIGClassName))),
			want{classify.NoDevicesForClass, classify.LayerScheduler, claimName, "", ""}},
		{"selector_matches_nothing", podName, world(statusPod(), genClaim(withSelectors(Request("gpu", GPUClassName),
			"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0"))),
			want{classify.SelectorMatchesNothing, classify.LayerScheduler, claimName, "", ""}},
		{"capacity_exhausted", podName, world(statusPod(), genClaim(), holder("a", "gpu-0"), holder("b", "gpu-1")),
			want{classify.CapacityExhausted, classify.LayerScheduler, claimName, "", ""}},
		{"unallocated", podName, world(statusPod(), genClaim()),
			want{classify.Unallocated, classify.LayerScheduler, claimName, "", ""}},
		{"not_reserved", podName, world(statusPod(), ReservedFor(allocatedClaim, Pod("notebook-a", "uid-a"))),
			want{classify.NotReserved, classify.LayerScheduler, claimName, "node-1", "gpu-0"}},
		{"binding_failed", podName, world(statusPod(), attachFailed),
			want{classify.BindingFailed, classify.LayerScheduler, claimName, "node-1", "gpu-0"}},
		{"node_prepare_failed", podName, world(boundPod, reservedClaim,
			Event("prep", boundPod, vocab.FailedPrepareDynamicResources, "NodePrepareResources: driver gpu.nvidia.com: timeout", T0)),
			want{classify.NodePrepareFailed, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"cdi_spec_missing", podName, world(specLost, reservedClaim),
			want{classify.CDISpecMissing, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"node_not_ready", podName, world(Running(boundPod), reservedClaim, NotReadyNode("node-1")),
			want{classify.NodeNotReady, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"node_prepare_pending", podName, world(boundPod, reservedClaim),
			want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"not_ready", podName, world(Running(boundPod), reservedClaim),
			want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"}},
	}
	covered := map[classify.Reason]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, tt.pod, tt.objs...)
			checkVerdict(t, v, tt.want)
			if v.Layer != v.Reason.Layer() {
				t.Errorf("Layer %s is not the reason's layer %s", v.Layer, v.Reason.Layer())
			}
			if !v.DRA || v.Lane != index.LaneDRA {
				t.Errorf("DRA=%v lane=%q, want a dra-lane pod", v.DRA, v.Lane)
			}
			// Exactly one failing link carries the verdict's reason.
			fails := 0
			for _, l := range v.Links {
				if l.State == classify.Fail && l.Reason == v.Reason {
					fails++
				}
			}
			if fails == 0 {
				t.Errorf("no failing link with reason %s: %s", v.Reason, linkSummary(v))
			}
			covered[v.Reason] = true
		})
	}
	for _, r := range classify.Reasons {
		if !covered[r] {
			t.Errorf("reason %s has no case", r)
		}
	}
	if len(classify.Reasons) != 14 {
		t.Errorf("%d reasons, want the design's 11, node_not_ready, binding_failed and cdi_spec_missing", len(classify.Reasons))
	}
}

func TestReasonLayersAndMeanings(t *testing.T) {
	layers := map[classify.Reason]classify.Layer{
		classify.ClaimNotCreated: classify.LayerController, classify.ClaimNotFound: classify.LayerController,
		classify.DeviceClassNotFound: classify.LayerScheduler, classify.NoDevicesForClass: classify.LayerScheduler,
		classify.SelectorMatchesNothing: classify.LayerScheduler, classify.CapacityExhausted: classify.LayerScheduler,
		classify.Unallocated: classify.LayerScheduler, classify.NotReserved: classify.LayerScheduler,
		classify.BindingFailed:     classify.LayerScheduler,
		classify.NodeNotReady:      classify.LayerNode,
		classify.NodePrepareFailed: classify.LayerNode, classify.NodePreparePending: classify.LayerNode,
		classify.CDISpecMissing: classify.LayerNode,
		classify.NotReady:       classify.LayerApplication,
	}
	if len(layers) != len(classify.Reasons) {
		t.Errorf("%d reasons in this table, %d in classify.Reasons: name the layer of every reason", len(layers), len(classify.Reasons))
	}
	for _, r := range classify.Reasons {
		l, ok := layers[r]
		if !ok {
			t.Errorf("reason %s: no layer in this table (DESIGN.md names one for every reason)", r)
			continue
		}
		if r.Layer() != l {
			t.Errorf("%s.Layer() = %s, want %s (DESIGN.md)", r, r.Layer(), l)
		}
		if r.Meaning() == "" {
			t.Errorf("%s has no meaning", r)
		}
	}
}

func TestClaimNotCreatedEvidence(t *testing.T) {
	v := verdictOf(t, podName, world(tmplPod(),
		Event("ev", tmplPod(), vocab.FailedResourceClaimCreation, "admission webhook denied the claim", T0))...)
	text := strings.Join(v.Links[0].Evidence, "\n")
	if !strings.Contains(text, "admission webhook denied the claim") || !strings.Contains(text, "llm-gpu") {
		t.Errorf("evidence does not carry the event and template:\n%s", text)
	}
}

func TestRequests(t *testing.T) {
	exact := func(count int64, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
		r := Request("gpu", GPUClassName)
		r.Exactly.Count, r.Exactly.AllocationMode = count, mode
		return r
	}
	tooBig := "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0"
	admin := Request("gpu", GPUClassName)
	admin.Exactly.AdminAccess = Ptr(true)

	tests := []struct {
		name string
		req  []resourceapi.DeviceRequest
		objs []any
		want classify.Reason
	}{
		{"firstAvailable: first unsatisfiable, second ok", []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "big", DeviceClassName: GPUClassName, Selectors: CEL(tooBig)},
			{Name: "any", DeviceClassName: GPUClassName},
		}}}, nil, classify.Unallocated},
		{"firstAvailable: first ok, second has no class", []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "any", DeviceClassName: GPUClassName},
			{Name: "typo", DeviceClassName: "typo"},
		}}}, nil, classify.Unallocated},
		// Neither subrequest can be satisfied: report the one that got
		// furthest down the tree.
		{"firstAvailable: none satisfiable", []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "mig", DeviceClassName: MIGClassName},
			{Name: "big", DeviceClassName: GPUClassName, Selectors: CEL(tooBig)},
		}}}, nil, classify.SelectorMatchesNothing},
		{"ExactCount 2, one free", []resourceapi.DeviceRequest{exact(2, resourceapi.DeviceAllocationModeExactCount)},
			[]any{holder("a", "gpu-0")}, classify.CapacityExhausted},
		{"ExactCount 2, two free", []resourceapi.DeviceRequest{exact(2, resourceapi.DeviceAllocationModeExactCount)},
			nil, classify.Unallocated},
		{"ExactCount 3 of 2 devices", []resourceapi.DeviceRequest{exact(3, resourceapi.DeviceAllocationModeExactCount)},
			nil, classify.CapacityExhausted},
		{"All, one taken", []resourceapi.DeviceRequest{exact(0, resourceapi.DeviceAllocationModeAll)},
			[]any{holder("a", "gpu-1")}, classify.CapacityExhausted},
		{"All, every device free", []resourceapi.DeviceRequest{exact(0, resourceapi.DeviceAllocationModeAll)},
			nil, classify.Unallocated},
		{"admin access skips capacity", []resourceapi.DeviceRequest{admin},
			[]any{holder("a", "gpu-0"), holder("b", "gpu-1")}, classify.Unallocated},
		{"two requests: the earlier tree reason wins", []resourceapi.DeviceRequest{
			withSelectors(Request("first", GPUClassName), tooBig),
			Request("second", "typo-class"),
		}, nil, classify.DeviceClassNotFound},
		{"two requests: second exhausted", []resourceapi.DeviceRequest{
			Request("first", GPUClassName),
			withSelectors(Request("second", GPUClassName), "device.attributes['gpu.nvidia.com'].uuid == 'GPU-gpu-1'"),
		}, []any{holder("a", "gpu-1")}, classify.CapacityExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := world(append([]any{statusPod(), genClaim(tt.req...)}, tt.objs...)...)
			v := verdictOf(t, podName, objs...)
			checkVerdict(t, v, want{tt.want, tt.want.Layer(), claimName, "", ""})
		})
	}
}

func TestEarliestReasonAcrossClaims(t *testing.T) {
	p := WithNamedClaim(statusPod(), "extra", "missing-claim")
	v := verdictOf(t, podName, world(p, genClaim(), holder("a", "gpu-0"), holder("b", "gpu-1"))...)
	checkVerdict(t, v, want{classify.ClaimNotFound, classify.LayerController, "missing-claim", "", ""})
}

func TestExtendedResourcePendingPod(t *testing.T) {
	extPod := func(n int64) *corev1.Pod { return WithLimit(Pod("ext", "uid-ext"), GPUResource, n) }
	dpUser := func(name string, n int64) *corev1.Pod {
		return Running(Bound(WithLimit(Pod(name, "uid-"+name), GPUResource, n), "dp-node"))
	}
	tests := []struct {
		name string
		objs []any
		want classify.Reason
	}{
		{"no devices, no device plugin", []any{GPUClass(), extPod(1)}, classify.NoDevicesForClass},
		{"one free DRA device, two wanted", world(extPod(2), holder("a", "gpu-0")), classify.CapacityExhausted},
		// One node serves the request through one lane: a free DRA GPU on
		// node-1 and a free device-plugin GPU on dp-node do not make two.
		{"one free DRA device and one free device-plugin GPU", world(extPod(2), holder("a", "gpu-0"),
			Node("dp-node", 8), dpUser("dp-a", 4), dpUser("dp-b", 3)), classify.CapacityExhausted},
		{"two free device-plugin GPUs on one node", world(extPod(2), holder("a", "gpu-0"),
			Node("dp-node", 8), dpUser("dp-a", 6)), classify.Unallocated},
		{"device-plugin GPUs all used", world(extPod(2), holder("a", "gpu-0"),
			Node("dp-node", 8), dpUser("dp-a", 8)), classify.CapacityExhausted},
		{"device-plugin only, enough free", []any{GPUClass(), extPod(2), Node("dp-node", 8)}, classify.Unallocated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, "ext", tt.objs...)
			if v.Lane != index.LaneDRAExtended {
				t.Errorf("lane = %q, want dra-extended", v.Lane)
			}
			checkVerdict(t, v, want{tt.want, tt.want.Layer(), "", "", ""})
		})
	}
}

func TestExtendedClaimCreated(t *testing.T) {
	p := WithExtendedClaimStatus(WithLimit(Pod("ext", "uid-ext"), GPUResource, 1), "ext-gpu")
	c := ReservedFor(Allocated(ExtendedFor(Claim("ext-gpu", "uid-e", Request("container-0-request-0", GPUClassName)), p),
		"node-1", T0, Result("container-0-request-0", "node-1", "gpu-1")), p)
	v := verdictOf(t, "ext", world(Bound(p, "node-1"), c)...)
	checkVerdict(t, v, want{classify.NodePreparePending, classify.LayerNode, "ext-gpu", "node-1", "gpu-1"})
}

func TestNotBlocked(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, gpu0), statusPod())
	terminating := Bound(statusPod(), "node-1")
	terminating.DeletionTimestamp = Ptr(metav1.NewTime(T0))
	tests := []struct {
		name string
		pod  string
		objs []any
		note string
	}{
		{"ready", podName, world(Ready(Bound(statusPod(), "node-1")), reservedClaim), ""},
		{"ready although the claim is not reserved", podName, world(Ready(Bound(statusPod(), "node-1")), genClaim()), "-"},
		{"finished", podName, world(Finished(Bound(statusPod(), "node-1"), corev1.PodSucceeded), reservedClaim), "finished"},
		{"failed", podName, world(Finished(Bound(statusPod(), "node-1"), corev1.PodFailed)), "finished"},
		{"terminating", podName, world(terminating, reservedClaim), "being deleted"},
		{"device-plugin pod", "dp", world(Node("dp-node", 8), Bound(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), "dp-node")), "device-plugin"},
		{"binding in progress", podName, world(statusPod(), reservedClaim), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshotOf(t, tt.objs...)
			for _, v := range classify.Blocked(s) {
				if v.Pod.Key.Name == tt.pod {
					t.Errorf("Blocked lists the pod: %s %s", v.Reason, linkSummary(v))
				}
			}
			if tt.note == "-" {
				return // Pod() of a Ready pod may still walk; Blocked skips it
			}
			v := classify.Pod(s, s.Pod(index.Key{Namespace: NS, Name: tt.pod}))
			if v.Blocked {
				t.Errorf("Pod says blocked: %s", v.Reason)
			}
			if !strings.Contains(v.Note, tt.note) {
				t.Errorf("Note = %q, want it to mention %q", v.Note, tt.note)
			}
		})
	}
}

func TestGeneratedClaimByOwnerReference(t *testing.T) {
	// The controller created the claim; the pod status does not name it yet.
	v := verdictOf(t, podName, world(tmplPod(), genClaim())...)
	checkVerdict(t, v, want{classify.Unallocated, classify.LayerScheduler, claimName, "", ""})
}

func TestClaimOfAnotherPodIsNotCreated(t *testing.T) {
	// The pod status names a claim that belongs to a previous pod of the
	// same name.
	theirs := OwnedBy(Claim(claimName, "uid-old-claim"), Pod(podName, "uid-previous"), "gpu")
	v := verdictOf(t, podName, world(statusPod(), theirs)...)
	checkVerdict(t, v, want{classify.ClaimNotCreated, classify.LayerController, claimName, "", ""})
}

func TestNodePrepareFailedEvidence(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, gpu0), statusPod())
	boundPod := Bound(statusPod(), "node-1")
	tests := []struct {
		name  string
		event *corev1.Event
		want  classify.Reason
	}{
		{"FailedPrepareDynamicResources", Event("e", boundPod, vocab.FailedPrepareDynamicResources, "prepare failed", T0), classify.NodePrepareFailed},
		{"sandbox failure naming CDI", Event("e", boundPod, "FailedCreatePodSandBox",
			"failed to create containerd task: failed to inject CDI devices: unresolvable CDI devices gpu.nvidia.com/gpu=uuid", T0), classify.CDISpecMissing},
		{"sandbox failure on a broken CDI spec", Event("e", boundPod, "FailedCreatePodSandBox",
			"failed to create containerd task: CDI device injection failed: failed to refresh CDI registry: invalid CDI spec /var/run/cdi/k8s.gpu.nvidia.com-claim_x.json", T0), classify.NodePrepareFailed},
		{"sandbox failure about the network", Event("e", boundPod, "FailedCreatePodSandBox", "failed to setup network", T0), classify.NodePreparePending},
		{"failure of the previous pod of that name", Event("e", Pod(podName, "uid-previous"), vocab.FailedPrepareDynamicResources, "old", T0), classify.NodePreparePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, world(boundPod, reservedClaim, tt.event)...)
			checkVerdict(t, v, want{tt.want, classify.LayerNode, claimName, "node-1", "gpu-0"})
			if tt.want == classify.NodePrepareFailed {
				found := false
				for _, l := range v.Links {
					if l.Reason == classify.NodePrepareFailed && strings.Contains(strings.Join(l.Evidence, " "), tt.event.Message) {
						found = true
					}
				}
				if !found {
					t.Errorf("the event message is not in the evidence: %s", linkSummary(v))
				}
			}
		})
	}
}

// The kubelet prepares DRA resources before it creates the sandbox: a
// ready sandbox, or a container waiting on its image or config, proves
// preparation passed, and a prepare failure from before that is history.
// Containers still being created are the node's (the design's
// node_prepare_pending: "bound; containers not started yet"); a container
// stopped by its own image or configuration (a bad image, a missing
// Secret) is the application's, however the pod is built.
func TestPreparedButNotStarted(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, gpu0), statusPod())
	waiting := func(p *corev1.Pod, reason string) *corev1.Pod {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		return p
	}
	prepareFailed := func(at time.Time) *corev1.Event {
		return Event("e", statusPod(), vocab.FailedPrepareDynamicResources, "NodePrepareResources failed for ResourceClaim "+claimName, at)
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		objs []any
		want want
	}{
		{"image pull back-off", waiting(Bound(statusPod(), "node-1"), "ImagePullBackOff"), nil,
			want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"}},
		{"missing secret", waiting(Bound(statusPod(), "node-1"), "CreateContainerConfigError"), nil,
			want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"}},
		{"image pull back-off after a transient prepare failure", waiting(Bound(statusPod(), "node-1"), "ImagePullBackOff"),
			[]any{prepareFailed(T0.Add(-time.Minute))}, want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"}},
		{"sandbox ready after an old prepare failure", sandbox(waiting(Bound(statusPod(), "node-1"), "ContainerCreating"), corev1.ConditionTrue, T0),
			[]any{prepareFailed(T0.Add(-10 * time.Minute))}, want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"prepare failure after the sandbox was ready", sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-10*time.Minute)),
			[]any{prepareFailed(T0)}, want{classify.NodePrepareFailed, classify.LayerNode, claimName, "node-1", "gpu-0"}},
		{"still creating", waiting(Bound(statusPod(), "node-1"), "ContainerCreating"), nil,
			want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, world(append([]any{tt.pod, reservedClaim}, tt.objs...)...)...)
			checkVerdict(t, v, tt.want)
		})
	}
}

// A prepare failure names its claim: the verdict carries that claim and its
// device, not the pod's first.
func TestNodePrepareFailedNamesTheClaim(t *testing.T) {
	p := WithNamedClaim(Bound(statusPod(), "node-1"), "channel", "llm-0-channel")
	gpuClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), p)
	channel := ReservedFor(Allocated(Claim("llm-0-channel", "uid-channel", Request("channel", GPUClassName)), "node-1", T0,
		Result("channel", "node-1", "gpu-1")), p)
	ev := Event("e", p, vocab.FailedPrepareDynamicResources,
		"Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim llm-0-channel: compute domain not ready", T0)
	v := verdictOf(t, podName, world(p, gpuClaim, channel, ev)...)
	checkVerdict(t, v, want{classify.NodePrepareFailed, classify.LayerNode, "llm-0-channel", "node-1", "gpu-1"})
}

// A PodGroup's claim (scheduling.k8s.io, alpha in 1.37) is generated for the
// group and reserved for the group: its pods are neither claimless nor
// unreserved.
func TestPodGroupClaim(t *testing.T) {
	member := func(name, uid string) *corev1.Pod {
		p := WithTemplateClaim(Pod(name, uid), "gpus", "gang-gpus")
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: Ptr("pretrain")}
		return p
	}
	claim := Allocated(Claim("pretrain-gpus-x1y2z", "uid-gang", Request("gpus", GPUClassName)), "node-1", T0, Result("gpus", "node-1", "gpu-0"))
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "PodGroup", Name: "pretrain", UID: "uid-group", Controller: Ptr(true)}}
	claim.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "gpus"}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "pretrain", UID: "uid-group"}}

	v := verdictOf(t, "worker-0", world(Running(Bound(member("worker-0", "uid-w0"), "node-1")), claim)...)
	checkVerdict(t, v, want{classify.NotReady, classify.LayerApplication, "pretrain-gpus-x1y2z", "node-1", "gpu-0"})

	// Not yet bound: the claim is allocated and reserved for the group, so
	// the pod is binding, not blocked.
	v = verdictOf(t, "worker-1", world(member("worker-1", "uid-w1"), claim)...)
	if v.Blocked {
		t.Errorf("unbound group member with a reserved group claim is blocked: %s", linkSummary(v))
	}
	// A leak check must not take the group reservation for a missing pod.
	s := snapshotOf(t, world(member("worker-1", "uid-w1"), claim)...)
	if leaks := classify.Leaks(s, T0, time.Minute); len(leaks) != 0 {
		t.Errorf("leaks = %v", leakRows(leaks))
	}
}

func TestNodeFromDeviceWhenNoSelector(t *testing.T) {
	c := ReservedFor(Allocated(genClaim(), "", T0, Result("gpu", "node-1", "gpu-1")), Pod("someone-else", "uid-x"))
	v := verdictOf(t, podName, world(statusPod(), c)...)
	checkVerdict(t, v, want{classify.NotReserved, classify.LayerScheduler, claimName, "node-1", "gpu-1"})
}

type leakRow struct {
	claim, pod, podUID, node, device string
	reason                           classify.LeakReason
}

func leakRows(leaks []classify.Leak) []leakRow {
	out := make([]leakRow, 0, len(leaks))
	for _, l := range leaks {
		out = append(out, leakRow{l.Claim.Key.Name, l.Pod, string(l.PodUID), l.Node, l.Device, l.Reason})
	}
	slices.SortFunc(out, func(a, b leakRow) int {
		return strings.Compare(a.claim+a.device+string(a.reason), b.claim+b.device+string(b.reason))
	})
	return out
}

func TestLeaks(t *testing.T) {
	const grace = 5 * time.Minute
	gpu := func(d string) resourceapi.DeviceRequestAllocationResult { return Result("gpu", "node-1", d) }
	running0 := Running(Bound(WithNamedClaim(Pod("healthy", "uid-healthy"), "gpu", "healthy-claim"), "node-1"))
	deletedUnbound := WithNamedClaim(Pod("srv-2", "uid-srv-2"), "gpu", "srv-claim")
	deletedUnbound.DeletionTimestamp = Ptr(metav1.NewTime(T0.Add(-time.Minute)))
	deletedUnbound.Finalizers = []string{"example.com/hold"}
	deletedRunning := Running(Bound(WithNamedClaim(Pod("srv-3", "uid-srv-3"), "gpu", "srv3-claim"), "node-1"))
	deletedRunning.DeletionTimestamp = Ptr(metav1.NewTime(T0.Add(-time.Minute)))
	job := Finished(Bound(WithNamedClaim(Pod("job-0", "uid-job"), "gpu", "job-claim"), "node-1"), corev1.PodSucceeded)
	recreated := WithNamedClaim(Pod("retriever-0", "uid-new"), "gpu", "retriever-claim")
	deleted := Pod("deleted-0", "uid-deleted")
	allocatedAgo := func(name string, ago time.Duration, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		return Allocated(CreatedAt(Claim(name, "uid-"+name), T0.Add(-ago)), "node-1", T0.Add(-ago), results...)
	}
	nodeLess := Allocated(Claim("network-claim", "uid-net"), "", T0.Add(-time.Hour), gpu("gpu-1"))
	// A pod deleted on its node whose containers have stopped, its deletion
	// deadline ago long ago (the kubelet cannot unprepare its claim).
	stuck := func(name string, ago time.Duration) *corev1.Pod {
		p := Running(Bound(WithNamedClaim(Pod(name, "uid-"+name), "gpu", name+"-claim"), "node-1"))
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
		p.DeletionTimestamp = Ptr(metav1.NewTime(T0.Add(-ago)))
		return p
	}
	stuckRunning := stuck("still-running", time.Hour)
	stuckRunning.Status.ContainerStatuses = append(stuckRunning.Status.ContainerStatuses,
		corev1.ContainerStatus{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	stuckFinalizer := stuck("finalized", time.Hour)
	stuckFinalizer.Finalizers = []string{"example.com/hold"}

	tests := []struct {
		name string
		objs []any
		want []leakRow
	}{
		{"healthy reservation", []any{running0, ReservedFor(allocatedAgo("healthy-claim", time.Hour, gpu("gpu-0")), running0)}, nil},
		{"pod_missing", []any{ReservedFor(allocatedAgo("gone-claim", time.Hour, gpu("gpu-0")), Pod("gone", "uid-gone"))},
			[]leakRow{{"gone-claim", "gone", "uid-gone", "node-1", "gpu-0", classify.LeakPodMissing}}},
		{"pod_finished", []any{job, ReservedFor(allocatedAgo("job-claim", time.Hour, gpu("gpu-0")), job)},
			[]leakRow{{"job-claim", "job-0", "uid-job", "node-1", "gpu-0", classify.LeakPodFinished}}},
		{"deleted before it was bound", []any{deletedUnbound, ReservedFor(allocatedAgo("srv-claim", time.Hour, gpu("gpu-0")), deletedUnbound)},
			[]leakRow{{"srv-claim", "srv-2", "uid-srv-2", "node-1", "gpu-0", classify.LeakPodFinished}}},
		{"deleted while running: still its reservation", []any{deletedRunning, ReservedFor(allocatedAgo("srv3-claim", time.Hour, gpu("gpu-0")), deletedRunning)}, nil},
		{"pod_recreated", []any{recreated, ReservedFor(allocatedAgo("retriever-claim", time.Hour, gpu("gpu-0")), Pod("retriever-0", "uid-old"))},
			[]leakRow{{"retriever-claim", "retriever-0", "uid-old", "node-1", "gpu-0", classify.LeakPodRecreated}}},
		{"owner_missing, unallocated", []any{OwnedBy(Claim("deleted-0-gpu", "uid-dg"), deleted, "gpu")},
			[]leakRow{{"deleted-0-gpu", "deleted-0", "uid-deleted", "", "", classify.LeakOwnerMissing}}},
		{"owner_missing, allocated and unreserved: one reason", []any{OwnedBy(allocatedAgo("deleted-0-gpu", time.Hour, gpu("gpu-1")), deleted, "gpu")},
			[]leakRow{{"deleted-0-gpu", "deleted-0", "uid-deleted", "node-1", "gpu-1", classify.LeakOwnerMissing}}},
		{"owner recreated with another UID", []any{WithTemplateClaim(Pod("deleted-0", "uid-other"), "gpu", "t"), OwnedBy(Claim("deleted-0-gpu", "uid-dg"), deleted, "gpu")},
			[]leakRow{{"deleted-0-gpu", "deleted-0", "uid-deleted", "", "", classify.LeakOwnerMissing}}},
		{"owner gone and still reserved: reported once, as pod_missing", []any{ReservedFor(OwnedBy(allocatedAgo("deleted-0-gpu", time.Hour, gpu("gpu-0")), deleted, "gpu"), deleted)},
			[]leakRow{{"deleted-0-gpu", "deleted-0", "uid-deleted", "node-1", "gpu-0", classify.LeakPodMissing}}},
		{"allocated_unreserved past grace", []any{allocatedAgo("prewarmed", 20*time.Minute, gpu("gpu-0"))},
			[]leakRow{{"prewarmed", "", "", "node-1", "gpu-0", classify.LeakUnreserved}}},
		{"allocated_unreserved exactly at grace", []any{allocatedAgo("just-released", grace, gpu("gpu-0"))}, nil},
		{"allocated_unreserved one second past grace", []any{allocatedAgo("just-released", grace+time.Second, gpu("gpu-0"))},
			[]leakRow{{"just-released", "", "", "node-1", "gpu-0", classify.LeakUnreserved}}},
		{"allocated_unreserved within grace", []any{allocatedAgo("just-released", 2*time.Minute, gpu("gpu-0"))}, nil},
		{"per device", []any{ReservedFor(allocatedAgo("two-gpus", time.Hour, gpu("gpu-0"), gpu("gpu-1")), Pod("gone", "uid-gone"))},
			[]leakRow{
				{"two-gpus", "gone", "uid-gone", "node-1", "gpu-0", classify.LeakPodMissing},
				{"two-gpus", "gone", "uid-gone", "node-1", "gpu-1", classify.LeakPodMissing},
			}},
		{"pod_stuck_terminating past the grace period", []any{stuck("stuck", 10*time.Minute), ReservedFor(allocatedAgo("stuck-claim", time.Hour, gpu("gpu-0")), stuck("stuck", 10*time.Minute))},
			[]leakRow{{"stuck-claim", "stuck", "uid-stuck", "node-1", "gpu-0", classify.LeakPodStuckTerminating}}},
		{"deleted, containers stopped, within the grace period", []any{stuck("slow", 2*time.Minute), ReservedFor(allocatedAgo("slow-claim", time.Hour, gpu("gpu-0")), stuck("slow", 2*time.Minute))}, nil},
		{"deleted past the deadline, a container still running", []any{stuckRunning, ReservedFor(allocatedAgo("still-running-claim", time.Hour, gpu("gpu-0")), stuckRunning)}, nil},
		{"deleted past the deadline, held by a finalizer", []any{stuckFinalizer, ReservedFor(allocatedAgo("finalized-claim", time.Hour, gpu("gpu-0")), stuckFinalizer)}, nil},
		{"node from the device when the allocation has no node selector", []any{nodeLess},
			[]leakRow{{"network-claim", "", "", "node-1", "gpu-1", classify.LeakUnreserved}}},
		{"reservation by a non-pod consumer is not a pod leak", []any{func() *resourceapi.ResourceClaim {
			c := allocatedAgo("job-level", time.Hour, gpu("gpu-0"))
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "batch", Resource: "jobs", Name: "train", UID: "uid-job"}}
			return c
		}()}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshotOf(t, world(tt.objs...)...)
			got := leakRows(classify.Leaks(s, T0, grace))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Leaks =\n%+v\nwant\n%+v", got, tt.want)
			}
			for _, l := range classify.Leaks(s, T0, grace) {
				if !slices.Contains(classify.LeakReasons, l.Reason) {
					t.Errorf("unknown leak reason %q", l.Reason)
				}
				if l.Detail == "" {
					t.Errorf("leak %+v has no detail", l)
				}
			}
		})
	}
}

// LeaksChangeAt wakes the exporter when a pod in deletion, stopped on its
// node, passes its deadline by the grace period: no event marks that moment.
func TestLeaksChangeAtStuckTerminating(t *testing.T) {
	const grace = 5 * time.Minute
	p := Running(Bound(WithNamedClaim(Pod("slow", "uid-slow"), "gpu", "slow-claim"), "node-1"))
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}
	deadline := T0.Add(-2 * time.Minute)
	p.DeletionTimestamp = Ptr(metav1.NewTime(deadline))
	c := ReservedFor(Allocated(CreatedAt(Claim("slow-claim", "uid-slow-claim"), T0.Add(-time.Hour)), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), p)
	leakAppearsAt(t, snapshotOf(t, world(p, c)...), grace, deadline.Add(grace), classify.LeakPodStuckTerminating)
}

func TestFormat(t *testing.T) {
	s := snapshotOf(t, world(statusPod(), genClaim(), holder("a", "gpu-0"), holder("b", "gpu-1"))...)
	var buf bytes.Buffer
	if err := classify.Format(&buf, classify.Pod(s, s.Pod(index.Key{Namespace: NS, Name: podName}))); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"Pod prod/llm-0 (uid uid-llm-0)",
		"lane: dra  phase: Pending  node: (not bound)",
		"PASS  claim exists  [controller]  claim llm-0-gpu",
		"PASS  device class exists (request gpu)  [scheduler]  claim llm-0-gpu",
		"FAIL  free matching devices (request gpu)  [scheduler]  claim llm-0-gpu",
		"reason: capacity_exhausted: " + classify.CapacityExhausted.Meaning(),
		"0 of 2 matching devices are free, the request needs 1",
		"Verdict: BLOCKED  layer=scheduler  reason=capacity_exhausted  claim=llm-0-gpu  device_class=gpu.nvidia.com\n",
		"owner: the scheduler layer.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Format output lacks %q:\n%s", want, out)
		}
	}

	for _, tc := range []struct {
		name string
		pod  string
		objs []any
		want string
	}{
		{"ready", podName, world(Ready(Bound(statusPod(), "node-1")), ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), statusPod())), "Verdict: READY  every link passes\n"},
		{"waiting", podName, world(statusPod(), ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), statusPod())), "Verdict: WAITING"},
		{"device plugin", "dp", world(Node("dp-node", 8), Bound(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), "dp-node")), "Verdict: NOT CLASSIFIED  the pod gets its GPUs from the device-plugin lane\n"},
		{"node layer verdict names node and device", podName, world(Bound(statusPod(), "node-1"), ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), statusPod())),
			"Verdict: BLOCKED  layer=node  reason=node_prepare_pending  claim=llm-0-gpu  device_class=gpu.nvidia.com  node=node-1  device=gpu-0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotOf(t, tc.objs...)
			var buf bytes.Buffer
			if err := classify.Format(&buf, classify.Pod(s, s.Pod(index.Key{Namespace: NS, Name: tc.pod}))); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), tc.want) {
				t.Errorf("Format output lacks %q:\n%s", tc.want, buf.String())
			}
		})
	}
}

// explain prints the same text for the same objects: its output goes into
// bug reports and diffs.
func TestFormatDeterministic(t *testing.T) {
	// The class selector fails on every device (no profile attribute on
	// full GPUs) and, for the second pod, several claims hold the devices.
	broken := DeviceClass("broken", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'")
	objs := []any{GPUClass(), broken, Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5")...),
		statusPod(), genClaim(Request("gpu", "broken")),
		WithClaimStatus(WithTemplateClaim(Pod("llm-1", "uid-llm-1"), "gpu", "llm-gpu"), "gpu", "llm-1-gpu"),
		OwnedBy(Claim("llm-1-gpu", "uid-c1"), Pod("llm-1", "uid-llm-1"), "gpu"),
	}
	for i := 0; i < 6; i++ {
		objs = append(objs, holder("h"+string(rune('a'+i)), "gpu-"+string(rune('0'+i))))
	}
	ix := Build(t, index.Config{Now: func() time.Time { return T0 }}, objs...)
	render := func(name string) string {
		s := ix.Snapshot()
		var buf bytes.Buffer
		if err := classify.Format(&buf, classify.Pod(s, s.Pod(index.Key{Namespace: NS, Name: name}))); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	for _, name := range []string{podName, "llm-1"} {
		first := render(name)
		for i := 0; i < 30; i++ {
			if again := render(name); again != first {
				t.Errorf("%s: Format output differs between two snapshots of the same index:\n--- first\n%s\n--- again\n%s", name, first, again)
				break
			}
		}
	}
}

// The scheduler allocates a claim from the devices one node reaches;
// device taints count unless the request tolerates them; a selector that
// fails to evaluate on a device rejects that device's node.
func TestCapacityPerNode(t *testing.T) {
	twoNodes := func(extra ...any) []any {
		return world(append([]any{Node("node-2", 0), Slice("node-2", "node-2", 1, gpus("gpu-0", "gpu-1")...)}, extra...)...)
	}
	holderOn := func(name, node, device string) *resourceapi.ResourceClaim {
		other := Pod("holder-"+name, "uid-holder-"+name)
		return ReservedFor(Allocated(Claim(name, "uid-"+name), node, T0.Add(-time.Hour), Result("gpu", node, device)), other)
	}
	exact := func(n int64, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
		r := Request("gpu", GPUClassName)
		r.Exactly.Count, r.Exactly.AllocationMode = n, mode
		return r
	}
	tainted := func(node string, effect resourceapi.DeviceTaintEffect) *resourceapi.ResourceSlice {
		devs := gpus("gpu-0", "gpu-1")
		for i := range devs {
			devs[i].Taints = []resourceapi.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: effect}}
		}
		return Slice(node, node, 1, devs...)
	}
	tolerating := func(r resourceapi.DeviceRequest, tol resourceapi.DeviceToleration) resourceapi.DeviceRequest {
		r.Exactly = r.Exactly.DeepCopy()
		r.Exactly.Tolerations = []resourceapi.DeviceToleration{tol}
		return r
	}
	cordoned := func(name string) *corev1.Node {
		n := Node(name, 0)
		n.Spec.Unschedulable = true
		return n
	}
	notReady := func(name string) *corev1.Node {
		n := Node(name, 0)
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
		return n
	}
	oldDriver := GPUDevice("gpu-0", "GPU-old-0")
	delete(oldDriver.Attributes, "productName")
	product := "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')"
	// A device published without the type attribute: the gpu.nvidia.com
	// class's own selector fails on it, and so on its node.
	untyped := GPUDevice("gpu-0", "GPU-untyped-0")
	delete(untyped.Attributes, "type")
	classErrorOnNode2 := func(extra ...any) []any {
		return world(append([]any{Node("node-2", 0), Slice("node-2", "node-2", 1, untyped, GPUDevice("gpu-1", "GPU-2-1"))}, extra...)...)
	}
	classErrorNamed := "device gpu.nvidia.com/node-2/gpu-0 on node node-2: DeviceClass gpu.nvidia.com selector #0: CEL runtime error: no such key: type"

	tests := []struct {
		name     string
		req      []resourceapi.DeviceRequest
		objs     []any
		want     classify.Reason
		evidence string
	}{
		{"count 2: one free on each node (fragmented)", []resourceapi.DeviceRequest{exact(2, resourceapi.DeviceAllocationModeExactCount)},
			twoNodes(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-2", "gpu-0")), classify.CapacityExhausted, "at most 1 on one node"},
		{"count 2: two free on node-2", []resourceapi.DeviceRequest{exact(2, resourceapi.DeviceAllocationModeExactCount)},
			twoNodes(holderOn("a", "node-1", "gpu-0")), classify.Unallocated, "2 on node node-2"},
		{"count 3: no node has 3", []resourceapi.DeviceRequest{exact(3, resourceapi.DeviceAllocationModeExactCount)},
			twoNodes(), classify.CapacityExhausted, "cannot be allocated as written"},
		{"All: node-2 entirely free", []resourceapi.DeviceRequest{exact(0, resourceapi.DeviceAllocationModeAll)},
			twoNodes(holderOn("a", "node-1", "gpu-0")), classify.Unallocated, "reachable from node node-2 is free"},
		{"All: a device taken on every node", []resourceapi.DeviceRequest{exact(0, resourceapi.DeviceAllocationModeAll)},
			twoNodes(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-2", "gpu-1")), classify.CapacityExhausted, "no node has all of them free"},
		{"NoSchedule taint not tolerated", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			[]any{GPUClass(), Node("node-1", 0), tainted("node-1", resourceapi.DeviceTaintEffectNoSchedule)}, classify.CapacityExhausted, "0 of 2 matching devices are free"},
		{"NoSchedule taint tolerated (Exists)", []resourceapi.DeviceRequest{tolerating(Request("gpu", GPUClassName),
			resourceapi.DeviceToleration{Key: "gpu.nvidia.com/xid", Operator: resourceapi.DeviceTolerationOpExists})},
			[]any{GPUClass(), Node("node-1", 0), tainted("node-1", resourceapi.DeviceTaintEffectNoSchedule)}, classify.Unallocated, "2 of 2 matching devices are free"},
		{"taint tolerated for another value (Equal)", []resourceapi.DeviceRequest{tolerating(Request("gpu", GPUClassName),
			resourceapi.DeviceToleration{Key: "gpu.nvidia.com/xid", Operator: resourceapi.DeviceTolerationOpEqual, Value: "48"})},
			[]any{GPUClass(), Node("node-1", 0), tainted("node-1", resourceapi.DeviceTaintEffectNoExecute)}, classify.CapacityExhausted, "0 of 2"},
		{"None effect does not keep devices", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			[]any{GPUClass(), Node("node-1", 0), tainted("node-1", resourceapi.DeviceTaintEffectNone)}, classify.Unallocated, "2 of 2"},
		{"selector error on node-1's device: node-2 still serves", []resourceapi.DeviceRequest{withSelectors(Request("gpu", GPUClassName), product)},
			[]any{GPUClass(), Node("node-1", 0), Node("node-2", 0), Slice("node-1", "node-1", 1, oldDriver),
				Slice("node-2", "node-2", 1, gpus("gpu-0")...)}, classify.Unallocated, "the request's selectors fail to evaluate (CEL runtime error) on 1 devices, on node-1: a node that reaches one cannot be used"},
		// The class's own selector fails on node-2's untyped device; node-1
		// is full: the only free GPU is on the node the error rules out.
		{"class selector error: the free GPU is on the node it rules out", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1")), classify.CapacityExhausted,
			"1 of 3 matching devices are free, but at most 0 on one node"},
		{"class selector error named with the capacity verdict", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1")), classify.CapacityExhausted,
			"the selectors of DeviceClass gpu.nvidia.com fail to evaluate (CEL runtime error) on 1 devices, on node-2: a node that reaches one cannot be used"},
		{"class selector error: the device, node and CEL error", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1")), classify.CapacityExhausted, classErrorNamed},
		{"class selector error: how many free devices it takes", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1")), classify.CapacityExhausted,
			"1 of the 1 free matching devices are on those nodes"},
		{"class selector error while node-1 still serves", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(), classify.Unallocated, classErrorNamed},
		{"class selector error while node-1 still serves: the scheduler gives up on it", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			classErrorOnNode2(), classify.Unallocated, "but the scheduler gives up on the errors above"},
		{"the only free GPUs are on a cordoned node", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			twoNodes(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1"), cordoned("node-2")), classify.CapacityExhausted,
			"2 matching devices are on node node-2 (cordoned)"},
		{"the only free GPUs are on a NotReady node", []resourceapi.DeviceRequest{Request("gpu", GPUClassName)},
			twoNodes(holderOn("a", "node-1", "gpu-0"), holderOn("b", "node-1", "gpu-1"), notReady("node-2")), classify.CapacityExhausted,
			"(Ready=Unknown)"},
		{"selector error on every node", []resourceapi.DeviceRequest{withSelectors(Request("gpu", GPUClassName), product)},
			[]any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, oldDriver, GPUDevice("gpu-1", "GPU-1"))},
			classify.SelectorMatchesNothing, "also reaches a device the selectors fail on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := append([]any{statusPod(), genClaim(tt.req...)}, tt.objs...)
			v := verdictOf(t, podName, objs...)
			checkVerdict(t, v, want{tt.want, tt.want.Layer(), claimName, "", ""})
			var out bytes.Buffer
			if err := classify.Format(&out, v); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tt.evidence) {
				t.Errorf("explain lacks %q:\n%s", tt.evidence, out.String())
			}
		})
	}
}

// Situations from clusters in trouble that are not the failure they look
// like at first sight.
func TestLifecycleEdges(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, gpu0), statusPod())
	containers := func(p *corev1.Pod, statuses ...corev1.ContainerStatus) *corev1.Pod {
		p.Status.ContainerStatuses = statuses
		return p
	}
	creating := corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 255, Reason: "Unknown"}}}
	cdiError := corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError",
		Message: "failed to inject CDI devices: unresolvable CDI devices gpu.nvidia.com/gpu=GPU-0"}}}
	sidecar := corev1.ContainerStatus{Name: "proxy", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	notRegistered := func(at time.Time) *corev1.Event {
		return Event("e", statusPod(), vocab.FailedPrepareDynamicResources, "DRA driver gpu.nvidia.com is not registered", at)
	}

	t.Run("after a reboot the kubelet prepares the devices again; its failure is the node's", func(t *testing.T) {
		p := containers(sandbox(Running(Bound(statusPod(), "node-1")), corev1.ConditionFalse, T0.Add(-20*time.Minute)), creating)
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, notRegistered(T0))...),
			want{classify.NodePrepareFailed, classify.LayerNode, claimName, "node-1", "gpu-0"})
		// A failure from before the sandbox was lost is another incident.
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, notRegistered(T0.Add(-time.Hour)))...),
			want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"})
	})
	t.Run("CDI injection failure with a running sidecar", func(t *testing.T) {
		p := containers(sandbox(Running(Bound(statusPod(), "node-1")), corev1.ConditionTrue, T0.Add(-time.Hour)), sidecar, cdiError)
		v := verdictOf(t, podName, world(p, reservedClaim)...)
		checkVerdict(t, v, want{classify.CDISpecMissing, classify.LayerNode, claimName, "node-1", "gpu-0"})
		if !strings.Contains(linkSummary(v), "containers started (cdi_spec_missing)") {
			t.Errorf("links: %s", linkSummary(v))
		}
	})
	t.Run("a pod on a node that stopped reporting is the node's", func(t *testing.T) {
		p := containers(Running(Bound(statusPod(), "node-1")), sidecar)
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, NotReadyNode("node-1"))...),
			want{classify.NodeNotReady, classify.LayerNode, claimName, "node-1", "gpu-0"})
	})
	t.Run("a gated pod waits for its queue, not for DRA", func(t *testing.T) {
		p := statusPod()
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
		// Its claim asks for a class that does not exist: that is not
		// what holds the pod.
		claim := OwnedBy(Claim(claimName, "uid-claim", Request("gpu", "no-such-class")), tmplPod(), "gpu")
		v := verdictOf(t, podName, world(p, claim)...)
		if v.Blocked {
			t.Fatalf("a gated pod is blocked: %s (%s)", v.Reason, linkSummary(v))
		}
		if !strings.Contains(linkSummary(v), "WAIT pod released to the scheduler") {
			t.Errorf("links: %s", linkSummary(v))
		}
		// The controller's links still count.
		missing := WithNamedClaim(Pod("gated-1", "uid-gated-1"), "gpu", "nowhere")
		missing.Spec.SchedulingGates = p.Spec.SchedulingGates
		checkVerdict(t, verdictOf(t, "gated-1", world(missing)...), want{classify.ClaimNotFound, classify.LayerController, "nowhere", "", ""})
	})
	t.Run("a claim in deletion is not there for a new pod", func(t *testing.T) {
		c := Claim("team-gpu", "uid-team", Request("gpu", GPUClassName))
		c.DeletionTimestamp = Ptr(metav1.NewTime(T0.Add(-time.Minute)))
		p := WithNamedClaim(Pod("nb-0", "uid-nb"), "gpu", "team-gpu")
		checkVerdict(t, verdictOf(t, "nb-0", world(p, c)...), want{classify.ClaimNotFound, classify.LayerController, "team-gpu", "", ""})
	})
	t.Run("a Ready pod is READY in explain too, with the failing link shown", func(t *testing.T) {
		p := Ready(Running(Bound(statusPod(), "node-1")))
		unreserved := Allocated(genClaim(), "node-1", T0, gpu0)
		v := verdictOf(t, podName, world(p, unreserved)...)
		if v.Blocked || !v.ReadyDespite || v.Reason != classify.NotReserved {
			t.Fatalf("blocked=%v readyDespite=%v reason=%s, want a Ready verdict that names not_reserved", v.Blocked, v.ReadyDespite, v.Reason)
		}
		var b strings.Builder
		if err := classify.Format(&b, v); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "Verdict: READY") || !strings.Contains(b.String(), "reason=not_reserved") {
			t.Errorf("explain:\n%s", b.String())
		}
	})
	t.Run("devices of a deleted node are not free", func(t *testing.T) {
		// node-2's Node object is gone, its slice not yet collected; the
		// only devices left are there.
		full := ReservedFor(Allocated(Claim("other", "uid-other", Request("gpu", GPUClassName)), "node-1", T0,
			Result("gpu", "node-1", "gpu-0"), Result("gpu", "node-1", "gpu-1")), Pod("x", "uid-x"))
		full.Spec.Devices.Requests[0].Exactly.Count = 2
		full.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
		ghost := Slice("node-2", "node-2", 1, GPUDevice("gpu-0", "GPU-ghost-0"))
		checkVerdict(t, verdictOf(t, podName, world(statusPod(), genClaim(Request("gpu", GPUClassName)), full, ghost, Pod("x", "uid-x"))...),
			want{classify.CapacityExhausted, classify.LayerScheduler, claimName, "", ""})
	})
}

// For firstAvailable the verdict names the class of the subrequest the
// allocator would use, not of the first one listed.
func TestFirstAvailableClass(t *testing.T) {
	req := resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "mig", DeviceClassName: MIGClassName}, // no MIG device published
		{Name: "full", DeviceClassName: GPUClassName},
	}}
	v := verdictOf(t, podName, world(statusPod(), genClaim(req))...)
	checkVerdict(t, v, want{classify.Unallocated, classify.LayerScheduler, claimName, "", ""})
	if v.DeviceClass != GPUClassName {
		t.Errorf("device_class = %q, want %q (the subrequest that passed)", v.DeviceClass, GPUClassName)
	}
}

// A claim whose devices span nodes (a PodGroup's): the verdict names a
// device on the pod's node, so node and device agree.
func TestVerdictDeviceOnThePodsNode(t *testing.T) {
	p := Bound(statusPod(), "node-1")
	c := ReservedFor(Allocated(genClaim(), "", T0, Result("gpu", "node-2", "gpu-5"), Result("gpu", "node-1", "gpu-1")), p)
	v := verdictOf(t, podName, world(p, c, Node("node-2", 0), Slice("node-2", "node-2", 1, GPUDevice("gpu-5", "GPU-5")))...)
	checkVerdict(t, v, want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-1"})
}

// Review cases: CDI wording must be the runtime's, not a path that
// contains "cdi"; an image error reads the same with or without an init
// container; a failure event a fraction of a second before the sandbox
// came up is not a re-prepare failure.
func TestContainerErrorsAndOrdering(t *testing.T) {
	gpu0 := Result("gpu", "node-1", "gpu-0")
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, gpu0), statusPod())
	waiting := func(reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	t.Run("a path containing cdi is not a CDI failure", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
		msg := `failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/opt/mcdis/run.sh": stat /opt/mcdis/run.sh: no such file or directory: unknown`
		p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("RunContainerError", msg)}
		// The kubelet reports the same failure as a Failed event.
		ev := Event("failed", p, vocab.Failed, "Error: "+msg, T0)
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, ev)...), want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"})
	})
	t.Run("a CDI failure with the kubelet's Failed event", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
		msg := "failed to create containerd task: CDI device injection failed: unresolvable CDI devices gpu.nvidia.com/gpu=GPU-0"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("RunContainerError", msg)}
		ev := Event("failed", p, vocab.Failed, "Error: "+msg, T0)
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, ev)...), want{classify.CDISpecMissing, classify.LayerNode, claimName, "node-1", "gpu-0"})
	})
	t.Run("a container restarting after a CDI failure is the node's", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
		msg := "failed to create containerd task: CDI device injection failed: unresolvable CDI devices gpu.nvidia.com/gpu=GPU-0"
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 4,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 1m20s restarting failed container=main"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "StartError", ExitCode: 128, Message: msg}}}}
		backoff := Event("backoff", p, "BackOff", "Back-off restarting failed container main in pod "+podName, T0)
		v := verdictOf(t, podName, world(p, reservedClaim, backoff)...)
		checkVerdict(t, v, want{classify.CDISpecMissing, classify.LayerNode, claimName, "node-1", "gpu-0"})
		var evidence []string
		for _, l := range v.Links {
			evidence = append(evidence, l.Evidence...)
		}
		if s := strings.Join(evidence, "\n"); !strings.Contains(s, "last termination: StartError") {
			t.Errorf("the last termination is not in the evidence:\n%s", s)
		}
	})
	t.Run("a container restarting after its own crash is the application's", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 4,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, Message: "torch.cuda.OutOfMemoryError: CUDA out of memory"}}}}
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim)...), want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"})
	})
	t.Run("an image error with a completed init container is the application's too", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0.Add(-time.Hour))
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "fetch-model", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ImagePullBackOff", "Back-off pulling image")}
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim)...), want{classify.NotReady, classify.LayerApplication, claimName, "node-1", "gpu-0"})
	})
	t.Run("an event in the same second as the sandbox transition is not newer", func(t *testing.T) {
		p := sandbox(Bound(statusPod(), "node-1"), corev1.ConditionTrue, T0)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{waiting("ContainerCreating", "")}
		ev := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: "ev"},
			Regarding:  corev1.ObjectReference{Kind: "Pod", Namespace: NS, Name: podName, UID: podUID},
			Type:       corev1.EventTypeWarning, Reason: vocab.FailedPrepareDynamicResources, Note: "transient",
			EventTime: metav1.NewMicroTime(T0.Add(300 * time.Millisecond)),
		}
		checkVerdict(t, verdictOf(t, podName, world(p, reservedClaim, ev)...), want{classify.NodePreparePending, classify.LayerNode, claimName, "node-1", "gpu-0"})
	})
}

// An unresolvable CDI device names the claim it belongs to: by the claim's
// UID in the name (the drivers name their per-claim specs after it), else
// by the claim's driver as the name's vendor; a name of no claim of the
// pod (a device plugin's) stays node_prepare_failed.
func TestUnresolvableCDIDevicesNameTheirClaim(t *testing.T) {
	two := WithNamedClaim(WithNamedClaim(Bound(Pod("two", "uid-two"), "node-1"), "a", "claim-a"), "b", "claim-b")
	claimA := ReservedFor(Allocated(Claim("claim-a", "uid-claim-a"), "node-1", T0, Result("gpu", "node-1", "gpu-0")), two)
	claimB := ReservedFor(Allocated(Claim("claim-b", "uid-claim-b"), "node-1", T0, Result("gpu", "node-1", "gpu-1")), two)
	creating := func(msg string) *corev1.Pod {
		p := sandbox(two.DeepCopy(), corev1.ConditionTrue, T0.Add(-time.Hour))
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerError", Message: "failed to create containerd container: CDI device injection failed: " + msg}}}}
		return p
	}
	for _, tc := range []struct {
		name, msg string
		want      want
	}{
		{"the second claim by its UID", "unresolvable CDI devices k8s.gpu.nvidia.com/claim=uid-claim-b-gpu-1",
			want{classify.CDISpecMissing, classify.LayerNode, "claim-b", "node-1", "gpu-1"}},
		{"by the driver as vendor", "unresolvable CDI devices k8s.gpu.nvidia.com/gpu=GPU-1",
			want{classify.CDISpecMissing, classify.LayerNode, "claim-a", "node-1", "gpu-0"}},
		{"a device plugin's name", "unresolvable CDI devices nvidia.com/gpu=GPU-1",
			want{classify.NodePrepareFailed, classify.LayerNode, "claim-a", "node-1", "gpu-0"}},
		{"a broken spec", "failed to refresh CDI registry: invalid CDI spec",
			want{classify.NodePrepareFailed, classify.LayerNode, "claim-a", "node-1", "gpu-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkVerdict(t, verdictOf(t, "two", world(creating(tc.msg), claimA, claimB)...), tc.want)
		})
	}
}
