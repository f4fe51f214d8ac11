//lint:file-ignore SA1019 the classic dashboard schema (v1) is what Grafana imports by file upload and the sidecar; dashboardv2 needs Grafana 12 with a feature flag.

package dashboards

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	promquery "github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/dra-exporter/dra-exporter/rules"
)

// testValues stand in for the variables when a query is parsed: Grafana's
// own and every dashboard variable, with the values of All.
var testValues = map[string]string{
	"__rate_interval": "1m", "__interval": "1m", "__range": "6h",
	"cluster": ".*", "namespace": ".*", "device_class": ".*", "node": ".*",
	"source": SourceDCGM, "compare": "1w", "datasource": "prometheus",
}

func committed(t *testing.T, d Dashboard) []byte {
	t.Helper()
	raw, err := os.ReadFile(d.File)
	if err != nil {
		t.Fatalf("%v (run make dashboards)", err)
	}
	return raw
}

// TestCommittedJSONIsCurrent: dashboards/*.json is what the Go code builds.
func TestCommittedJSONIsCurrent(t *testing.T) {
	for _, d := range All() {
		want, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if got := committed(t, d); !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make dashboards", d.File)
		}
	}
}

// buildFailed tells a real error from the typed-nil cog.BuildErrors the
// SDK returns on success.
func buildFailed(err error) bool {
	var be cog.BuildErrors
	if errors.As(err, &be) {
		return len(be) > 0
	}
	return err != nil
}

// panelVariants are the SDK's schemas of the panel types the dashboards use.
var panelVariants = map[string]variants.PanelcfgConfig{
	"timeseries": timeseries.VariantConfig(),
	"table":      table.VariantConfig(),
	"stat":       stat.VariantConfig(),
	"heatmap":    heatmap.VariantConfig(),
}

// strictCheck runs the SDK's strict unmarshal (an unknown field is an
// error) over a dashboard. In v0.0.22 the strict unmarshal of a dashboard
// silently drops every panel, and that of a panel every target and its
// options: the nested unmarshalers return the typed-nil BuildErrors of a
// success as an error and the caller stops. So each level is checked on its
// own: the dashboard without panels, each panel without targets, options
// and custom field config, each target as a Prometheus query, the options
// and custom field config with the panel type's schema.
func strictCheck(raw []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	var panels []json.RawMessage
	if err := json.Unmarshal(top["panels"], &panels); err != nil {
		return fmt.Errorf("panels: %w", err)
	}
	top["panels"] = json.RawMessage("[]")
	rest, err := json.Marshal(top)
	if err != nil {
		return err
	}
	var m dashboard.Dashboard
	if err := m.UnmarshalJSONStrict(rest); buildFailed(err) {
		return err
	}
	for i, p := range panels {
		if err := strictPanel(p); err != nil {
			return fmt.Errorf("panels[%d]: %w", i, err)
		}
	}
	return nil
}

func strictPanel(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	var kind string
	if err := json.Unmarshal(fields["type"], &kind); err != nil {
		return err
	}
	if kind == "row" {
		var nested []json.RawMessage
		if err := json.Unmarshal(fields["panels"], &nested); err != nil {
			return err
		}
		fields["panels"] = json.RawMessage("[]")
		rest, _ := json.Marshal(fields)
		var r dashboard.RowPanel
		if err := r.UnmarshalJSONStrict(rest); buildFailed(err) {
			return err
		}
		for i, p := range nested {
			if err := strictPanel(p); err != nil {
				return fmt.Errorf("row panels[%d]: %w", i, err)
			}
		}
		return nil
	}
	v, ok := panelVariants[kind]
	if !ok {
		return fmt.Errorf("panel type %q: add its schema to panelVariants", kind)
	}
	var targets []json.RawMessage
	if err := json.Unmarshal(fields["targets"], &targets); err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	for i, t := range targets {
		var q promquery.Dataquery
		if err := q.UnmarshalJSONStrict(t); buildFailed(err) {
			return fmt.Errorf("targets[%d]: %w", i, err)
		}
	}
	if _, err := v.StrictOptionsUnmarshaler(fields["options"]); buildFailed(err) {
		return fmt.Errorf("options: %w", err)
	}
	var fc struct {
		Defaults map[string]json.RawMessage `json:"defaults"`
	}
	if err := json.Unmarshal(fields["fieldConfig"], &fc); err != nil {
		return fmt.Errorf("fieldConfig: %w", err)
	}
	if custom, ok := fc.Defaults["custom"]; ok && v.StrictFieldConfigUnmarshaler != nil {
		if _, err := v.StrictFieldConfigUnmarshaler(custom); buildFailed(err) {
			return fmt.Errorf("fieldConfig.defaults.custom: %w", err)
		}
	}
	delete(fields, "targets")
	delete(fields, "options")
	rest, _ := json.Marshal(fields)
	var panel dashboard.Panel
	if err := panel.UnmarshalJSONStrict(rest); buildFailed(err) {
		return err
	}
	return nil
}

