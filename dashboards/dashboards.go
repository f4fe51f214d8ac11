//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

// Package dashboards builds dra-exporter's Grafana dashboards from Go with
// grafana-foundation-sdk, one file per dashboard. `make dashboards` writes
// them to dashboards/*.json (go run ./dashboards/gen); a test fails when the
// committed JSON is stale, when a dashboard does not round-trip through the
// SDK's strict unmarshal and validation, or when a query does not parse or
// names a series nobody produces.
package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Dashboard is one generated dashboard.
type Dashboard struct {
	File  string // name of the JSON file in dashboards/
	build func() *dashboard.DashboardBuilder
}

// All returns every dashboard, in the order of the README.
func All() []Dashboard {
	return []Dashboard{
		{"overview.json", overview},
		{"triage.json", triage},
		{"devices.json", devices},
		{"gpu.json", gpuAttribution},
		{"lanes.json", lanes},
	}
}

// Build returns the dashboard model.
func (d Dashboard) Build() (dashboard.Dashboard, error) {
	return d.build().Build()
}

// JSON renders the dashboard as the file in dashboards/ holds it.
func (d Dashboard) JSON() ([]byte, error) {
	m, err := d.Build()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.File, err)
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.File, err)
	}
	return append(out, '\n'), nil
}

// newDashboard sets what every dashboard shares: tags (the links between
// them use them), time, refresh, a shared crosshair, the variables.
func newDashboard(uid, title, description string, vars ...cog.Builder[dashboard.VariableModel]) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).Uid(uid).Description(description).
		Tags([]string{"dra", "dra-exporter"}).Editable().
		Time("now-6h", "now").Refresh("30s").Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("DRA dashboards").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"dra"}).AsDropdown(true).IncludeVars(true).KeepTime(true)).
		Variables(vars)
}

var all = dashboard.VariableOption{
	Selected: cog.ToPtr(true),
	Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr("All")},
	Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")},
}

func datasourceVar() cog.Builder[dashboard.VariableModel] {
	return dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")
}

// labelVar is a multi-value variable with All (".*", so that series
// without the label match too) listing the values of label on metric.
func labelVar(name, label, metric, description string) cog.Builder[dashboard.VariableModel] {
	q := fmt.Sprintf("label_values(%s, %s)", metric, label)
	return dashboard.NewQueryVariableBuilder(name).Label(label).Description(description).
		Datasource(datasource).Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).Definition(q).
		Multi(true).IncludeAll(true).AllValue(".*").Current(all).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
}

func clusterVar() cog.Builder[dashboard.VariableModel] {
	return labelVar("cluster", "cluster", "dra_exporter_build_info",
		"The cluster label your Prometheus (or Thanos, Mimir) puts on the exporter's series; All on a single-cluster Prometheus, which has no such label.")
}

func namespaceVar() cog.Builder[dashboard.VariableModel] {
	return labelVar("namespace", "namespace", `dra_pod_info{cluster=~"$cluster"}`, "Namespaces of GPU pods.")
}

func deviceClassVar() cog.Builder[dashboard.VariableModel] {
	return labelVar("device_class", "device_class", `dra_device_class_devices{cluster=~"$cluster"}`, "DeviceClasses.")
}

func nodeVar() cog.Builder[dashboard.VariableModel] {
	return labelVar("node", "node", `dra_lane_devices{cluster=~"$cluster"}`, "Nodes with GPUs of either lane.")
}

// Sources of GPU telemetry, the values of the `source` variable.
const (
	SourceAgent = "agent"
	SourceDCGM  = "dcgm-exporter"
)

// sourceVar picks where GPU telemetry comes from: the node agent's
// dra_gpu_* families, or NVIDIA dcgm-exporter through the recording rules
// of rules/gpu.yaml.
func sourceVar() cog.Builder[dashboard.VariableModel] {
	return dashboard.NewCustomVariableBuilder("source").Label("GPU telemetry").
		Description("agent: dra-exporter's node agent (dra_gpu_* series, attributed per pod on the node); dcgm-exporter: NVIDIA dcgm-exporter joined to the claims by the recording rules of rules/gpu.yaml.").
		Values(dashboard.StringOrMap{String: cog.ToPtr(SourceAgent + "," + SourceDCGM)}).
		Current(dashboard.VariableOption{
			Selected: cog.ToPtr(true),
			Text:     dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceDCGM)},
			Value:    dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceDCGM)},
		}).
		Options([]dashboard.VariableOption{
			{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceAgent)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceAgent)}},
			{Selected: cog.ToPtr(true), Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceDCGM)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(SourceDCGM)}},
		})
}

// SourceGate is what a query for one telemetry source is joined with: a
// vector that is non-empty only while the `source` variable has that value
// (PromQL cannot compare strings, so two one-element vectors labelled with
// the wanted and the selected source are matched on that label).
func SourceGate(source string) string {
	return fmt.Sprintf(`on () (label_replace(vector(1), "source", "$source", "", "") and on (source) label_replace(vector(1), "source", %q, "", ""))`, source)
}

// bySource is the union of one query per telemetry source, each gated on
// the `source` variable; an empty query leaves that source out.
func bySource(agent, dcgm string) string {
	var parts []string
	if agent != "" {
		parts = append(parts, fmt.Sprintf("(\n  %s\n) and %s", agent, SourceGate(SourceAgent)))
	}
	if dcgm != "" {
		parts = append(parts, fmt.Sprintf("(\n  %s\n) and %s", dcgm, SourceGate(SourceDCGM)))
	}
	if len(parts) == 2 {
		return "(" + parts[0] + ")\nor\n(" + parts[1] + ")"
	}
	return parts[0]
}
