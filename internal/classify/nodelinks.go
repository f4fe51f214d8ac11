package classify

// The links after allocation: the pod is bound, its node is ready, the
// kubelet prepared the devices, containers started, the pod is Ready.

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fmt"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// walkPod checks the links after allocation: binding, the node, device
// preparation, containers, readiness.
func (w *walker) walkPod() {
	pod := w.p.Obj
	if gates := w.p.SchedulingGates(); len(gates) > 0 {
		w.add(gatedLink(gates))
		return
	}
	if pod.Spec.NodeName == "" {
		if w.walkBindingConditions() {
			return
		}
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
		// Devices of a claim that no CDI spec the runtime loaded defines
		// (most often a claim the kubelet and the driver hold prepared
		// without its spec file: a reboot emptied /var/run/cdi,
		// kubernetes#141433): the kubelet retries the container for good
		// and never prepares again.
		started.Reason = NodePrepareFailed
		started.Evidence = []string{msg}
		if failure != nil && (since.IsZero() || !eventSecond(failure).Before(since)) {
			started.Evidence = append(started.Evidence, eventEvidence(failure))
		}
		claim := w.unresolvedClaim(msg)
		if claim != nil {
			started.Reason = CDISpecMissing
			started.Claim = claim.Key.Name
			w.fail(started, claim, started.Claim)
			return
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
// devices (CDI injection, DRA), as evidence; "" when none. A container the
// kubelet restarts after such a failure waits in CrashLoopBackOff, and its
// last termination (StartError) carries the runtime's message.
func cdiFailure(pod *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		wt := cs.State.Waiting
		if wt == nil {
			continue
		}
		if vocab.ContainerCreateFailed(wt.Reason) && vocab.DeviceInjectionFailure(wt.Message) {
			return fmt.Sprintf("container %s waiting: %s: %s", cs.Name, wt.Reason, wt.Message)
		}
		if t := cs.LastTerminationState.Terminated; wt.Reason == vocab.CrashLoopBackOff && t != nil &&
			vocab.ContainerCreateFailed(t.Reason) && vocab.DeviceInjectionFailure(t.Message) {
			return fmt.Sprintf("container %s waiting: %s, %d restarts; last termination: %s: %s", cs.Name, wt.Reason, cs.RestartCount, t.Reason, t.Message)
		}
	}
	return ""
}

// failOnEvent fails the link with node_prepare_failed on the kubelet's
// event (cdi_spec_missing when the runtime could not resolve the devices'
// CDI names), naming the claim the event names.
func (w *walker) failOnEvent(l Link, e *index.Event, evidence ...string) {
	l.Reason = NodePrepareFailed
	if claim := w.unresolvedClaim(e.Message); claim != nil {
		l.Reason = CDISpecMissing
		l.Claim = claim.Key.Name
		l.Evidence = append([]string{eventEvidence(e)}, evidence...)
		w.fail(l, claim, l.Claim)
		return
	}
	l.Evidence = append([]string{eventEvidence(e)}, evidence...)
	if held := heldForGoneClaim(w.s, e.Message); w.explain && held != "" {
		l.Evidence = append(l.Evidence, held)
	}
	claim := w.failedClaim(e)
	if claim != nil {
		l.Claim = claim.Key.Name
	}
	w.fail(l, claim, l.Claim)
}

// heldForGoneClaim explains the driver's refusal to prepare a device it
// holds prepared for another claim: when no claim has that UID any more,
// the driver never unprepared it. The NVIDIA driver's plugin does not
// reconcile its checkpoint against the API: a claim deleted (its pod
// force-deleted) while the plugin was down stays prepared there for good
// (dra-driver-nvidia-gpu#1278). "" for any other message. Every exporter,
// sharded or not, watches every namespace's claims, so a UID missing from
// the snapshot is a claim that is gone.
func heldForGoneClaim(s *index.Snapshot, message string) string {
	device, uid, ok := vocab.HeldForOtherClaim(message)
	if !ok {
		return ""
	}
	for _, c := range s.Claims {
		if string(c.Obj.UID) == uid {
			return fmt.Sprintf("the driver holds device %s prepared for claim %s/%s (uid %s), which exists: the device is allocated to two claims, or that claim's pod on this node has not released it yet", device, c.Key.Namespace, c.Key.Name, uid)
		}
	}
	return fmt.Sprintf("the driver still holds device %s prepared for claim uid %s, which no longer exists: a claim deleted while the driver's kubelet plugin was down is never unprepared (dra-driver-nvidia-gpu#1278); remove the claim from the plugin's checkpoint (/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json) and restart the plugin", device, uid)
}

// unresolvedClaim returns the pod's claim whose devices the runtime could
// not resolve (the CDI library's "unresolvable CDI devices"), nil when the
// message is no such refusal or names no device of the pod's claims: a
// name that carries a claim's UID (the example driver's and NVIDIA's
// per-claim specs are named after it), else one whose vendor is a claim's
// driver (DRA drivers' specs are "k8s.<driver>" or "<driver>"). A name of
// neither, such as a device plugin's nvidia.com/gpu=..., is no DRA
// claim's spec: that stays node_prepare_failed.
func (w *walker) unresolvedClaim(message string) *index.Claim {
	names := vocab.UnresolvedCDIDevices(message)
	if len(names) == 0 {
		return nil
	}
	for _, name := range names {
		for _, pc := range w.claims {
			if pc.Claim != nil && pc.Claim.Obj.UID != "" && strings.Contains(name, string(pc.Claim.Obj.UID)) {
				return pc.Claim
			}
		}
	}
	for _, name := range names {
		vendor, _, _ := strings.Cut(name, "/")
		for _, pc := range w.claims {
			if pc.Claim == nil {
				continue
			}
			for _, r := range pc.Claim.Results {
				if vendor == r.Device.Driver || vendor == "k8s."+r.Device.Driver {
					return pc.Claim
				}
			}
		}
	}
	return nil
}

// eventSecond is the event's time in whole seconds, the precision of the
// pod conditions it is compared with.
func eventSecond(e *index.Event) time.Time { return e.Timestamp.Truncate(time.Second) }

// failedClaim returns the pod's claim a node failure event names (nil when
// it names none).
func (w *walker) failedClaim(e *index.Event) *index.Claim {
	var best *index.Claim
	for _, pc := range w.claims {
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
		if vocab.NodePrepareFailure(e.Reason, e.Message) {
			return e
		}
	}
	return nil
}

// walkBindingConditions checks the binding conditions (KEP-5007) of the
// allocated devices of an unbound pod: the scheduler binds the pod only when
// every binding condition of every device is True in the claim's
// status.devices, and gives the allocation up when a binding failure
// condition turns True. It reports whether it added the pod's last link.
func (w *walker) walkBindingConditions() bool {
	var waiting []string
	for _, pc := range w.claims {
		c := pc.Claim
		if c == nil || !c.Allocated() {
			continue
		}
		for _, r := range c.Obj.Status.Allocation.Devices.Results {
			if len(r.BindingConditions) == 0 && len(r.BindingFailureConditions) == 0 {
				continue
			}
			dev := fmt.Sprintf("%s/%s/%s", r.Driver, r.Pool, r.Device)
			conds := deviceConditions(c, r)
			for _, f := range r.BindingFailureConditions {
				if cond := meta.FindStatusCondition(conds, f); cond != nil && cond.Status == metav1.ConditionTrue {
					l := Link{Step: "device binding conditions", Claim: c.Key.Name, Class: c.ClassOf(r.Request), Reason: BindingFailed, Evidence: []string{
						fmt.Sprintf("device %s: binding failure condition %s is True (%s: %s) since %s; the scheduler gives the allocation up and retries",
							dev, f, cond.Reason, cond.Message, cond.LastTransitionTime.UTC().Format("2006-01-02T15:04:05Z"))}}
					l.Evidence = append(l.Evidence, w.schedulingEvidence()...)
					w.fail(l, c, c.Key.Name)
					return true
				}
			}
			for _, b := range r.BindingConditions {
				if cond := meta.FindStatusCondition(conds, b); cond == nil || cond.Status != metav1.ConditionTrue {
					waiting = append(waiting, fmt.Sprintf("device %s (claim %s): binding condition %s is %s", dev, c.Key.Name, b, conditionState(cond)))
				}
			}
		}
	}
	if len(waiting) == 0 {
		return false
	}
	l := Link{Step: "device binding conditions", Layer: LayerScheduler, State: Wait, Evidence: append([]string{
		"the scheduler waits to bind the pod until every binding condition of its devices is True (set by the device's controller, for example an attach of a fabric device); not a failure yet"}, waiting...)}
	w.add(l)
	return true
}

// deviceConditions returns the conditions the claim's status.devices holds
// for an allocated device.
func deviceConditions(c *index.Claim, r resourceapi.DeviceRequestAllocationResult) []metav1.Condition {
	for _, d := range c.Obj.Status.Devices {
		if d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device {
			return d.Conditions
		}
	}
	return nil
}

func conditionState(c *metav1.Condition) string {
	if c == nil {
		return "not set yet"
	}
	return string(c.Status)
}
