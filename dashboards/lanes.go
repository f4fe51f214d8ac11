//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// compareVar is how far back the dashed comparison lines look: a week for
// the week-over-week review of a rollout.
func compareVar() cog.Builder[dashboard.VariableModel] {
	opt := func(v string, selected bool) dashboard.VariableOption {
		o := dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(v)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(v)}}
		if selected {
			o.Selected = cog.ToPtr(true)
		}
		return o
	}
	return dashboard.NewCustomVariableBuilder("compare").Label("compare with").
		Description("The comparison lines (\"... ago\") show the same query this far back: 1w compares week over week during a canary -> shadow -> cutover rollout.").
		Values(dashboard.StringOrMap{String: cog.ToPtr("1w,1d,1h")}).
		Current(opt("1w", true)).
		Options([]dashboard.VariableOption{opt("1w", true), opt("1d", false), opt("1h", false)})
}

// dashed draws the comparison series ("... ago") as dashed lines.
var dashed = []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}}

// allocatedByLane is the utilisation of allocated GPUs with their lane:
// the agent labels every GPU with it; for dcgm-exporter a DRA GPU's lane is
// its claim's (dra or dra-extended), and a GPU that no DRA driver publishes
// is a device-plugin GPU (all of them, allocated or not: the recording rules
// drop dcgm-exporter's own pod labels).
func allocatedByLane(nodes string) string {
	return bySource(
		fmt.Sprintf(`dra_gpu_utilization_ratio{%s, lane!="unallocated"}`, nodes),
		fmt.Sprintf(`namespace_claim_device:dcgm_gpu_utilization:ratio{%s} * on (namespace, claim) group_left (lane) dra_claim_info
  or
  label_replace(gpu_uuid:dcgm_gpu_utilization:ratio unless on (gpu_uuid) dra_device_info, "lane", "device-plugin", "", "")`, nodes))
}

