package classify

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// State is the outcome of one link.
type State string

// Link states. Wait marks a link that is not a DRA failure but holds the pod
// (binding in progress); Skip marks links after the first failure.
const (
	Pass State = "PASS"
	Fail State = "FAIL"
	Wait State = "WAIT"
	Skip State = "SKIP"
)

// Link is one step of the chain from a pod to a ready GPU.
type Link struct {
	Step     string
	Layer    Layer
	Claim    string // the claim (or pod claim entry) the step is about
	Class    string // the device class the step is about, when one
	State    State
	Reason   Reason // set when State is Fail
	Evidence []string
}

// Verdict is the decision tree's answer for one pod.
type Verdict struct {
	Pod  *index.Pod
	Lane string
	// DRA is true when the pod gets devices through DRA.
	DRA bool
	// Blocked is true when the pod is not Ready because of a failing link.
	Blocked bool
	Reason  Reason
	Layer   Layer
	Claim   string
	// DeviceClass is the class of the failing request, or of the
	// allocated device for node and application reasons.
	DeviceClass string
	Node        string
	Device      string
	Links       []Link
	// Note says why a pod is not classified (not a DRA pod, finished...).
	Note string
	// ReadyDespite is set when the pod is Ready although a link fails
	// (Reason and Layer name it); the pod is not blocked.
	ReadyDespite bool
}

// Pod walks the decision tree for one pod, with the evidence of every link
// (what explain prints).
func Pod(s *index.Snapshot, p *index.Pod) Verdict { return classifyPod(s, p, true) }

// classifyPod walks the tree; without explain it records only the verdict,
// which is what a scrape needs, and skips building evidence.
func classifyPod(s *index.Snapshot, p *index.Pod, explain bool) Verdict {
	v := Verdict{Pod: p, Lane: s.PodLane(p)}
	v.DRA = v.Lane == index.LaneDRA || v.Lane == index.LaneDRAExtended
	switch {
	case !v.DRA:
		v.Note = "the pod does not use DRA"
		if v.Lane == index.LaneDevicePlugin {
			v.Note = "the pod gets its GPUs from the device-plugin lane"
		}
		return v
	case p.Terminal():
		v.Note = fmt.Sprintf("the pod has finished (phase %s)", p.Obj.Status.Phase)
		return v
	case p.Obj.DeletionTimestamp != nil:
		v.Note = "the pod is being deleted"
		return v
	}
	w := walker{s: s, p: p, v: &v, explain: explain}
	w.walk()
	if v.Blocked && p.Ready() {
		// A failing link does not hold a pod that is Ready (a claim deleted
		// or unreserved under a running pod): explain says so, as the
		// metric, which leaves Ready pods out, does.
		v.Blocked = false
		v.ReadyDespite = true
	}
	return v
}

// Blocked returns the verdicts of every DRA pod that is blocked.
func Blocked(s *index.Snapshot) []Verdict {
	var out []Verdict
	for _, p := range s.Pods {
		if p.Ready() || p.Terminal() || p.Obj.DeletionTimestamp != nil {
			continue
		}
		if v := classifyPod(s, p, false); v.Blocked {
			out = append(out, v)
		}
	}
	return out
}

type walker struct {
	s       *index.Snapshot
	p       *index.Pod
	v       *Verdict
	explain bool
	// first failure so far
	failed *Link
	fClaim *index.Claim
	fName  string
}

func (w *walker) add(l Link) {
	if w.explain {
		w.v.Links = append(w.v.Links, l)
	}
}

func (w *walker) fail(l Link, claim *index.Claim, claimName string) {
	l.State = Fail
	l.Layer = l.Reason.Layer()
	w.add(l)
	if w.failed == nil || l.Reason.rank() < w.failed.Reason.rank() {
		cp := l
		w.failed, w.fClaim, w.fName = &cp, claim, claimName
	}
}

func (w *walker) walk() {
	claims := w.s.ResolvePodClaims(w.p)
	gated := len(w.p.SchedulingGates()) > 0
	for _, pc := range claims {
		w.walkClaim(pc, gated)
	}
	if w.v.Lane == index.LaneDRAExtended && !hasExtendedClaim(claims) && !gated {
		w.walkExtendedRequests()
	}
	if w.failed != nil {
		w.add(Link{Step: "pod scheduled, prepared, ready", State: Skip, Evidence: []string{"not evaluated: an earlier link failed"}})
		w.conclude()
		return
	}
	w.walkPod(claims)
	w.conclude()
}

