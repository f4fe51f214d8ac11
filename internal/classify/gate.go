package classify

// The article's evidence gates, the part the API server can prove: the api
// gate (the claim is allocated, reserved for the pod, the pod is bound to
// the node of the allocation, no repeated allocation failures) and the
// negative control (a pod whose selector must match nothing stays Pending
// for that reason). The node and workload gates join the node agent's
// series and are recording rules (rules/gates.yaml); offline, NodeGate
// reads the agents' recorded series.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// Gate names an evidence gate.
type Gate string

// The gates, in the order a canary meets them.
const (
	GateAPI      Gate = "api"
	GateNode     Gate = "node"
	GateWorkload Gate = "workload"
)

// Gates lists the gates in order.
var Gates = []Gate{GateAPI, GateNode, GateWorkload}

var gateOwner = map[Gate]string{
	GateAPI:      "platform team (resourceclaim controller, scheduler, DeviceClasses, ResourceSlices)",
	GateNode:     "node/runtime owner (kubelet, DRA driver's kubelet plugin, CDI, container runtime)",
	GateWorkload: "inference owner (the workload: readiness, model, GPU use)",
}

// Owner names the team that owns the gate's failures (the article's
// sentence for each gate).
func (g Gate) Owner() string { return gateOwner[g] }

// Reasons of the api gate beyond the decision tree's controller and
// scheduler reasons, which the gate reuses when the tree names one.
const (
	// GateSchedulingGated: the pod has scheduling gates; the scheduler has
	// not tried it.
	GateSchedulingGated = "scheduling_gated"
	// GateNotBound: every claim is allocated and reserved, the pod is not
	// bound yet.
	GateNotBound = "not_bound"
	// GateNodeMismatch: the pod is bound to another node than the one its
	// allocation is for.
	GateNodeMismatch = "node_mismatch"
	// GateAllocationRetried: the scheduler failed to allocate the pod's
	// claims RepeatedAllocationFailures times or more.
	GateAllocationRetried = "allocation_retried"
)

// APIGateReasons lists every reason of a failing api gate: the tree's
// controller and scheduler reasons, then the gate's own.
var APIGateReasons = func() []string {
	var out []string
	for _, r := range Reasons {
		if l := r.Layer(); l == LayerController || l == LayerScheduler {
			out = append(out, string(r))
		}
	}
	return append(out, GateSchedulingGated, GateNotBound, GateNodeMismatch, GateAllocationRetried)
}()

// RepeatedAllocationFailures is how many times the scheduler may fail to
// allocate a pod's claims before the api gate calls it repeated. The
// scheduler words one FailedScheduling event per attempt and the API server
// counts the repeats (series.count): one failure is the scheduler trying
// before a slice was published or a device freed, a second is its retry on
// that change; a third attempt that fails means the allocation path is not
// clean. The event ages out with the API server's --event-ttl (1h by
// default), and so does the failure it causes: recreate the canary once
// the cause is understood.
const RepeatedAllocationFailures = 3

// GateResult is one gate of one pod.
type GateResult struct {
	Gate Gate
	Pass bool
	// Reason is set when the gate fails.
	Reason string
	// Claim and Node name what the reason is about, where known.
	Claim string
	Node  string
	// Evidence is filled when asked for (the gates command).
	Evidence []string
}

