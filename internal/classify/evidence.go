package classify

// Evidence lines: how objects and events read in explain's output.

import (
	corev1 "k8s.io/api/core/v1"

	"fmt"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

func (w *walker) describeResult(claim *index.Claim, r index.Result) string {
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
	if d := w.s.Device(r.Device); d != nil {
		for _, t := range w.s.Taints(d) {
			fmt.Fprintf(b, "; taint %s", t.Key)
			if t.Value != "" {
				fmt.Fprintf(b, "=%s", t.Value)
			}
			fmt.Fprintf(b, ":%s", t.Effect)
			if t.Rule != "" {
				fmt.Fprintf(b, " (DeviceTaintRule %s)", t.Rule)
			}
		}
	}
	if h := deviceHealth(w.p.Obj).of(claim, r); h != "" {
		fmt.Fprintf(b, "; the kubelet reports it %s", h)
	}
	if d := w.s.Device(r.Device); d != nil && !d.Shareable && !r.AdminAccess {
		if others := otherHolders(w.s.AllocatedTo(r.Device), claim); len(others) > 0 {
			fmt.Fprintf(b, "; DOUBLE ALLOCATION: also allocated to claim %s, and the device is not shareable (kubernetes #141471: a force-deleted pod's device prepared for a new claim)", strings.Join(others, ", "))
		}
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

func eventEvidence(e *index.Event) string {
	reporter := e.Reporter
	if reporter == "" {
		reporter = "unknown"
	}
	return fmt.Sprintf("event %s from %s at %s (x%d): %s", e.Reason, reporter, e.Timestamp.UTC().Format("2006-01-02T15:04:05Z"), e.Count, e.Message)
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

// otherHolders names the claims other than c that hold a device.
func otherHolders(holders []*index.Claim, c *index.Claim) []string {
	var out []string
	for _, h := range distinctClaims(holders) {
		if h != c {
			out = append(out, h.Key.String())
		}
	}
	return out
}