func hasExtendedClaim(claims []index.PodClaim) bool {
	for _, pc := range claims {
		if pc.Name == "" {
			return true
		}
	}
	return false
}

func (w *walker) conclude() {
	if w.failed == nil {
		return
	}
	v := w.v
	v.Blocked = true
	v.Reason = w.failed.Reason
	v.Layer = w.failed.Reason.Layer()
	v.Claim = w.fName
	v.DeviceClass = w.failed.Class
	v.Node = w.p.Obj.Spec.NodeName
	c := w.fClaim
	if c == nil && v.Layer != LayerController && v.Layer != LayerScheduler {
		c = firstAllocated(w.s.ResolvePodClaims(w.p))
		if c != nil {
			v.Claim = c.Key.Name
		}
	}
	if c != nil && len(c.Results) > 0 {
		// A claim may span nodes (a PodGroup's, network-attached devices):
		// name a device on the pod's node, so that node and device agree.
		r := c.Results[0]
		for _, x := range c.Results {
			if d := w.s.Device(x.Device); v.Node != "" && d != nil && d.Node == v.Node {
				r = x
				break
			}
		}
		v.Device = r.Device.Device
		if v.DeviceClass == "" {
			v.DeviceClass = r.Class
		}
		if v.Node == "" {
			v.Node = claimNode(w.s, c)
		}
	}
}

func firstAllocated(claims []index.PodClaim) *index.Claim {
	for _, pc := range claims {
		if pc.Claim != nil && pc.Claim.Allocated() {
			return pc.Claim
		}
	}
	return nil
}

// claimNode is the node of an allocation: its node selector, else the node
// of its first node-local device.
func claimNode(s *index.Snapshot, c *index.Claim) string {
	if c.Node != "" {
		return c.Node
	}
	for _, r := range c.Results {
		if d := s.Device(r.Device); d != nil && d.Node != "" {
			return d.Node
		}
	}
	return ""
}

// walkClaim checks one claim of the pod. For a gated pod only the
// controller's links count: the scheduler has not seen the pod yet.
func (w *walker) walkClaim(pc index.PodClaim, gated bool) {
	label := pc.ClaimName
	if label == "" {
		label = pc.Name
	}
	exists := Link{Step: "claim exists", Layer: LayerController, Claim: label}
	if pc.Claim == nil {
		switch {
		case pc.Template != "" || pc.Name == "":
			exists.Reason = ClaimNotCreated
			exists.Evidence = w.notCreatedEvidence(pc)
		default:
			exists.Reason = ClaimNotFound
			exists.Evidence = []string{fmt.Sprintf("pod.spec.resourceClaims[%s] names ResourceClaim %s/%s, which does not exist", pc.Name, w.p.Key.Namespace, pc.ClaimName)}
		}
		w.fail(exists, nil, pc.ClaimName)
		return
	}
	c := pc.Claim
	exists.State = Pass
	switch {
	case pc.Template != "":
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s generated from template %s for pod claim %s", c.Key, pc.Template, pc.Name)}
	case pc.Name == "":
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s created by the scheduler for the pod's extended-resource requests", c.Key)}
	default:
		exists.Evidence = []string{fmt.Sprintf("ResourceClaim %s named by pod claim %s", c.Key, pc.Name)}
	}
	if c.Obj.DeletionTimestamp != nil && !c.ReservedForPod(w.p) {
		exists.Reason = ClaimNotFound
		exists.Evidence = append(exists.Evidence, fmt.Sprintf("the claim is being deleted (deletionTimestamp %s): the scheduler allocates and reserves no claim in deletion; recreate it, or the pod",
			c.Obj.DeletionTimestamp.UTC().Format("2006-01-02T15:04:05Z")))
		w.fail(exists, c, c.Key.Name)
		return
	}
	w.add(exists)
	if gated {
		return
	}

	if !c.Allocated() {
		if ok, class := w.walkRequests(c); ok {
			l := Link{Step: "claim allocated", Claim: c.Key.Name, Class: class, Reason: Unallocated}
			l.Evidence = append([]string{"every request has free matching devices, yet the claim is unallocated: look at node resources, affinity, taints and claim constraints"}, w.schedulingEvidence()...)
			w.fail(l, c, c.Key.Name)
		}
		return
	}
	alloc := Link{Step: "claim allocated", Layer: LayerScheduler, Claim: c.Key.Name, State: Pass}
	for _, r := range c.Results {
		alloc.Evidence = append(alloc.Evidence, w.describeResult(c, r))
	}
	if n := claimNode(w.s, c); n != "" {
		alloc.Evidence = append(alloc.Evidence, "node: "+n)
	}
	w.add(alloc)

	reserved := Link{Step: "claim reserved for pod", Layer: LayerScheduler, Claim: c.Key.Name}
	if !c.ReservedForPod(w.p) {
		reserved.Reason = NotReserved
		reserved.Evidence = []string{fmt.Sprintf("status.reservedFor names %s, not this pod (uid %s)", describeReservations(c), w.p.UID)}
		reserved.Evidence = append(reserved.Evidence, w.schedulingEvidence()...)
		w.fail(reserved, c, c.Key.Name)
		return
	}
	reserved.State = Pass
	reserved.Evidence = []string{fmt.Sprintf("status.reservedFor includes pod %s (uid %s)", w.p.Key.Name, w.p.UID)}
	w.add(reserved)
}