// TestStrictRoundTrip: each committed file passes the SDK's strict
// unmarshal (no field its schema does not know) and validation, and
// unmarshals and marshals back to the same bytes (nothing dropped or
// defaulted on the way).
func TestStrictRoundTrip(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for _, d := range All() {
		raw := committed(t, d)
		if err := strictCheck(raw); err != nil {
			t.Errorf("%s: strict unmarshal: %v", d.File, err)
		}
		var m dashboard.Dashboard
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Errorf("%s: %v", d.File, err)
			continue
		}
		if err := m.Validate(); buildFailed(err) {
			t.Errorf("%s: validate: %v", d.File, err)
		}
		again, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(again, '\n'), raw) {
			t.Errorf("%s: does not marshal back to the same JSON", d.File)
		}
		if m.SchemaVersion == 0 || m.Uid == nil || *m.Uid == "" {
			t.Errorf("%s: schemaVersion %d, uid %v: Grafana needs both", d.File, m.SchemaVersion, m.Uid)
		}
	}
}

// TestStrictCheckRejectsUnknownFields: an unknown field at each level the
// strict check reads is an error, so TestStrictRoundTrip can fail.
func TestStrictCheckRejectsUnknownFields(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	raw := committed(t, All()[0])
	for _, anchor := range []string{
		`"title": "DRA / Overview"`,   // the dashboard
		`"title": "Blocked DRA pods"`, // a panel
		`"refId": "A"`,                // a target
		`"showLegend": true`,          // a panel's options
		`"allValue": ".*"`,            // a variable
		`"fillOpacity": 40`,           // a time series' custom field config
	} {
		if !bytes.Contains(raw, []byte(anchor)) {
			t.Fatalf("overview.json has no %s", anchor)
		}
		bad := bytes.Replace(raw, []byte(anchor), []byte(anchor+`, "notAGrafanaField": 1`), 1)
		if err := strictCheck(bad); err == nil {
			t.Errorf("strict check accepted an unknown field next to %s", anchor)
		}
	}
}

// knownSeries is every series a dashboard may read: the exporter's
// (docs/metrics.md), the rule bundle's recording rules, the documented
// upstream series (the list the rules test uses) and the node agent's.
func knownSeries(t *testing.T) map[string]string {
	t.Helper()
	known := map[string]string{}
	raw, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_:]+)` \\| (histogram|gauge|counter)")
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		known[m[1]] = "exporter"
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[m[1]+s] = "exporter"
			}
		}
	}
	if len(known) < 10 {
		t.Fatalf("docs/metrics.md: only %d metrics found", len(known))
	}
	for name := range rules.UpstreamMetrics {
		known[name] = "upstream"
	}
	for _, h := range rules.UpstreamHistograms {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			known[h+s] = "upstream"
		}
	}
	files, err := rules.Files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	for _, f := range files {
		raw, err := rules.Files.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		rgs, errs := rulefmt.Parse(raw, false, model.LegacyValidation, p, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatalf("rules/%s: %v", f.Name(), errs)
		}
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					known[r.Record] = "recording rule"
				}
			}
		}
	}
	return known
}

func allQueries(t *testing.T) []Query {
	t.Helper()
	var out []Query
	for _, d := range All() {
		qs, err := Queries(d.File, committed(t, d))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, qs...)
	}
	return out
}

// TestQueriesParseAndNameKnownSeries: every panel and variable query parses
// with the Prometheus parser once the variables are substituted, and reads
// only series that something produces.
func TestQueriesParseAndNameKnownSeries(t *testing.T) {
	known := knownSeries(t)
	p := parser.NewParser(parser.Options{})
	qs := allQueries(t)
	if len(qs) < 40 {
		t.Fatalf("only %d queries in the dashboards", len(qs))
	}
	for _, q := range qs {
		expr := Substitute(q.Expr, testValues)
		if m := variableRE.FindString(expr); m != "" {
			t.Errorf("%s: %s %s: variable %s is not one of the dashboard's", q.Dashboard, q.Panel, q.RefID, m)
			continue
		}
		parsed, err := p.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %s %s: %v\n%s", q.Dashboard, q.Panel, q.RefID, err, expr)
			continue
		}
		for _, name := range rules.MetricNames(parsed) {
			if _, ok := known[name]; !ok {
				t.Errorf("%s: %s %s reads %q: not an exporter metric (docs/metrics.md), a recording rule, a documented upstream series (rules.UpstreamMetrics) or a node agent family", q.Dashboard, q.Panel, q.RefID, name)
			}
		}
	}
}

func TestSubstituteLeavesLabelReplaceGroups(t *testing.T) {
	got := Substitute(`label_replace(x{node=~"$node", a="${cluster}"}[$__rate_interval], "l", "$1", "m", "(.+)")`, map[string]string{"node": "n1", "cluster": "c", "__rate_interval": "1m"})
	want := `label_replace(x{node=~"n1", a="c"}[1m], "l", "$1", "m", "(.+)")`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// panelJSON is what the conventions below read of a panel.
type panelJSON struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Panels      []panelJSON `json:"panels"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit  string `json:"unit"`
			Links []struct {
				URL string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Options struct {
		Legend *struct {
			ShowLegend bool `json:"showLegend"` // time series
			Show       bool `json:"show"`       // heatmap
		} `json:"legend"`
		Tooltip *struct {
			Mode string `json:"mode"`
		} `json:"tooltip"`
	} `json:"options"`
}

