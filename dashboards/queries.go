package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Query is one PromQL expression of a dashboard: a panel target or a
// variable's query.
type Query struct {
	Dashboard string // file name
	Panel     string // panel title, or "variable NAME"
	RefID     string
	Expr      string
	Instant   bool   // table rows (instant query) rather than a time series
	Variable  string // for a variable's query: its name
	Label     string // and the label whose values it offers
}

// jsonPanel is the part of a panel (or row) the queries are read from.
type jsonPanel struct {
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Panels  []jsonPanel `json:"panels"`
	Targets []struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
}

type jsonDashboard struct {
	Panels     []jsonPanel `json:"panels"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// LabelValues splits a variable query label_values(SELECTOR, LABEL).
func LabelValues(q string) (selector, label string, ok bool) {
	m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// Queries returns every query of a dashboard's JSON: the targets of every
// panel (rows included) and the selector of every query variable, in the
// order they appear.
func Queries(file string, raw []byte) ([]Query, error) {
	var d jsonDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		sel, label, ok := LabelValues(q)
		if !ok {
			return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(SELECTOR, LABEL)", file, v.Name, q)
		}
		out = append(out, Query{Dashboard: file, Panel: "variable " + v.Name, Expr: sel, Instant: true, Variable: v.Name, Label: label})
	}
	var walk func(ps []jsonPanel)
	walk = func(ps []jsonPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Dashboard: file, Panel: p.Title, RefID: t.RefID, Expr: t.Expr, Instant: t.Instant})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

var variableRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// Substitute replaces the dashboard and Grafana variables of values
// ($name and ${name}) in expr, and leaves any other $ as it is (the $1 of
// label_replace).
func Substitute(expr string, values map[string]string) string {
	return variableRE.ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := values[name]; ok {
			return v
		}
		return m
	})
}

// Sources returns the telemetry sources a query has a branch for (see
// SourceGate); none for a query that does not depend on the source.
func Sources(expr string) []string {
	var out []string
	for _, s := range []string{SourceAgent, SourceDCGM} {
		if strings.Contains(expr, SourceGate(s)) {
			out = append(out, s)
		}
	}
	return out
}
