//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// overview: the state of DRA at a glance, for the platform team during a
// rollout and the on-call engineer opening a page.
func overview() *dashboard.DashboardBuilder {
	ns := match("cluster", "namespace")
	pods := podMatch()
	class := match("cluster", "device_class")
	return newDashboard("dra-overview", "DRA / Overview",
		"Kubernetes Dynamic Resource Allocation at a glance: claims, blocked pods by the layer that owns them, allocation and release latency, leaks, firing alerts and the exporter's own health.",
		datasourceVar(), clusterVar(), namespaceVar(), deviceClassVar(), nodeVar()).
		WithRow(row("Claims and pods")).
		WithPanel(statPanel("Blocked DRA pods", "short",
			"DRA pods that are not Ready, now (dra_pod_blocked). Zero is healthy; more than zero for minutes means a link of the decision tree fails: open DRA / Triage for the pods, their layer and reason.",
			"0", targets(query("A", fmt.Sprintf("sum(dra_pod_blocked{%s})", pods), "blocked"))...)).
		WithPanel(statPanel("Leaked devices", "short",
			"Devices held by a leaked reservation or allocation, now (dra_claim_reservation_leak, one per claim and device). Anything above zero is a GPU nobody can use: DRA / Triage lists them with their runbook.",
			"0", targets(query("A", fmt.Sprintf(`count(count by (namespace, claim, device) (dra_claim_reservation_leak{%s, device!=""}))`, match("cluster", "namespace", "node")), "leaked devices"))...)).
		WithPanel(statPanel("Free devices", "short",
			"Devices of the selected DeviceClasses allocatable now, all nodes (dra_device_class_devices{state=\"free\"}). Near zero, new claims wait with reason capacity_exhausted: "+runbook("DRADeviceClassNearExhaustion")+".",
			"0", targets(query("A", fmt.Sprintf(`sum(dra_device_class_devices{%s, state="free"})`, match("cluster", "device_class", "node")), "free"))...)).
		WithPanel(statPanel("Firing DRA alerts", "short",
			"DRA alerts of the rule bundle firing now (ALERTS{alertstate=\"firing\"}). The table below names them; each alert's runbook_url says what to do.",
			"0", targets(query("A", `count(ALERTS{alertstate="firing", alertname=~"DRA.*", `+match("cluster")+`})`, "firing"))...)).
		WithPanel(timeSeries("Claims by state", "short",
			"ResourceClaims per state (recording rule namespace_state:dra_claim_status:sum): reserved (allocated and in use by a pod), allocated (reserved for nobody: idle, or between pods), unallocated (waiting for the scheduler). A growing unallocated band means pods wait for devices: see Blocked pods by layer.",
			true, targets(query("A", fmt.Sprintf("sum by (state) (namespace_state:dra_claim_status:sum{%s})", ns), "{{state}}"))...)).
		WithPanel(timeSeries("Blocked pods by layer", "short",
			"DRA pods not Ready, by the layer that owns the first failing link (controller, scheduler, node, application). Route by layer: "+
				runbook("DRAPodBlockedController")+", "+runbook("DRAPodBlockedScheduler")+", "+runbook("DRAPodBlockedNode")+", "+runbook("DRAPodBlockedApplication")+". Pods of the node and application layers briefly pass through while they start; a band that stays is a problem.",
			true, targets(query("A", fmt.Sprintf("sum by (layer) (dra_pod_blocked{%s})", pods), "{{layer}}"))...)).
		WithRow(row("Latency")).
		WithPanel(latencyHeatmap("Allocation latency",
			"Time from a claim's creation to its allocation by the scheduler (dra_claim_allocation_duration_seconds buckets, rate per second). It includes time spent waiting for capacity. Cells drifting up mean the scheduler is slow or devices are scarce: "+runbook("DRAClaimAllocationSlow")+".",
			fmt.Sprintf("sum by (le) (rate(dra_claim_allocation_duration_seconds_bucket{%s}[$__rate_interval]))", class))).
		WithPanel(timeSeries("Allocation latency p50 / p95 / p99", "s",
			"Quantiles of claim creation to allocation per DeviceClass. The alert fires above 1m at p95 for 15m: "+runbook("DRAClaimAllocationSlow")+". No line: no claim was allocated in the window.",
			false, quantiles("dra_claim_allocation_duration_seconds_bucket", class, "device_class", " {{device_class}}")...)).
		WithPanel(latencyHeatmap("Release latency",
			"Time from the end of a pod to its claim letting go (dra_claim_release_duration_seconds buckets, both stages). Slow release keeps finished pods' GPUs from new pods: "+runbook("DRAClaimReleaseSlow")+".",
			fmt.Sprintf("sum by (le) (rate(dra_claim_release_duration_seconds_bucket{%s}[$__rate_interval]))", class))).
		WithPanel(timeSeries("Release latency p50 / p95 / p99", "s",
			"Quantiles of pod end to claim unreserved and to claim deallocated (or deleted), per stage. The alert fires above 2m at p95 for 15m: "+runbook("DRAClaimReleaseSlow")+".",
			false, quantiles("dra_claim_release_duration_seconds_bucket", class, "stage", " {{stage}}")...)).
		WithRow(row("Leaks, alerts and the exporter")).
		WithPanel(timeSeries("Leaked devices by reason", "short",
			"Devices held by leaked reservations or allocations, per reason: pod_missing, pod_finished, pod_recreated ("+runbook("DRAClaimReservationLeak")+"), allocated_unreserved ("+runbook("DRAClaimAllocatedUnreserved")+"), owner_missing ("+runbook("DRAClaimOrphaned")+").",
			true, targets(query("A", fmt.Sprintf("count by (reason) (count by (namespace, claim, device, reason) (dra_claim_reservation_leak{%s}))", match("cluster", "namespace", "node")), "{{reason}}"))...)).
		WithPanel(tablePanel("Firing DRA alerts", "short",
			"Every DRA alert firing or pending now, with its labels. Open the runbook_url of the alert (in Alertmanager or the rule) for what to do; DRA / Triage shows the pods and claims behind pod and claim alerts.",
			value("value"), []string{"job", "instance"},
			targets(instant("A", `ALERTS{alertname=~"DRA.*", `+match("cluster")+`}`))...).Span(12)).
		WithPanel(timeSeries("Exporter health", "short",
			"1 is healthy for each line: the scrape target is up (up), every informer has synced (dra_exporter_informer_synced, min over resources), the API server answers (dra_exporter_apiserver_up), every collector succeeds (dra_exporter_scrape_collector_success, min). A 0 means the DRA series are missing or stale: "+
				runbook("DRAExporterDown")+", "+runbook("DRAExporterInformerNotSynced")+", "+runbook("DRAExporterAPIServerUnreachable")+", "+runbook("DRAExporterCollectorFailed")+".",
			false, targets(
				query("A", `min by (instance) (up{job="dra-exporter", `+match("cluster")+`})`, "scrape up {{instance}}"),
				query("B", `min by (instance) (dra_exporter_informer_synced{`+match("cluster")+`})`, "informers synced {{instance}}"),
				query("C", `min by (instance) (dra_exporter_apiserver_up{`+match("cluster")+`})`, "API server up {{instance}}"),
				query("D", `min by (instance) (dra_exporter_scrape_collector_success{`+match("cluster")+`})`, "collectors ok {{instance}}"),
			)...).Span(12).Max(1)).
		WithPanel(timeSeries("Exporter watch errors and events", "ops",
			"Watch events processed per second per resource (dra_exporter_events_total) and list or watch errors (dra_exporter_watch_errors_total). Errors above zero mean the exporter serves stale state: "+runbook("DRAExporterWatchErrors")+".",
			false, targets(
				query("A", `sum by (resource) (rate(dra_exporter_events_total{`+match("cluster")+`}[$__rate_interval]))`, "events {{resource}}"),
				query("B", `sum by (resource) (rate(dra_exporter_watch_errors_total{`+match("cluster")+`}[$__rate_interval]))`, "errors {{resource}}"),
			)...).Span(24))
}