func (w *walker) describeResult(c *index.Claim, r index.Result) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "request %s: device %s", r.Request, r.Device)
	if r.Class != "" {
		fmt.Fprintf(b, " (class %s)", r.Class)
	}
	if d := w.s.Device(r.Device); d != nil {
		if d.GPUUUID != "" {
			fmt.Fprintf(b, ", uuid %s", d.GPUUUID)
		}
		if d.Node != "" {
			fmt.Fprintf(b, ", node %s", d.Node)
		}
		fmt.Fprintf(b, ", slice %s", d.Slice)
	} else {
		b.WriteString(", not published by any current ResourceSlice")
	}
	if r.AdminAccess {
		b.WriteString(", admin access")
	}
	return b.String()
}

func describeReservations(c *index.Claim) string {
	if len(c.Obj.Status.ReservedFor) == 0 {
		return "nobody"
	}
	parts := make([]string, 0, len(c.Obj.Status.ReservedFor))
	for _, r := range c.Obj.Status.ReservedFor {
		parts = append(parts, fmt.Sprintf("%s %s (uid %s)", r.Resource, r.Name, r.UID))
	}
	return strings.Join(parts, ", ")
}

func (w *walker) notCreatedEvidence(pc index.PodClaim) []string {
	var ev []string
	switch {
	case pc.Name == "":
		ev = append(ev, fmt.Sprintf("pod.status.extendedResourceClaimStatus names ResourceClaim %s, which does not exist", pc.ClaimName))
	case pc.ClaimName != "":
		ev = append(ev, fmt.Sprintf("pod.status.resourceClaimStatuses[%s] names ResourceClaim %s, which does not exist (or belongs to another pod)", pc.Name, pc.ClaimName))
	default:
		ev = append(ev, fmt.Sprintf("no claim generated from template %s for pod claim %s (pod.status.resourceClaimStatuses has no entry)", pc.Template, pc.Name))
	}
	for _, e := range w.s.PodEvents(w.p) {
		if e.Reason == index.ReasonFailedResourceClaimCreation {
			ev = append(ev, eventEvidence(e))
			break
		}
	}
	return ev
}

func eventEvidence(e *index.Event) string {
	reporter := e.Reporter
	if reporter == "" {
		reporter = "unknown"
	}
	return fmt.Sprintf("event %s from %s at %s (x%d): %s", e.Reason, reporter, e.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), e.Count, e.Message)
}

func (w *walker) schedulingEvidence() []string {
	for _, e := range w.s.PodEvents(w.p) {
		if e.Reason == index.ReasonFailedScheduling {
			return []string{eventEvidence(e)}
		}
	}
	for _, c := range w.p.Obj.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return []string{fmt.Sprintf("condition PodScheduled=False (%s): %s", c.Reason, c.Message)}
		}
	}
	return nil
}

