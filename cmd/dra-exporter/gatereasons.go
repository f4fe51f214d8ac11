package main

// Every reason a gate or a negative control can give, what it means and
// what to fix: the table of docs/metrics.md (Gate reasons), rendered by the
// docs command. TestGateReasonsDocumented fails when a reason of the code
// or of rules/gates.yaml has no row.

import (
	"fmt"
	"strings"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/nodegate"
)

// gateAbsent is gates' reason for a gate with no series at the window's
// last evaluation.
const gateAbsent = "absent"

// workloadGateReasons are the workload gate's reasons (rules/gates.yaml).
var workloadGateReasons = []string{"not_ready", "activity_unattributed", "no_gpu_activity", "no_gpu_telemetry"}

// gateExporterStale is the api gate's reason that rules/gates.yaml adds
// while the exporter's evidence is not current.
const gateExporterStale = "exporter_stale"

type gateReasonDoc struct {
	// gate is api, node, workload, any (gates' own) or control.
	gate, reason, meaning, fix string
}

// treeFix says what to fix for each decision-tree reason the api gate and
// the negative controls reuse; their meaning is the tree's.
var treeFix = map[classify.Reason]string{
	classify.ClaimNotCreated:        "Check the pod's resourceClaims, the resourceclaim controller in kube-controller-manager and admission webhooks that reject ResourceClaims.",
	classify.ClaimNotFound:          "Create the ResourceClaim the pod names, or point the pod at one that exists.",
	classify.DeviceClassNotFound:    "Create the DeviceClass, or fix the class name in the claim or its template.",
	classify.NoDevicesForClass:      "Check that the DRA driver runs on the GPU nodes and publishes ResourceSlices, and that the class selectors match its devices.",
	classify.SelectorMatchesNothing: "Fix the claim's CEL selectors or capacity requests; `kubectl dra-exporter explain` lists the devices they exclude.",
	classify.CapacityExhausted:      "Free or add matching devices (lower-priority holders are not preempted for DRA devices), or lower the request.",
	classify.Unallocated:            "Read the scheduler's FailedScheduling events: constraints, node affinity, taints or node resources keep the claim unallocated.",
	classify.NotReserved:            "Check the scheduler's binding cycle; a claim shared by other pods may have reached its reservation limit.",
	classify.BindingFailed:          "Check the controller of the device's binding conditions (KEP-5007); the scheduler retries after releasing the allocation.",
}