var (
	runbookLinkRE  = regexp.MustCompile(regexp.QuoteMeta(RunbookBase) + `([a-z0-9-]+)`)
	runbookLabelRE = regexp.MustCompile(`"runbook", "([a-z0-9$]+)"`)
)

// TestPanelConventions: every panel says what it means (a description long
// enough to say what to do), has a unit; time series and heatmaps show a
// legend and a tooltip; every runbook link and every runbook a table row
// links to resolves to a section of docs/runbooks.md; GPU telemetry panels
// follow the source variable.
func TestPanelConventions(t *testing.T) {
	anchors := runbookAnchors(t)
	for _, d := range All() {
		var m struct {
			Panels     []panelJSON `json:"panels"`
			Templating struct {
				List []struct {
					Name string `json:"name"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(committed(t, d), &m); err != nil {
			t.Fatal(err)
		}
		var vars []string
		for _, v := range m.Templating.List {
			vars = append(vars, v.Name)
		}
		if !slices.Contains(vars, "datasource") || !slices.Contains(vars, "cluster") {
			t.Errorf("%s: variables %v: want datasource and cluster", d.File, vars)
		}
		var panels []panelJSON
		for _, p := range m.Panels {
			panels = append(panels, p)
			panels = append(panels, p.Panels...)
		}
		n := 0
		for _, p := range panels {
			if p.Type == "row" {
				continue
			}
			n++
			where := d.File + ": " + p.Title
			if len(p.Description) < 80 {
				t.Errorf("%s: description %q: say what the panel means and what to do when it looks wrong", where, p.Description)
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: no unit", where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			if p.Type == "timeseries" || p.Type == "heatmap" {
				if p.Options.Legend == nil || !(p.Options.Legend.ShowLegend || p.Options.Legend.Show) {
					t.Errorf("%s: legend off", where)
				}
				if p.Options.Tooltip == nil || p.Options.Tooltip.Mode == "" || p.Options.Tooltip.Mode == "none" {
					t.Errorf("%s: tooltip off", where)
				}
			}
			texts := []string{p.Description}
			for _, l := range p.FieldConfig.Defaults.Links {
				texts = append(texts, l.URL)
			}
			for _, text := range texts {
				for _, m := range runbookLinkRE.FindAllStringSubmatch(text, -1) {
					if !anchors[m[1]] {
						t.Errorf("%s: links to runbook #%s, which docs/runbooks.md does not have", where, m[1])
					}
				}
			}
			for _, tg := range p.Targets {
				for _, m := range runbookLabelRE.FindAllStringSubmatch(tg.Expr, -1) {
					anchor := m[1]
					if strings.HasSuffix(anchor, "$1") {
						// drapodblocked$1 over the layer label: every layer.
						for _, layer := range []string{"controller", "scheduler", "node", "application"} {
							if a := strings.TrimSuffix(anchor, "$1") + layer; !anchors[a] {
								t.Errorf("%s: rows link to runbook #%s, which docs/runbooks.md does not have", where, a)
							}
						}
					} else if !anchors[anchor] {
						t.Errorf("%s: rows link to runbook #%s, which docs/runbooks.md does not have", where, anchor)
					}
				}
				usesGPU := strings.Contains(tg.Expr, "dra_gpu_") || strings.Contains(tg.Expr, "dcgm")
				if usesGPU && len(Sources(tg.Expr)) == 0 {
					t.Errorf("%s: a GPU telemetry query that ignores the source variable", where)
				}
				if usesGPU && !slices.Contains(vars, "source") {
					t.Errorf("%s: GPU telemetry without a source variable", d.File)
				}
			}
		}
		if n < 5 {
			t.Errorf("%s: only %d panels", d.File, n)
		}
	}
}

var slugDropRE = regexp.MustCompile(`[^a-z0-9 _-]`)

// runbookAnchors returns the GitHub anchors of the headings of docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if heading, ok := strings.CutPrefix(line, "## "); ok {
			slug := slugDropRE.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), "")
			anchors[strings.ReplaceAll(slug, " ", "-")] = true
		}
	}
	return anchors
}