// lanes: the device-plugin lane (nvidia.com/gpu), DRA and DRA-extended
// (extended resources served by a DeviceClass) side by side, for capacity
// reviews and for comparing the lanes week over week during a rollout.
func lanes() *dashboard.DashboardBuilder {
	sel := match("cluster", "device_class", "node")
	nodes := match("cluster", "node")
	laneDevices := func(state string) string {
		return fmt.Sprintf(`sum by (lane) (dra_lane_devices{%s, state=%q})`, sel, state)
	}
	startup := func(q string) string {
		return fmt.Sprintf(`histogram_quantile(%s, sum by (lane, le) (rate(dra_pod_startup_duration_seconds_bucket{%s, stage="ready"}[$__rate_interval])))`, q, match("cluster"))
	}
	sourceNote := " Source: the `GPU telemetry` variable (agent or dcgm-exporter through rules/gpu.yaml; with dcgm-exporter the device-plugin lane counts every GPU no DRA driver publishes, allocated or not)."
	return newDashboard("dra-lanes", "DRA / Lanes and rollout",
		"The device-plugin lane and the DRA lanes on one scale: devices, allocated, idle, utilisation of allocated GPUs, pod time to ready, blocked pods. The view a capacity review and a canary -> shadow -> cutover rollout compare week over week (the `compare with` variable).",
		datasourceVar(), sourceVar(), clusterVar(), deviceClassVar(), nodeVar(), namespaceVar(), compareVar()).
		WithPanel(timeSeries("Devices per lane", "short",
			"Devices each lane has: device-plugin is node capacity of nvidia.com/gpu (dra_lane_devices, lane device-plugin), dra the devices the DRA drivers publish for the class. dra-extended has no devices of its own: it allocates DRA devices. During a cutover devices move from device-plugin to dra; a drop in the sum is capacity lost in the move (nodes drained, or the DRA driver not publishing: "+runbook("DRADevicesDisappeared")+").",
			true, targets(query("A", laneDevices("total"), "{{lane}}"))...)).
		WithPanel(timeSeries("Allocated devices per lane", "short",
			"Devices in use per lane: device-plugin the requests of bound pods, dra the devices allocated to claims, dra-extended those allocated to claims the scheduler made for extended-resource requests. The dashed lines are the same a `compare with` ago.",
			false, targets(
				query("A", laneDevices("allocated"), "{{lane}}"),
				query("B", fmt.Sprintf(`sum by (lane) (dra_lane_devices{%s, state="allocated"} offset $compare)`, sel), "{{lane}} $compare ago"),
			)...).OverrideByRegexp(".* ago", dashed)).
		WithPanel(timeSeries("Free devices per lane", "short",
			"Devices allocatable now per lane (free: neither allocated nor on a cordoned or NotReady node). A lane at 0 free while the other has free devices: move workloads, or pods of that lane wait (Blocked pods per lane).",
			false, targets(query("A", laneDevices("free"), "{{lane}}"))...)).
		WithPanel(timeSeries("Idle allocated GPUs per lane", "short",
			"Allocated GPUs below 5% utilisation per lane: capacity held and unused. A lane with many idle GPUs is over-provisioned; in a rollout, a shadow deployment that holds GPUs and serves nothing shows here."+sourceNote,
			false, targets(query("A", fmt.Sprintf("count by (lane) ((%s) < 0.05)", allocatedByLane(nodes)), "{{lane}}"))...)).
		WithPanel(timeSeries("Utilisation of allocated GPUs per lane", "percentunit",
			"Average utilisation of the allocated GPUs of each lane. The lanes should serve the same load alike: a lane that is markedly lower wastes its GPUs."+sourceNote,
			false, targets(query("A", fmt.Sprintf("avg by (lane) (%s)", allocatedByLane(nodes)), "{{lane}}"))...).Max(1)).
		WithPanel(timeSeries("Pod time to ready p50 / p95 per lane", "s",
			"Time from a GPU pod's creation to Ready (dra_pod_startup_duration_seconds, stage ready), per lane, and the p95 a `compare with` ago. DRA adds allocation and device preparation to the start: the lanes should stay within seconds of each other; a DRA lane much slower points at the scheduler ("+runbook("DRAClaimAllocationSlow")+") or the node ("+runbook("DRAPodBlockedNode")+").",
			false, targets(
				query("A", startup("0.50"), "p50 {{lane}}"),
				query("B", startup("0.95"), "p95 {{lane}}"),
				query("C", fmt.Sprintf(`histogram_quantile(0.95, sum by (lane, le) (rate(dra_pod_startup_duration_seconds_bucket{%s, stage="ready"}[$__rate_interval] offset $compare)))`, match("cluster")), "p95 {{lane}} $compare ago"),
			)...).OverrideByRegexp(".* ago", dashed)).
		WithPanel(timeSeries("Blocked pods per lane", "short",
			"DRA pods that are not Ready per lane (dra_pod_blocked joined to dra_pod_info), and device-plugin pods not yet bound to a node (the exporter's decision tree covers DRA pods only; a pending device-plugin pod waits for nvidia.com/gpu capacity). While a DeviceClass serves nvidia.com/gpu, a pending pod asking for it counts as dra-extended: the scheduler may still give it either lane. Open DRA / Triage for the pods and reasons.",
			true, targets(
				// One query: the device-plugin part has data only where no
				// DeviceClass serves nvidia.com/gpu (a pending pod asking for
				// it is dra-extended otherwise, and in dra_pod_blocked).
				query("A", fmt.Sprintf(`count by (lane) (dra_pod_blocked{%s} * on (namespace, pod_uid) group_left (lane) dra_pod_info) or count by (lane) (dra_pod_info{%s, lane="device-plugin", node=""})`, sel, match("cluster")), "{{lane}}"),
			)...)).
		WithPanel(timeSeries("GPU pods per lane", "short",
			"GPU pods per lane (dra_pod_info; finished pods are left out), and the same a `compare with` ago: in a rollout, workloads move from device-plugin to dra (or dra-extended, when they keep requesting nvidia.com/gpu on DRA nodes).",
			false, targets(
				query("A", fmt.Sprintf(`count by (lane) (dra_pod_info{%s})`, match("cluster", "node")), "{{lane}}"),
				query("B", fmt.Sprintf(`count by (lane) (dra_pod_info{%s} offset $compare)`, match("cluster", "node")), "{{lane}} $compare ago"),
			)...).OverrideByRegexp(".* ago", dashed)).
		WithRow(row("Rollout gates")).
		WithPanel(rolloutVerdict()).
		WithPanel(rolloutFailing()).
		WithPanel(rolloutGateTable()).
		WithPanel(rolloutControls()).
		WithPanel(timeSeries("Utilisation of the namespace's GPUs per lane", "percentunit",
			"The same workload in the baseline lane and the DRA lane: average utilisation of the GPUs that the pods of the selected namespaces hold, per lane, and the same a `compare with` ago. The workload gate passes only where the canary's GPU moves."+sourceNote,
			false, targets(
				query("A", fmt.Sprintf(`avg by (lane) (%s)`, workloadByLane(match("cluster", "namespace"))), "{{lane}}"),
				query("B", fmt.Sprintf(`avg by (lane) (%s)`, strings.ReplaceAll(workloadByLane(match("cluster", "namespace")), "}", "} offset $compare")), "{{lane}} $compare ago"),
			)...).Max(1).OverrideByRegexp(".* ago", dashed))
}

