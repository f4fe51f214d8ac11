package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// RunbookBase is where the alerts' runbooks live (the rules' runbook_url).
const RunbookBase = "https://github.com/dra-exporter/dra-exporter/blob/main/docs/runbooks.md#"

// runbook is a Markdown link to the runbook section of an alert.
func runbook(alert string) string {
	return fmt.Sprintf("[runbook %s](%s%s)", alert, RunbookBase, strings.ToLower(alert))
}

// datasource is the Prometheus data source the `datasource` variable picks.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// match renders the label matchers of the dashboard variables named, e.g.
// match("cluster", "node") = `cluster=~"$cluster", node=~"$node"`. Every
// variable is multi-value with All = ".*", so an absent label (no cluster
// label on a single-cluster Prometheus) still matches.
func match(vars ...string) string {
	parts := make([]string, len(vars))
	for i, v := range vars {
		parts[i] = fmt.Sprintf("%s=~\"$%s\"", v, v)
	}
	return strings.Join(parts, ", ")
}

// podMatch selects DRA pods by cluster, namespace, device class and node. A
// pod whose DeviceClass is not known (its claim does not exist yet: the
// controller layer) has device_class="" and shows whichever classes are
// selected, so that choosing a class never hides the controller layer.
func podMatch() string {
	return match("cluster", "namespace") + `, device_class=~"$device_class|", ` + match("node")
}

// query is a range query, one series per legend.
func query(ref, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).RefId(ref).
		Expr(expr).LegendFormat(legend).Range()
}

// instant is an instant query rendered as table rows, one per series.
func instant(ref, expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).RefId(ref).
		Expr(expr).Instant().Format(prometheus.PromQueryFormatTable)
}

// legend is on for every time series: a table with last and max, so the
// reader sees which series a line is without hovering.
func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().ShowLegend(true).
		DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).
		Calcs([]string{"lastNotNull", "max"})
}

func tooltip() *common.VizTooltipOptionsBuilder {
	return common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)
}

// timeSeries is a time series panel with legend, tooltip, unit and a
// description; stacked for counts that add up (states, layers).
func timeSeries(title, unit, description string, stacked bool, targets ...cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Height(8).Span(12).Min(0).
		Legend(legend()).Tooltip(tooltip()).FillOpacity(10).
		Targets(targets)
	if stacked {
		p.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
	}
	return p
}

// statPanel shows the current value; noValue says what an empty result means.
func statPanel(title, unit, description, noValue string, targets ...cog.Builder[variants.Dataquery]) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Height(4).Span(6).NoValue(noValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Targets(targets)
}

// tablePanel lists instant-query rows, one per series. Several queries are
// merged into one row per label set (their values become columns); the
// organize transformation hides the time column and names the values
// (rename: "Value", or "Value #A" ... for several queries).
func tablePanel(title, unit, description string, rename map[string]any, hidden []string, targets ...cog.Builder[variants.Dataquery]) *table.PanelBuilder {
	exclude := map[string]any{"Time": true, "__name__": true}
	for _, h := range hidden {
		exclude[h] = true
	}
	p := table.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Height(10).Span(24).Filterable(true).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}))
	if len(targets) > 1 {
		p.WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}})
	}
	return p.WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": exclude,
		"renameByName":  rename,
	}}).Targets(targets)
}

// value names the single value column of a table.
func value(name string) map[string]any { return map[string]any{"Value": name} }

// latencyHeatmap draws a histogram's buckets over time, as Prometheus
// returns them (no calculation in Grafana).
func latencyHeatmap(title, description, bucketExpr string) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Title(title).Description(description).Unit("s").
		Datasource(datasource).Height(8).Span(12).
		Calculate(false).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
		CellValues(heatmap.NewCellValuesBuilder().Unit("reqps")).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").
			Fill("dark-orange").Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64)).
		ShowLegend().
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true).ShowColorScale(true)).
		Targets([]cog.Builder[variants.Dataquery]{
			prometheus.NewDataqueryBuilder().Datasource(datasource).RefId("A").
				Expr(bucketExpr).LegendFormat("{{le}}").Format(prometheus.PromQueryFormatHeatmap).Range(),
		})
}

// quantiles are the p50, p95 and p99 of a histogram, grouped by the labels
// in by (besides le); the legend is the quantile, then legendSuffix.
func quantiles(bucket, matchers, by, legendSuffix string) []cog.Builder[variants.Dataquery] {
	group := "le"
	if by != "" {
		group = by + ", le"
	}
	var out []cog.Builder[variants.Dataquery]
	for i, q := range []struct{ q, name string }{{"0.50", "p50"}, {"0.95", "p95"}, {"0.99", "p99"}} {
		expr := fmt.Sprintf("histogram_quantile(%s, sum by (%s) (rate(%s{%s}[$__rate_interval])))", q.q, group, bucket, matchers)
		out = append(out, query(string(rune('A'+i)), expr, q.name+legendSuffix))
	}
	return out
}

// targets is a shorthand for a list of queries.
func targets(qs ...*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		out[i] = q
	}
	return out
}

// dataLink is a link on a table cell or series.
func dataLink(title, url string) cog.Builder[dashboard.DashboardLink] {
	return dashboard.NewDashboardLinkBuilder(title).Url(url).TargetBlank(true)
}

func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title) }