// gateReasonDocs lists every reason's row, gate by gate.
func gateReasonDocs() []gateReasonDoc {
	var out []gateReasonDoc
	for _, r := range classify.Reasons {
		if fix, ok := treeFix[r]; ok {
			out = append(out, gateReasonDoc{"api", string(r), "Decision tree: " + r.Meaning() + ".", fix})
		}
	}
	out = append(out,
		gateReasonDoc{"api", classify.GateSchedulingGated, "The pod has scheduling gates; the scheduler has not tried it.", "Remove the gates once their owner (a queue such as Kueue) admits the pod."},
		gateReasonDoc{"api", classify.GateNotBound, "Every claim is allocated and reserved, the pod is not bound to a node yet.", "Wait for the binding cycle; if it lasts, read the scheduler's events and logs."},
		gateReasonDoc{"api", classify.GateNodeMismatch, "The pod is bound to a node other than the one its allocation is for.", "Do not set spec.nodeName by hand; recreate the pod and let the scheduler bind it."},
		gateReasonDoc{"api", classify.GateAllocationRetried, fmt.Sprintf("The scheduler failed to allocate the pod's claims %d times or more (FailedScheduling about claims).", classify.RepeatedAllocationFailures),
			"Find why allocation failed (events), fix it, and recreate the canary: the event ages out with the API server's --event-ttl."},

		gateReasonDoc{"api", gateExporterStale, "rules/gates.yaml: the exporter's evidence is not current (a watch is stale, verdicts are held through an API outage, or a freshness series is missing).",
			"Check dra_exporter_watch_healthy and dra_exporter_apiserver_up: the gate passes again once the exporter is current (runbook DRAExporterWatchStale)."},

		gateReasonDoc{"node", nodegate.PrepareFailed, "The kubelet reported a DRA prepare failure (FailedPrepareDynamicResources), or the runtime cannot resolve the prepared devices' CDI names (dra_pod_blocked reason cdi_spec_missing).", "Read the event and the DRA driver's kubelet plugin logs on the node: it rejected the claim's configuration or could not prepare the device; for cdi_spec_missing see the runbook of DRAPodBlockedNode."},
		gateReasonDoc{"node", nodegate.NotReady, "The pod's node is not Ready (kubelet down, node unreachable).", "Bring the node back, or drain it; the pod is rescheduled once evicted."},
		gateReasonDoc{"node", nodegate.NoAgent, "No node agent serves the node (no dra_node_podresources_up for it).", "Run the node agent DaemonSet on the GPU nodes and let Prometheus scrape it."},
		gateReasonDoc{"node", nodegate.PodResourcesDown, "The kubelet's pod-resources API did not answer the agent.", "Check the agent's mount of /var/lib/kubelet/pod-resources and the kubelet."},
		gateReasonDoc{"node", nodegate.PodResourcesNoDRA, "The kubelet does not report DRA claims in pod-resources.", "Turn on the kubelet feature gate KubeletPodResourcesDynamicResources, or upgrade the kubelet."},
		gateReasonDoc{"node", nodegate.IsolationViolation, "A process of the pod runs on a GPU it does not hold.", "Find how the container sees other GPUs (privileged, NVIDIA_VISIBLE_DEVICES, host devices) and remove it: the boundary is broken."},
		gateReasonDoc{"node", nodegate.PreparedWithoutClaim, "The kubelet prepared a device for the pod that no claim of it was allocated.", "Compare pod-resources with the claims' allocations; restart the driver's kubelet plugin and report the mismatch."},
		gateReasonDoc{"node", nodegate.BothLanes, "The pod holds a GPU through the device plugin and through DRA at once.", "Remove the nvidia.com/gpu request or the claim: one lane per GPU."},
		gateReasonDoc{"node", nodegate.NotPrepared, "Fewer GPUs are prepared for the pod than are allocated to it.", "Check the kubelet's NodePrepareResources and the driver's kubelet plugin on the node."},
		gateReasonDoc{"node", nodegate.DeviceUnhealthy, "The kubelet reports a device the pod holds unhealthy.", "Check the GPU (XID errors, the driver's device taints) and move the pod off it."},
		gateReasonDoc{"node", nodegate.IsolationUnverified, "The agent cannot tell which pod runs a GPU process: its GPU source is down or the host's processes are not visible.", "Give the agent hostPID and a working GPU source (DCGM or NVML); see docs/node-agent.md."},

		gateReasonDoc{"workload", "not_ready", "The pod's Ready condition is false.", "Check the readiness probe, the model load, storage and network of the workload."},
		gateReasonDoc{"workload", "activity_unattributed", "dcgm-exporter shows activity on a GPU of a claim the pod shares: the pod's or its neighbour's, the gate cannot tell.",
			"Give the canary a claim of its own, or run the node agent, which attributes a GPU's processes to pods."},
		gateReasonDoc{"workload", "no_gpu_activity", "GPU telemetry covers a GPU the pod holds, but the pod did no GPU work on it over the window.", "Check that the workload uses the allocated GPU (CUDA_VISIBLE_DEVICES, the framework's device), and send it traffic."},
		gateReasonDoc{"workload", "no_gpu_telemetry", "No GPU telemetry covers the pod's GPUs (no node agent GPU series, no dcgm-exporter join).", "Run the node agent with a GPU source, or dcgm-exporter with the rules of rules/gpu.yaml."},

		gateReasonDoc{"any", gateAbsent, "`dra-exporter gates`: the gate has no series at the window's last evaluation (the pod is not bound yet, or no rule produced it).", "Wait for the pod to be bound; if it is, check that Prometheus evaluates rules/gates.yaml and scrapes the exporter and the agents."},
	)
	for _, reason := range classify.ControlReasons {
		state, why := classify.ControlStateOf(reason)
		d := gateReasonDoc{gate: "control"}
		d.reason = reason
		switch {
		case state == classify.ControlHolds:
			d.meaning, d.fix = "HOLDS: the control's own selectors or capacity requests exclude every device of its class. Decision tree: "+classify.Reason(reason).Meaning()+".", "Nothing: this is the proof the boundary holds."
		case state == classify.ControlInvalid:
			d.meaning, d.fix = "INVALID: "+why+".", treeFix[classify.Reason(reason)]+" A control must ask the canary's class for a device its selector excludes."
		case reason == classify.ControlAllocated:
			d.meaning, d.fix = "BROKEN: a claim of the control was allocated a device.", "Stop the rollout: the selector does not enforce the boundary it was written for. Fix the DeviceClass or the claim's selectors."
		case reason == classify.ControlStarted:
			d.meaning, d.fix = "BROKEN: a container of the control ran.", "Stop the rollout, as for allocated."
		case reason == classify.ControlMatchesDevices:
			d.meaning, d.fix = "BROKEN: devices match the control; it is Pending only because they are taken.", "Fix the selector: the control would run once a matching device is free."
		default:
			d.meaning, d.fix = "BROKEN: not evaluated yet (no claim yet, scheduling gates, or the scheduler has not tried the pod).", "Wait for the scheduler to try the control; it must then fail with selector_matches_nothing."
		}
		out = append(out, d)
	}
	return out
}

// renderGateReasons is the table of docs/metrics.md.
func renderGateReasons() string {
	b := &strings.Builder{}
	b.WriteString("\n## Gate reasons\n\n")
	b.WriteString("Every `reason` of `dra_pod_gate` and `namespace_pod_gate:dra_pod_gate:status` (gates api, node and workload), of `dra_negative_control` (control), and `dra-exporter gates`' own (any); a test fails when a reason of the code or of rules/gates.yaml has no row.\n\n")
	b.WriteString("| Gate | Reason | Meaning | What to fix |\n|---|---|---|---|\n")
	for _, d := range gateReasonDocs() {
		fmt.Fprintf(b, "| %s | `%s` | %s | %s |\n", d.gate, d.reason, strings.ReplaceAll(d.meaning, "|", "\\|"), strings.ReplaceAll(d.fix, "|", "\\|"))
	}
	return b.String()
}
