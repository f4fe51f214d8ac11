//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// devices: inventory and capacity per DeviceClass and node, for capacity
// reviews and for the page that says a class is exhausted or a GPU is gone.
func devices() *dashboard.DashboardBuilder {
	sel := match("cluster", "device_class", "node")
	classDevices := func(state string) string {
		return fmt.Sprintf(`sum by (device_class, node) (dra_device_class_devices{%s, state=%q})`, sel, state)
	}
	return newDashboard("dra-devices", "DRA / Devices and capacity",
		"What the DRA drivers publish, per DeviceClass and node: total, allocated and free devices, allocated devices nobody uses, devices per pool over time, and DeviceClass selectors that fail.",
		datasourceVar(), clusterVar(), deviceClassVar(), nodeVar()).
		WithPanel(timeSeries("Devices per DeviceClass and state", "short",
			"Devices each DeviceClass selects (the scheduler's CEL over every published device), all selected nodes: total, allocated, free. total minus allocated minus free are unusable (tainted, held by shared counters of a partitioned GPU, on a cordoned or NotReady node). Free near zero: "+runbook("DRADeviceClassNearExhaustion")+"; total zero while pods wait: "+runbook("DRADeviceClassNoDevices")+".",
			false, targets(query("A", fmt.Sprintf("sum by (device_class, state) (dra_device_class_devices{%s})", sel), "{{device_class}} {{state}}"))...).Span(24)).
		WithPanel(tablePanel("Capacity per DeviceClass and node", "short",
			"Now, per DeviceClass and node: total, allocated and free devices. A node whose free count stays 0 while others have free devices points at node affinity or selectors pinning claims there; a node with total but neither allocated nor free is cordoned, NotReady or tainted.",
			map[string]any{"Value #A": "total", "Value #B": "allocated", "Value #C": "free"}, []string{"job", "instance"},
			targets(instant("A", classDevices("total")), instant("B", classDevices("allocated")), instant("C", classDevices("free")))...).Span(12)).
		WithPanel(tablePanel("Allocated devices nobody uses", "short",
			"Devices allocated to a claim that reserves no pod now (dra_claim_allocation_info without dra_claim_reserved_for_info): a named claim between pods, or an allocation left behind. Past the exporter's grace period (--claim.unreserved-grace-period) the claim is also a leak with reason allocated_unreserved: "+runbook("DRAClaimAllocatedUnreserved")+". Delete the claim if no workload will use it.",
			nil, []string{"job", "instance", "Value"},
			targets(instant("A", fmt.Sprintf("dra_claim_allocation_info{%s} unless on (namespace, claim) dra_claim_reserved_for_info", sel)))...).Span(12)).
		WithPanel(timeSeries("Devices per pool", "short",
			"Devices each driver publishes per pool (dra_device_info, newest pool generation), over time. A step down is a GPU that fell off the bus or a kubelet plugin that stopped publishing: "+runbook("DRADevicesDisappeared")+". A MIG reconfiguration changes the count of partitions, not of physical GPUs (next panel).",
			false, targets(query("A", fmt.Sprintf("count by (driver, pool) (dra_device_info{%s})", match("cluster", "node")), "{{driver}} {{pool}}"))...)).
		WithPanel(timeSeries("Physical GPUs per node", "short",
			"Physical devices per driver and node, a GPU and its MIG partitions counted once (recording rule driver_node:dra_device_info:count_physical). The alert compares it with the last hour's maximum: "+runbook("DRADevicesDisappeared")+".",
			false, targets(query("A", fmt.Sprintf("driver_node:dra_device_info:count_physical{%s}", match("cluster", "node")), "{{driver}} {{node}}"))...)).
		WithPanel(timeSeries("DeviceClass selector errors", "short",
			"Devices on which a DeviceClass's CEL selectors fail to evaluate (compile or runtime error, e.g. an attribute missing on some devices). Such devices cannot be allocated through the class. Anything above 0: "+runbook("DRADeviceClassSelectorErrors")+".",
			false, targets(query("A", fmt.Sprintf("dra_device_class_selector_errors{%s}", match("cluster", "device_class")), "{{device_class}}"))...).Span(24))
}