// walkPod checks the links after allocation: binding, the node, device
// preparation, containers, readiness.
func (w *walker) walkPod(claims []index.PodClaim) {
	pod := w.p.Obj
	if gates := w.p.SchedulingGates(); len(gates) > 0 {
		w.add(gatedLink(gates))
		return
	}
	if pod.Spec.NodeName == "" {
		l := Link{Step: "pod bound to a node", Layer: LayerScheduler, State: Wait,
			Evidence: []string{"every claim is allocated and reserved for the pod; binding is in progress (not a DRA failure)"}}
		l.Evidence = append(l.Evidence, w.schedulingEvidence()...)
		w.add(l)
		return
	}
	w.add(Link{Step: "pod bound to a node", Layer: LayerScheduler, State: Pass, Evidence: []string{"spec.nodeName: " + pod.Spec.NodeName}})

	if n := w.s.Node(pod.Spec.NodeName); n != nil && n.NotReady != "" && !w.p.Ready() {
		w.fail(Link{Step: "node ready", Reason: NodeNotReady, Evidence: []string{
			fmt.Sprintf("node %s: %s; its kubelet does not run or report the pod (the node lifecycle controller marks its pods not Ready)", n.Name, n.NotReady)}}, nil, "")
		return
	}

	failure := nodeFailure(w.s.PodEvents(w.p))
	prepared := Link{Step: "node prepared the devices", Layer: LayerNode}
	state, since := w.p.Sandbox()
	if state != index.SandboxReady {
		if failure != nil && state == index.SandboxNotReady && !since.IsZero() && eventSecond(failure).Before(since) {
			failure = nil // before the sandbox was lost: an older incident
		}
		if failure != nil {
			w.failOnEvent(prepared, failure, append(sandboxEvidence(pod), waitingReasons(pod)...)...)
			return
		}
		prepared.Reason = NodePreparePending
		prepared.Evidence = []string{fmt.Sprintf("pod phase %s; the pod sandbox is not ready, so the devices are not (or no longer) prepared", pod.Status.Phase)}
		prepared.Evidence = append(prepared.Evidence, sandboxEvidence(pod)...)
		prepared.Evidence = append(prepared.Evidence, waitingReasons(pod)...)
		w.fail(prepared, nil, "")
		return
	}
	prepared.State = Pass
	prepared.Evidence = []string{"the pod sandbox is ready (or a container has run), so NodePrepareResources succeeded"}
	w.add(prepared)

	started := Link{Step: "containers started", Layer: LayerNode}
	running, waitsPast := w.p.Started(), w.p.WaitsPastPrepare()
	switch msg := cdiFailure(pod); {
	case msg != "":
		// CDI injection happens when each container is created: a
		// container whose creation failed on its devices is a node
		// failure even when others (sidecars, init containers) have run.
		started.Reason = NodePrepareFailed
		started.Evidence = []string{msg}
		if failure != nil && (since.IsZero() || !eventSecond(failure).Before(since)) {
			started.Evidence = append(started.Evidence, eventEvidence(failure))
		}
		w.fail(started, nil, "")
		return
	case !running && !waitsPast && failure != nil && !since.IsZero() && eventSecond(failure).After(since):
		// The sandbox stands, but a later sync failed to prepare the
		// devices again (a kubelet restart): no container can start.
		w.failOnEvent(started, failure)
		return
	case !running && waitsPast:
		// The devices are prepared; the workload's own definition stops
		// it (an image that does not exist or cannot be pulled, a missing
		// Secret or ConfigMap): the application's, however the pod is
		// built (with or without init containers and sidecars).
		started.Layer = LayerApplication
		started.Reason = NotReady
		started.Evidence = append([]string{fmt.Sprintf("pod phase %s; the devices are prepared, a container cannot start because of its image or configuration", pod.Status.Phase)}, waitingReasons(pod)...)
		w.fail(started, nil, "")
		return
	case !running:
		started.Reason = NodePreparePending
		started.Evidence = append([]string{fmt.Sprintf("pod phase %s; the devices are prepared, no container has started yet", pod.Status.Phase)}, waitingReasons(pod)...)
		w.fail(started, nil, "")
		return
	}
	started.State = Pass
	started.Evidence = []string{"a container has started"}
	w.add(started)

	ready := Link{Step: "pod ready", Layer: LayerApplication}
	if !w.p.Ready() {
		ready.Reason = NotReady
		ready.Evidence = readinessEvidence(pod)
		w.fail(ready, nil, "")
		return
	}
	ready.State = Pass
	ready.Evidence = []string{"condition Ready=True"}
	w.add(ready)
}

func gatedLink(gates []string) Link {
	return Link{Step: "pod released to the scheduler", Layer: LayerScheduler, State: Wait, Evidence: []string{
		"scheduling gates " + strings.Join(gates, ", ") + " hold the pod: the scheduler does not see it until whoever owns the gates (a queue such as Kueue) removes them; not a DRA failure"}}
}