// gateMatch selects the gate series of the selected namespaces.
func gateMatch() string { return match("cluster", "namespace") }

// rolloutVerdict: the canary's verdict over time, the article's "three
// PASSes in a row" (rules/gates.yaml).
func rolloutVerdict() *timeseries.PanelBuilder {
	sel := gateMatch()
	return timeSeries("Pods passing all three gates", "short",
		"DRA pods of the selected namespaces (negative controls excepted) whose api, node and workload gates all pass now (namespace_pod:dra_pod_gates:pass), whose verdict passes (all three at every evaluation of the last 5m: namespace_pod:dra_pod_gates:verdict), and all of them. Raise traffic only while verdict equals pods and the negative controls hold; `dra-exporter gates NAMESPACE` prints the evidence.",
		false, targets(
			query("A", fmt.Sprintf(`count(namespace_pod:dra_pod_gates:pass{%s})`, sel), "pods"),
			query("B", fmt.Sprintf(`sum(namespace_pod:dra_pod_gates:pass{%s})`, sel), "all three gates pass"),
			query("C", fmt.Sprintf(`sum(namespace_pod:dra_pod_gates:verdict{%s})`, sel), "verdict (5m)"),
		)...)
}

// rolloutFailing: failing gates by gate and reason: which team owns what
// holds the rollout.
func rolloutFailing() *timeseries.PanelBuilder {
	return timeSeries("Failing gates by gate and reason", "short",
		"Pods failing each gate, by reason: api is the platform team's (allocation, reservation, binding), node the node/runtime owner's (prepared devices, isolation), workload the inference owner's (readiness, GPU activity). "+runbook("DRAPodPendingUnexplained")+", "+runbook("DRAPodBlockedNode")+", "+runbook("DRAPodBlockedApplication")+".",
		true, targets(query("A", fmt.Sprintf(`count by (gate, reason) (namespace_pod_gate:dra_pod_gate:status{%s} == 0)`, gateMatch()), "{{gate}} {{reason}}"))...)
}

// rolloutGateTable: each pod's gates now.
func rolloutGateTable() *table.PanelBuilder {
	return tablePanel("Gates of each pod", "short",
		"One row per pod and gate: 1 passes, 0 fails with the reason. The owner of a failing gate: api the platform team, node the node/runtime owner, workload the inference owner.",
		value("pass"), []string{"cluster", "job", "instance"},
		targets(instant("A", fmt.Sprintf(`namespace_pod_gate:dra_pod_gate:status{%s}`, gateMatch())))...)
}

// rolloutControls: the negative controls of the selected namespaces.
func rolloutControls() *table.PanelBuilder {
	return tablePanel("Negative controls", "short",
		"Pods marked as negative controls: 1 while they stay Pending because no device matches them, 0 once one is allocated a device, runs ("+runbook("DRANegativeControlAllocated")+") or waits only for taken devices ("+runbook("DRANegativeControlMatchesDevices")+").",
		value("holds"), []string{"cluster", "job", "instance"},
		targets(instant("A", fmt.Sprintf(`dra_negative_control{%s}`, gateMatch())))...)
}

// workloadByLane is the utilisation of the GPUs that pods of the selected
// namespaces hold, with their lane: the agent names the holder of a GPU
// held by one pod; dcgm-exporter's join names the claim's namespace.
func workloadByLane(sel string) string {
	return bySource(
		fmt.Sprintf(`dra_gpu_utilization_ratio{%s, lane!="unallocated"}`, sel),
		fmt.Sprintf(`namespace_claim_device:dcgm_gpu_utilization:ratio{%s} * on (namespace, claim) group_left (lane) dra_claim_info`, sel))
}