// APIGate evaluates the api gate of a DRA pod that is not finished.
// blocked is the pod's verdict when the decision tree has one (Memo),
// nil otherwise: its controller and scheduler reasons say why a claim is
// not allocated better than the gate can. With explain, every check leaves
// its evidence.
func APIGate(s *index.Snapshot, p *index.Pod, blocked *Verdict, explain bool) GateResult {
	g := GateResult{Gate: GateAPI, Pass: true, Node: p.Obj.Spec.NodeName}
	fail := func(reason, claim string, evidence ...string) {
		if g.Pass {
			g.Pass, g.Reason, g.Claim = false, reason, claim
		}
		if explain {
			g.Evidence = append(g.Evidence, evidence...)
		}
	}
	pass := func(evidence string) {
		if explain {
			g.Evidence = append(g.Evidence, evidence)
		}
	}
	if blocked != nil && (blocked.Layer == LayerController || blocked.Layer == LayerScheduler) {
		fail(string(blocked.Reason), blocked.Claim, fmt.Sprintf("decision tree: %s (%s)", blocked.Reason, blocked.Reason.Meaning()))
	}
	claims := s.ResolvePodClaims(p)
	if len(claims) == 0 && p.Obj.Spec.NodeName != "" {
		// Before binding, the scheduler has yet to create the claim of an
		// extended-resource request: not_bound says it below.
		fail(string(ClaimNotCreated), "", "the pod is bound but has no resource claim")
	}
	gated := len(p.SchedulingGates()) > 0
	var mismatch []string
	for _, pc := range claims {
		c := pc.Claim
		name := pc.ClaimName
		if name == "" {
			name = pc.Name
		}
		switch {
		case c == nil && (pc.Template != "" || pc.Name == ""):
			fail(string(ClaimNotCreated), name, fmt.Sprintf("claim %s: not created", name))
		case c == nil:
			fail(string(ClaimNotFound), name, fmt.Sprintf("claim %s: not found", name))
		case !c.Allocated() && gated:
			// The scheduler has not tried the pod: its gates say why.
		case !c.Allocated():
			fail(string(Unallocated), name, fmt.Sprintf("claim %s: not allocated", name))
		case !c.ReservedForPod(p):
			fail(string(NotReserved), name, fmt.Sprintf("claim %s: allocated, status.reservedFor names %s, not this pod (uid %s)", name, describeReservations(c), p.UID))
		default:
			if nodes := allocationNodes(s, c); len(nodes) > 0 {
				if node := p.Obj.Spec.NodeName; node != "" && !slices.Contains(nodes, node) {
					mismatch = append(mismatch, fmt.Sprintf("claim %s is allocated for node %s", name, strings.Join(nodes, " or ")))
				}
			}
			if explain {
				pass(fmt.Sprintf("claim %s: allocated %s; reserved for the pod", name, describeDevices(s, c)))
			}
		}
	}
	node := p.Obj.Spec.NodeName
	switch {
	case gated:
		fail(GateSchedulingGated, "", fmt.Sprintf("scheduling gates %v", p.SchedulingGates()))
	case node == "":
		fail(GateNotBound, "", "the pod is not bound to a node")
	case len(mismatch) > 0:
		fail(GateNodeMismatch, "", fmt.Sprintf("the pod is bound to node %s, but %s", node, strings.Join(mismatch, "; ")))
	default:
		pass("the scheduler bound the pod to node " + node + ", a node of its allocation")
	}
	if e := repeatedAllocationFailure(s, p); e != nil {
		fail(GateAllocationRetried, "", fmt.Sprintf("the scheduler failed to allocate %d times (%d allowed): %s", e.Count, RepeatedAllocationFailures-1, eventEvidence(e)))
	} else {
		pass(fmt.Sprintf("no repeated allocation failure (fewer than %d FailedScheduling about claims)", RepeatedAllocationFailures))
	}
	return g
}

// allocationNodes are the nodes a claim's allocation is for: its node
// selector's node, else the nodes of its node-local devices (a PodGroup's
// claim spans several); none for network-attached devices.
func allocationNodes(s *index.Snapshot, c *index.Claim) []string {
	if c.Node != "" {
		return []string{c.Node}
	}
	var out []string
	for _, r := range c.Results {
		if d := s.Device(r.Device); d != nil && d.Node != "" && !slices.Contains(out, d.Node) {
			out = append(out, d.Node)
		}
	}
	return out
}

// repeatedAllocationFailure returns the pod's FailedScheduling event about
// its claims that the scheduler repeated RepeatedAllocationFailures times or
// more, nil when none.
func repeatedAllocationFailure(s *index.Snapshot, p *index.Pod) *index.Event {
	for _, e := range s.PodEvents(p) {
		if e.Reason == vocab.FailedScheduling && e.Count >= RepeatedAllocationFailures && vocab.AllocationFailure(e.Message) {
			return e
		}
	}
	return nil
}

func describeDevices(s *index.Snapshot, c *index.Claim) string {
	out := ""
	for i, r := range c.Results {
		if i > 0 {
			out += ", "
		}
		out += "device " + r.Device.String()
		if d := s.Device(r.Device); d != nil {
			if d.GPUUUID != "" {
				out += " (uuid " + d.GPUUUID + ")"
			}
			if d.Node != "" {
				out += " on node " + d.Node
			}
		}
	}
	return out
}

// Negative control outcomes. A control holds while it is Pending because
// its own selectors (or capacity requests) exclude every device of a class
// that publishes devices: that, and only that, proves the boundary it was
// written for. It is broken once it gets a device or runs, or when devices
// match it and it waits only for one to be free. It is invalid when it
// could not have got a device whatever the boundary: its DeviceClass does
// not exist, or the class publishes no device.
const (
	ControlAllocated      = "allocated"
	ControlStarted        = "started"
	ControlMatchesDevices = "matches_devices"
	ControlNotEvaluated   = "not_evaluated"
)

