package classify

import (
	"fmt"
	"io"
	"strings"
)

// Format writes a verdict the way `dra-exporter explain` prints it: one
// line per link with its state, layer and evidence, then the verdict.
func Format(w io.Writer, v Verdict) error {
	b := formatLinks(v)
	p := v.Pod
	switch {
	case v.Blocked:
		fmt.Fprintf(b, "Verdict: BLOCKED  layer=%s  reason=%s", v.Layer, v.Reason)
		for _, kv := range [][2]string{{"claim", v.Claim}, {"device_class", v.DeviceClass}, {"node", v.Node}, {"device", v.Device}} {
			if kv[1] != "" {
				fmt.Fprintf(b, "  %s=%s", kv[0], kv[1])
			}
		}
		fmt.Fprintf(b, "\n  owner: the %s layer. %s.\n", v.Layer, LayerAdvice(v.Layer))
	case v.Note != "":
		fmt.Fprintf(b, "Verdict: NOT CLASSIFIED  %s\n", v.Note)
	case v.ReadyDespite:
		fmt.Fprintf(b, "Verdict: READY  the pod is Ready; the failing link above (layer=%s reason=%s) does not hold it, but would hold a new pod\n", v.Layer, v.Reason)
	case p.Ready():
		b.WriteString("Verdict: READY  every link passes\n")
	default:
		fmt.Fprintf(b, "Verdict: WAITING  no DRA link fails; %s\n", WaitingFor(v))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatControl writes a negative control the way explain prints it: its
// links, then its verdict as a control, HOLDS, BROKEN or INVALID (a
// control's BLOCKED is what it is for; its READY is a breach).
func FormatControl(w io.Writer, v Verdict, c ControlResult) error {
	b := formatLinks(v)
	fmt.Fprintf(b, "Verdict: negative control %s  reason=%s", c.State, c.Reason)
	for _, kv := range [][2]string{{"claim", c.Claim}, {"node", c.Node}, {"device", c.Device}} {
		if kv[1] != "" {
			fmt.Fprintf(b, "  %s=%s", kv[0], kv[1])
		}
	}
	fmt.Fprintf(b, "\n  %s\n", c.Summary())
	for _, e := range c.Evidence {
		fmt.Fprintf(b, "  - %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Summary says in one sentence what the control's state means.
func (c ControlResult) Summary() string {
	switch c.State {
	case ControlHolds:
		return "its selectors exclude every device of its class: the boundary holds."
	case ControlInvalid:
		return "invalid, it proves nothing: " + c.Why + "."
	}
	return "its selector does not keep it from a device: stop the rollout. Owner: " + GateAPI.Owner() + "."
}

// formatLinks writes the pod's header and its links.
func formatLinks(v Verdict) *strings.Builder {
	p := v.Pod
	b := &strings.Builder{}
	fmt.Fprintf(b, "Pod %s (uid %s)\n", p.Key, p.UID)
	lane := v.Lane
	if lane == "" {
		lane = "none"
	}
	node := p.Obj.Spec.NodeName
	if node == "" {
		node = "(not bound)"
	}
	fmt.Fprintf(b, "  lane: %s  phase: %s  node: %s\n\n", lane, p.Obj.Status.Phase, node)
	for _, l := range v.Links {
		head := fmt.Sprintf("  %-4s  %s", l.State, l.Step)
		if l.Layer != "" {
			head += fmt.Sprintf("  [%s]", l.Layer)
		}
		if l.Claim != "" {
			head += "  claim " + l.Claim
		}
		b.WriteString(head + "\n")
		if l.State == Fail {
			fmt.Fprintf(b, "        reason: %s: %s\n", l.Reason, l.Reason.Meaning())
		}
		for _, e := range l.Evidence {
			fmt.Fprintf(b, "        %s\n", e)
		}
	}
	if len(v.Links) > 0 {
		b.WriteString("\n")
	}
	return b
}

// LayerAdvice says where to look for a failure the layer owns.
func LayerAdvice(l Layer) string { return layerAdvice[l] }

var layerAdvice = map[Layer]string{
	LayerController:  "Check the pod's resourceClaims references, kube-controller-manager (resourceclaim controller) and admission webhooks; restarting kubelets will not help",
	LayerScheduler:   "Check DeviceClass, ResourceSlices (is the driver publishing?), CEL selectors and the scheduler's events; do not set spec.nodeName by hand",
	LayerNode:        "Check the kubelet, the DRA driver's kubelet plugin (gRPC NodePrepareResources), CDI and the container runtime on the node",
	LayerApplication: "The GPU is prepared; check the model load, readiness probe, storage and network of the workload",
}

// WaitingFor says what a pod that no link fails waits for: the last WAIT
// link (its group, its devices' binding conditions), else its binding.
func WaitingFor(v Verdict) string {
	for i := len(v.Links) - 1; i >= 0; i-- {
		if l := v.Links[i]; l.State == Wait {
			switch l.Step {
			case "pod group quorum":
				return "the pod waits for the other members of its PodGroup"
			case "device binding conditions":
				return "the scheduler waits for its devices' binding conditions"
			case "pod released to the scheduler":
				return "the pod waits for its scheduling gates to be removed"
			}
			break
		}
	}
	return "the pod is being bound"
}
