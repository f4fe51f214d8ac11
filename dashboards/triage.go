//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// leakRunbooks maps each leak reason to the alert that pages for it.
var leakRunbooks = []struct{ reasonRegex, alert string }{
	{"pod_missing|pod_finished|pod_recreated", "DRAClaimReservationLeak"},
	{"allocated_unreserved", "DRAClaimAllocatedUnreserved"},
	{"owner_missing", "DRAClaimOrphaned"},
}

// layerOwners are the layers of the decision tree, who owns each, and the
// alert that routes to them.
var layerOwners = []struct{ layer, owner, alert, alertFor string }{
	{"controller", "kube-controller-manager's resourceclaim controller and admission webhooks", "DRAPodBlockedController", "5m"},
	{"scheduler", "the scheduler, DeviceClasses, ResourceSlices and CEL selectors", "DRAPodBlockedScheduler", "15m"},
	{"node", "kubelet, the DRA driver's kubelet plugin, CDI and the container runtime", "DRAPodBlockedNode", "15m"},
	{"application", "the inference workload", "DRAPodBlockedApplication", "30m"},
}

// withLeakRunbook adds a label runbook holding the anchor of the runbook
// section in docs/runbooks.md, for the table's data link.
func withLeakRunbook(expr string) string {
	for _, r := range leakRunbooks {
		expr = fmt.Sprintf(`label_replace(%s, "runbook", %q, "reason", %q)`, expr, strings.ToLower(r.alert), r.reasonRegex)
	}
	return expr
}

// withExplain adds a label explain holding the command that walks the
// decision tree for the row's pod.
func withExplain(expr string) string {
	return fmt.Sprintf(`label_replace(label_join(%s, "explain", "/", "namespace", "pod"), "explain", "dra-exporter explain $1", "explain", "(.+)")`, expr)
}

// triage: the on-call view. One row per blocked pod and per leaked
// reservation, with the labels the alert carries and a link to its runbook.
func triage() *dashboard.DashboardBuilder {
	podSel := podMatch()
	blocked := fmt.Sprintf("dra_pod_blocked{%s}", podSel)
	// For how long (within the dashboard's range): now minus the first
	// sample of the series in the range; a series is one layer and reason.
	blockedFor := fmt.Sprintf("time() - min_over_time(timestamp(%s)[$__range:$__interval])", blocked)
	blockedRows := fmt.Sprintf(`label_replace(%s, "runbook", "drapodblocked$1", "layer", "(.+)")`, withExplain(blockedFor))
	leak := fmt.Sprintf("dra_claim_reservation_leak{%s}", match("cluster", "namespace", "node"))
	leakFor := fmt.Sprintf("time() - min_over_time(timestamp(%s)[$__range:$__interval])", leak)
	b := newDashboard("dra-triage", "DRA / Triage",
		"Which DRA pods are blocked and why, which reservations leaked, and what to run next. Each row links to the runbook of its alert.",
		datasourceVar(), clusterVar(), namespaceVar(), deviceClassVar(), nodeVar())
	for _, l := range layerOwners {
		b.WithPanel(statPanel("Blocked in the "+l.layer+" layer", "short",
			"DRA pods blocked now whose first failing link belongs to the "+l.layer+" layer, owned by "+l.owner+". The alert pages after "+l.alertFor+": "+runbook(l.alert)+". The table below names the pods.",
			"0", targets(query("A", fmt.Sprintf(`sum(dra_pod_blocked{%s, layer=%q})`, podSel, l.layer), "blocked"))...))
	}
	return b.
		WithPanel(timeSeries("Blocked pods by reason", "short",
			"DRA pods not Ready per layer and reason. The first failing link of the decision tree names the reason; the layer names who owns it: "+
				runbook("DRAPodBlockedController")+", "+runbook("DRAPodBlockedScheduler")+", "+runbook("DRAPodBlockedNode")+", "+runbook("DRAPodBlockedApplication")+".",
			true, targets(query("A", fmt.Sprintf("sum by (layer, reason) (%s)", blocked), "{{layer}}: {{reason}}"))...).Span(24)).
		WithPanel(tablePanel("Blocked pods", "s",
			"One row per blocked DRA pod: namespace, pod, pod_uid, claim, node, device, device class, layer, reason, and for how long it has been blocked with that reason (within the dashboard's time range, so at most the range). "+
				"Click the runbook cell for what to do. To see every link of the decision tree with its evidence (the scheduler's or the kubelet's message), run the command in the explain column: `dra-exporter explain NAMESPACE/POD` (add `--kubeconfig`), or offline `dra-exporter explain --from cluster.yaml --from workloads.yaml NAMESPACE/POD` on an evidence bundle. "+
				"An empty table is healthy. A pod of the node or application layer appears for a few seconds while it starts.",
			value("blocked for"), []string{"job", "instance"},
			targets(instant("A", blockedRows))...).
			DataLinks([]cog.Builder[dashboard.DashboardLink]{dataLink("Runbook of ${__data.fields.layer} layer", RunbookBase+"${__data.fields.runbook}")})).
		WithPanel(tablePanel("Leaked reservations", "s",
			"One row per leaked reservation or allocation and device: namespace, claim, pod, pod_uid, node, device, reason, and for how long (within the range). pod_missing, pod_finished and pod_recreated: the claim's status.reservedFor names a pod that no longer uses it ("+runbook("DRAClaimReservationLeak")+"); allocated_unreserved: allocated and reserved for nobody past the grace period ("+runbook("DRAClaimAllocatedUnreserved")+"); owner_missing: a generated claim outlives its pod ("+runbook("DRAClaimOrphaned")+"). Click a row for its runbook. An empty table is healthy.",
			value("leaked for"), []string{"job", "instance"},
			targets(instant("A", withLeakRunbook(leakFor)))...).
			DataLinks([]cog.Builder[dashboard.DashboardLink]{dataLink("Runbook for ${__data.fields.reason}", RunbookBase+"${__data.fields.runbook}")}))
}