// cdiFailure returns the first container whose creation failed on its
// devices (CDI injection, DRA), as evidence; "" when none.
func cdiFailure(pod *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		wt := cs.State.Waiting
		if wt == nil || wt.Message == "" {
			continue
		}
		switch wt.Reason {
		case "CreateContainerError", "RunContainerError", "StartError", "ContainerCannotRun":
		default:
			continue
		}
		if cdiMessage(wt.Message) {
			return fmt.Sprintf("container %s waiting: %s: %s", cs.Name, wt.Reason, wt.Message)
		}
	}
	return ""
}

func sandboxEvidence(pod *corev1.Pod) []string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			s := fmt.Sprintf("condition PodReadyToStartContainers=%s since %s", c.Status, c.LastTransitionTime.UTC().Format("2006-01-02T15:04:05Z"))
			if c.Reason != "" {
				s += " (" + c.Reason + ")"
			}
			return []string{s}
		}
	}
	return nil
}

// failOnEvent fails the link with node_prepare_failed on the kubelet's
// event, naming the claim the event names.
func (w *walker) failOnEvent(l Link, e *index.Event, evidence ...string) {
	l.Reason = NodePrepareFailed
	l.Evidence = append([]string{eventEvidence(e)}, evidence...)
	claim := w.failedClaim(e)
	if claim != nil {
		l.Claim = claim.Key.Name
	}
	w.fail(l, claim, l.Claim)
}

// eventSecond is the event's time in whole seconds, the precision of the
// pod conditions it is compared with.
func eventSecond(e *index.Event) time.Time { return e.Timestamp.Truncate(time.Second) }

// failedClaim returns the pod's claim a node failure event names (nil when
// it names none).
func (w *walker) failedClaim(e *index.Event) *index.Claim {
	var best *index.Claim
	for _, pc := range w.s.ResolvePodClaims(w.p) {
		if pc.Claim == nil {
			continue
		}
		// The longest name that appears wins: claim names may be prefixes
		// of each other (llm-0-gpu, llm-0-gpu-mig).
		if n := pc.Claim.Key.Name; strings.Contains(e.Message, n) && (best == nil || len(n) > len(best.Key.Name)) {
			best = pc.Claim
		}
	}
	return best
}

// nodeFailure returns the newest node-side DRA failure event.
func nodeFailure(events []*index.Event) *index.Event {
	for _, e := range events {
		if index.IsNodePrepareFailure(e.Reason, e.Message) {
			return e
		}
	}
	return nil
}

func waitingReasons(pod *corev1.Pod) []string {
	var out []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.State.Waiting != nil {
			s := fmt.Sprintf("container %s waiting: %s", cs.Name, cs.State.Waiting.Reason)
			if cs.State.Waiting.Message != "" {
				s += ": " + cs.State.Waiting.Message
			}
			out = append(out, s)
		}
	}
	return out
}

func readinessEvidence(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			s := fmt.Sprintf("condition %s=%s", c.Type, c.Status)
			if c.Reason != "" {
				s += " (" + c.Reason + ")"
			}
			out = append(out, s)
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 || cs.Ready {
			continue // done, or a sidecar that is ready
		}
		out = append(out, containerEvidence("init container "+cs.Name+" not done", cs))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if !cs.Ready {
			out = append(out, containerEvidence("container "+cs.Name+" not ready", cs))
		}
	}
	return out
}

func containerEvidence(what string, cs corev1.ContainerStatus) string {
	s := fmt.Sprintf("%s, %d restarts", what, cs.RestartCount)
	if cs.State.Waiting != nil {
		s += ", waiting: " + cs.State.Waiting.Reason
	}
	if t := cs.LastTerminationState.Terminated; t != nil {
		s += fmt.Sprintf(", last exit %d (%s)", t.ExitCode, t.Reason)
	}
	return s
}

// cdiMessage reports whether a container's waiting message says its
// devices could not be injected: the runtime's CDI and DRA wording, not any
// "cdi" in a path or an image name.
func cdiMessage(msg string) bool {
	m := strings.ToLower(msg)
	for _, token := range []string{"cdi device", "cdi spec", "unresolvable cdi", "inject cdi", "cdi injection",
		"dynamic resource", "prepareresources", "resourceclaim"} {
		if strings.Contains(m, token) {
			return true
		}
	}
	return false
}