// ControlState is a negative control's state.
type ControlState string

// The states of a negative control.
const (
	ControlHolds   ControlState = "HOLDS"
	ControlBroken  ControlState = "BROKEN"
	ControlInvalid ControlState = "INVALID"
)

// controlHolds are the tree's reasons that keep a negative control Pending
// because its selectors exclude every device that exists.
var controlHolds = []Reason{SelectorMatchesNothing}

// controlInvalid are the tree's reasons that keep a control Pending without
// testing its selectors: there is no device to exclude.
var controlInvalid = map[Reason]string{
	DeviceClassNotFound: "its DeviceClass does not exist, so no selector was tested: point it at the class the canary uses",
	NoDevicesForClass:   "its DeviceClass publishes no device, so no selector was tested: point it at a class whose driver publishes devices",
}

// ControlReasons lists every reason of dra_negative_control: the holding
// ones, the invalid ones, then the broken ones.
var ControlReasons = func() []string {
	var out []string
	for _, r := range controlHolds {
		out = append(out, string(r))
	}
	out = append(out, string(DeviceClassNotFound), string(NoDevicesForClass))
	return append(out, ControlAllocated, ControlStarted, ControlMatchesDevices, ControlNotEvaluated)
}()

// ControlStateOf returns the state a control with the reason is in, and for
// an invalid one why it proves nothing.
func ControlStateOf(reason string) (ControlState, string) {
	if slices.Contains(controlHolds, Reason(reason)) {
		return ControlHolds, ""
	}
	if why, ok := controlInvalid[Reason(reason)]; ok {
		return ControlInvalid, why
	}
	return ControlBroken, ""
}

// ControlResult is what a negative control shows.
type ControlResult struct {
	State ControlState
	// Why says what keeps an invalid control from proving the boundary.
	Why    string
	Holds  bool
	Reason string
	Claim  string
	Node   string
	Device string
	// Evidence is filled when asked for.
	Evidence []string
}

// NegativeControl evaluates a pod marked as a negative control: it must
// stay Pending with a reason that says no device can match it. A control
// that was allocated a device, or has run, shows that its selector does not
// enforce the boundary it was written for; one that waits for matching
// devices to be free shows the same, only later. blocked is its verdict
// (Memo), nil when the tree has none.
func NegativeControl(s *index.Snapshot, p *index.Pod, blocked *Verdict, explain bool) ControlResult {
	r := negativeControl(s, p, blocked, explain)
	r.State, r.Why = ControlStateOf(r.Reason)
	r.Holds = r.State == ControlHolds
	return r
}

func negativeControl(s *index.Snapshot, p *index.Pod, blocked *Verdict, explain bool) ControlResult {
	r := ControlResult{Node: p.Obj.Spec.NodeName}
	for _, pc := range s.ResolvePodClaims(p) {
		c := pc.Claim
		if c == nil || !c.Allocated() {
			continue
		}
		r.Reason, r.Claim = ControlAllocated, c.Key.Name
		if len(c.Results) > 0 {
			r.Device = c.Results[0].Device.Device
		}
		if r.Node == "" {
			r.Node = claimNode(s, c)
		}
		if explain {
			r.Evidence = append(r.Evidence, fmt.Sprintf("claim %s: allocated %s", c.Key.Name, describeDevices(s, c)))
		}
		break
	}
	if p.Started() {
		r.Reason = ControlStarted
		if explain {
			r.Evidence = append(r.Evidence, fmt.Sprintf("a container has run (pod phase %s)", p.Obj.Status.Phase))
		}
	}
	if r.Reason != "" {
		return r
	}
	if blocked == nil {
		r.Reason = ControlNotEvaluated
		if explain {
			r.Evidence = append(r.Evidence, "the decision tree names no blocking link yet (claim being generated, scheduling gates, or the scheduler has not tried the pod)")
		}
		return r
	}
	r.Claim = blocked.Claim
	switch {
	case slices.Contains(controlHolds, blocked.Reason), controlInvalid[blocked.Reason] != "":
		r.Reason = string(blocked.Reason)
	case blocked.Reason == CapacityExhausted || blocked.Reason == Unallocated:
		r.Reason = ControlMatchesDevices
	default:
		r.Reason = ControlNotEvaluated
	}
	if explain {
		r.Evidence = append(r.Evidence, fmt.Sprintf("decision tree: %s (%s)", blocked.Reason, blocked.Reason.Meaning()))
	}
	return r
}
