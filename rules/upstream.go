package rules

import (
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// UpstreamMetrics are the series of other components (and of Prometheus
// itself) that the rules and the dashboards may read, and where they come
// from; the tests of both fail on a series that is neither here, nor the
// exporter's, nor a recording rule's. Histograms are listed by their base name.
var UpstreamMetrics = map[string]string{
	"up":     "Prometheus, per scrape target",
	"ALERTS": "Prometheus, per pending or firing alert {alertname, alertstate, and the alert's labels}",

	// kubelet, k8s.io/kubernetes/pkg/kubelet/metrics (subsystem dra).
	"dra_operations_duration_seconds":      "kubelet histogram {operation_name, is_error}",
	"dra_grpc_operations_duration_seconds": "kubelet histogram {driver_name, method_name, grpc_status_code}",
	"dra_resource_claims_in_use":           "kubelet gauge {driver_name}",

	// kube-controller-manager.
	"workqueue_depth":                                         "client-go work queues {name}; the resourceclaim controller's is name=resource_claim",
	"resourceclaim_controller_creates_total":                  "Kubernetes 1.34-1.36 counter {status, admin_access}",
	"resourceclaim_controller_resource_claims":                "Kubernetes 1.34-1.36 gauge {allocated, admin_access; source from 1.35}",
	"dynamic_resource_allocation_resourceclaim_creates_total": "Kubernetes 1.37 counter {status, admin_access, owner_api_group, owner_api_kind}",
	"dynamic_resource_allocation_resource_claims":             "Kubernetes 1.37 gauge {allocated, admin_access, source}",

	// kube-scheduler.
	"scheduler_resourceclaim_creates_total":       "Kubernetes 1.35-1.36 counter {status}: claims of extended-resource requests (1.37: dynamic_resource_allocation_resourceclaim_creates_total)",
	"scheduler_plugin_execution_duration_seconds": "scheduler histogram {plugin, extension_point, status}",

	// NVIDIA DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu), kubelet plugin.
	"nvidia_dra_node_prepare_errors_total":   "counter {driver, error_type}",
	"nvidia_dra_node_unprepare_errors_total": "counter {driver, error_type}",
	"nvidia_dra_request_duration_seconds":    "histogram {driver, operation}",
	"nvidia_dra_prepared_devices":            "gauge {node, driver, device_type}",

	// Drivers on the kubernetes-sigs reference driver's metrics (dra-example-driver v0.4.0, pkg/metrics).
	"dra_example_driver_prepare_claims_total":             "counter {result}",
	"dra_example_driver_unprepare_claims_total":           "counter {result}",
	"dra_example_driver_prepare_claim_duration_seconds":   "histogram {result}",
	"dra_example_driver_unprepare_claim_duration_seconds": "histogram {result}",
	"dra_example_driver_fatal_background_errors_total":    "counter",

	// NVIDIA dcgm-exporter: labels gpu, UUID, pci_bus_id, modelName, Hostname or hostname.
	"DCGM_FI_DEV_GPU_UTIL":    "dcgm-exporter gauge, percent",
	"DCGM_FI_DEV_FB_USED":     "dcgm-exporter gauge, MiB",
	"DCGM_FI_DEV_FB_FREE":     "dcgm-exporter gauge, MiB",
	"DCGM_FI_DEV_POWER_USAGE": "dcgm-exporter gauge, watts",
}

// UpstreamHistograms are the histograms of UpstreamMetrics (each has
// _bucket, _sum and _count series).
var UpstreamHistograms = []string{
	"dra_operations_duration_seconds",
	"dra_grpc_operations_duration_seconds",
	"scheduler_plugin_execution_duration_seconds",
	"nvidia_dra_request_duration_seconds",
	"dra_example_driver_prepare_claim_duration_seconds",
	"dra_example_driver_unprepare_claim_duration_seconds",
}

// MetricNames returns the metric name of every selector in expr ("" for a
// selector without one).
func MetricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if name == "" && m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names
}
