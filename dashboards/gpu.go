//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// unheldDCGM is the GPUs a DRA driver publishes that no claim holds (nor a
// MIG partition of them), with dcgm-exporter's value: the expression of the
// DRAGPUActivityWithoutClaim alert without its threshold.
func unheldDCGM(metric, nodes string) string {
	return fmt.Sprintf(`%s
  * on (gpu_uuid) group_left (driver, node, device)
  topk by (gpu_uuid) (1, group by (gpu_uuid, driver, node, device) (dra_device_info{%s, gpu_uuid!=""}))
  unless on (gpu_uuid) gpu_uuid:dra_claim_allocation_info:group`, metric, nodes)
}

// gpuAttribution: GPU telemetry attributed to the pods and claims holding
// each GPU, and the negative control: activity on GPUs nobody holds.
func gpuAttribution() *dashboard.DashboardBuilder {
	held := match("cluster", "namespace", "node")
	nodes := match("cluster", "node")
	perGPU := func(agentMetric, dcgmRule string) string {
		return bySource(
			fmt.Sprintf(`%s{%s, lane!="unallocated"}`, agentMetric, held),
			fmt.Sprintf(`%s{%s}`, dcgmRule, held))
	}
	perPod := func(agent, dcgmRule string) string {
		return bySource(agent, fmt.Sprintf(`%s{%s}`, dcgmRule, match("cluster", "namespace")))
	}
	const perGPULegend = "{{node}} {{device}} {{namespace}}/{{pod}} {{claim}}"
	sourceNote := " Source: the `GPU telemetry` variable (agent: dra-exporter's node agent; dcgm-exporter: NVIDIA dcgm-exporter through the recording rules of rules/gpu.yaml, which know the claim but not the pod per GPU; MIG devices get no dcgm telemetry there)."
	return newDashboard("dra-gpu", "DRA / GPU attribution",
		"GPU utilisation, memory and power per GPU with the namespace, pod and claim holding it, per pod, and the negative control: GPUs no claim holds and any activity on them.",
		datasourceVar(), sourceVar(), clusterVar(), namespaceVar(), nodeVar()).
		WithRow(row("Per held GPU")).
		WithPanel(timeSeries("GPU utilisation per held GPU", "percentunit",
			"Utilisation of each GPU some claim holds, with node, device, namespace, pod (agent only: when exactly one pod holds it) and claim. A held GPU near 0 for hours is capacity paid for and unused: ask the claim's owner, or see DRA / Lanes and rollout for idle GPUs per lane. No line at all: the telemetry source is not scraped."+sourceNote,
			false, targets(query("A", perGPU("dra_gpu_utilization_ratio", "namespace_claim_device:dcgm_gpu_utilization:ratio"), perGPULegend))...).Max(1)).
		WithPanel(timeSeries("GPU memory used per held GPU", "bytes",
			"Framebuffer memory used on each held GPU. Near the GPU's total (Devices and capacity, dra_device_memory_bytes) the next allocation in the pod fails with out-of-memory; a pod that holds memory but no utilisation may be a stuck process."+sourceNote,
			false, targets(query("A", perGPU("dra_gpu_memory_used_bytes", "namespace_claim_device:dcgm_fb_used_bytes:max"), perGPULegend))...)).
		WithPanel(timeSeries("GPU power per held GPU", "watt",
			"Board power draw of each held GPU. Power at the board limit with low utilisation points at throttling; near idle power with a pod running points at a workload that is not using the GPU."+sourceNote,
			false, targets(query("A", perGPU("dra_gpu_power_watts", "namespace_claim_device:dcgm_power_usage_watts:max"), perGPULegend))...)).
		WithPanel(timeSeries("GPU utilisation per pod and claim", "percentunit",
			"Average utilisation of the GPUs of each pod's claims: every pod a claim is reserved for (a shared claim shows the same value on each of its pods: do not add them up). Agent: every holder of a GPU (dra_gpu_holder_info) gets the GPU's value."+sourceNote,
			false, targets(query("A", perPod(
				fmt.Sprintf(`avg by (namespace, pod, claim) (dra_gpu_holder_info{%s} * on (node, gpu_uuid) group_left () dra_gpu_utilization_ratio)`, held),
				"namespace_pod_claim:dcgm_gpu_utilization:avg"), "{{namespace}}/{{pod}} {{claim}}"))...).Max(1)).
		WithPanel(timeSeries("GPU memory per pod", "bytes",
			"Framebuffer memory per pod. Agent: memory of the pod's own processes (dra_gpu_pod_memory_used_bytes), exact on a shared GPU. dcgm-exporter: the memory used on the GPUs of the pod's claims, per claim (a shared GPU's memory appears on each pod)."+sourceNote,
			false, targets(query("A", perPod(
				fmt.Sprintf(`sum by (namespace, pod) (dra_gpu_pod_memory_used_bytes{%s})`, held),
				"namespace_pod_claim:dcgm_fb_used_bytes:sum"), "{{namespace}}/{{pod}} {{claim}}"))...)).
		WithPanel(tablePanel("Isolation violations (agent)", "short",
			"Processes of a pod found on a GPU its claims do not hold (dra_gpu_isolation_violation, node agent only): a container that reaches GPUs outside DRA (privileged, or a device-plugin pod on a DRA node). Every row is a problem: find the pod and how it got the device. Empty with source dcgm-exporter, which cannot see this.",
			value("violations"), []string{"job", "instance"},
			targets(instant("A", bySource(fmt.Sprintf(`dra_gpu_isolation_violation{%s} > 0`, held), "")))...).Span(12)).
		WithRow(row("Negative control: GPUs nobody holds")).
		WithPanel(tablePanel("GPUs nobody holds", "percentunit",
			"GPUs published to DRA (or, agent, found on the node) that no claim holds now, with their current utilisation. These are the negative control: anything busy here uses a GPU outside DRA (a device-plugin pod on a DRA node, a process left behind by a deleted pod, a privileged container): "+runbook("DRAGPUActivityWithoutClaim")+"."+sourceNote,
			value("utilisation"), []string{"job", "instance"},
			targets(instant("A", bySource(
				fmt.Sprintf(`dra_gpu_utilization_ratio{%s, lane="unallocated"}`, nodes),
				unheldDCGM("gpu_uuid:dcgm_gpu_utilization:ratio", nodes))))...).Span(12)).
		WithPanel(timeSeries("Activity on GPUs nobody holds", "percentunit",
			"Utilisation over time of GPUs no claim holds. It should be 0: the alert fires above 5% for 10m: "+runbook("DRAGPUActivityWithoutClaim")+"."+sourceNote,
			false, targets(query("A", bySource(
				fmt.Sprintf(`dra_gpu_utilization_ratio{%s, lane="unallocated"}`, nodes),
				unheldDCGM("gpu_uuid:dcgm_gpu_utilization:ratio", nodes)), "{{node}} {{device}} {{gpu_uuid}}"))...).Max(1)).
		WithPanel(timeSeries("Memory used on GPUs nobody holds", "bytes",
			"Framebuffer memory used on GPUs no claim holds. Memory held with no claim is a process left behind (a deleted pod whose container did not exit, or one outside Kubernetes)."+sourceNote,
			false, targets(query("A", bySource(
				fmt.Sprintf(`dra_gpu_memory_used_bytes{%s, lane="unallocated"}`, nodes),
				unheldDCGM("gpu_uuid:dcgm_fb_used_bytes:max", nodes)), "{{node}} {{device}} {{gpu_uuid}}"))...)).
		WithPanel(timeSeries("GPUs with telemetry", "short",
			"GPUs the selected source reports, against the GPUs the DRA drivers publish (whole GPUs, not MIG partitions). Fewer with telemetry than published: the agent or dcgm-exporter is not running on some node, or its UUIDs do not match the slices' (then every panel above misses those GPUs).",
			false, targets(
				query("A", bySource(
					fmt.Sprintf(`count(dra_gpu_utilization_ratio{%s})`, nodes),
					fmt.Sprintf(`count(gpu_uuid:dcgm_gpu_utilization:ratio and on (gpu_uuid) dra_device_info{%s})`, nodes)), "with telemetry"),
				query("B", fmt.Sprintf(`count(dra_device_info{%s, gpu_uuid!="", parent_gpu_uuid=""})`, nodes), "published"),
			)...)).
		WithRow(row("dcgm-exporter's DRA labels (source dcgm-exporter; no node agent needed)")).
		WithPanel(timeSeries("GPU utilisation per claim device (dcgm-exporter DRA labels)", "percentunit",
			"dcgm-exporter 4.8.3+ with KUBERNETES_ENABLE_DRA names the claim device (dra_claim_name, dra_pool_name, dra_device_name) it read from the kubelet; rules/gpu.yaml keeps one series per claim device (the max of its per-container copies, never their sum). It should match the UUID join above; a claim device here and not there: the slice publishes no uuid attribute. MIG devices are left out: dcgm-exporter labels every instance of the parent GPU with every pod on it.",
			false, targets(query("A", bySource("", fmt.Sprintf(`namespace_claim_device:dcgm_dra_gpu_utilization:ratio{%s}`, match("cluster", "namespace"))),
				"{{namespace}}/{{claim}} {{pool}} {{device}}"))...).Max(1)).
		WithPanel(timeSeries("GPU utilisation per device class (dcgm-exporter DRA labels)", "percentunit",
			"Mean utilisation of the allocated devices of each DeviceClass that dcgm-exporter reports, the class read from dra_claim_allocation_info. A class near 0 is capacity bought and unused.",
			false, targets(query("A", bySource("", fmt.Sprintf(`device_class:dcgm_dra_gpu_utilization:avg{%s}`, match("cluster"))), "{{device_class}}"))...).Max(1)).
		WithPanel(tablePanel("Devices shared by several pods (dcgm-exporter DRA labels)", "short",
			"Devices whose use dcgm-exporter copies onto more than one pod (a shared claim, or claims sharing a device): their use belongs to no single pod, so no per-pod series is recorded for them (namespace_pod_claim:dcgm_dra_gpu_utilization:ratio has only sole holders). The node agent attributes memory per pod on these.",
			value("pods"), []string{"job", "instance"},
			targets(instant("A", bySource("", fmt.Sprintf(`driver_pool_device:dcgm_dra_pods:count{%s} > 1`, match("cluster")))))...).Span(12))
}
