// Package collector turns index snapshots into Prometheus metrics. Each file
// holds one collector; every collector reads the same snapshot, taken once
// per scrape, and emits const metrics. Collectors never call the API server.
package collector

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// Metric types, as written in the metrics reference.
const (
	typeGauge     = "gauge"
	typeCounter   = "counter"
	typeHistogram = "histogram"
)

// Def describes one metric family: the single source for its descriptor
// and for the generated metrics reference.
type Def struct {
	Name string
	Type string
	// Help is the HELP line: one short sentence (tooltips show it).
	Help string
	// Doc is the longer guidance of the metrics reference, if any.
	Doc    string
	Labels []string
	// Live marks families only a running exporter serves (latencies,
	// self-metrics); the offline snapshot leaves them out.
	Live bool

	desc *prometheus.Desc
	// order is the positions of Labels sorted by name (labelOrder).
	orderOnce sync.Once
	order     []int
	// namespaceLabel is the position of the namespace label, -1 for a
	// cluster-scoped family: it decides which shard emits a series.
	namespaceLabel int
}

func newDef(name, typ, help string, labels ...string) *Def {
	return &Def{Name: name, Type: typ, Help: help, Labels: labels, desc: prometheus.NewDesc(name, help, labels, nil),
		namespaceLabel: slices.Index(labels, "namespace")}
}

// newDefSplit is newDef for a text whose first sentence is the HELP line
// and whose rest is the reference's guidance.
func newDefSplit(name, typ, text string, labels ...string) *Def {
	if help, doc, ok := strings.Cut(text, "\x00"); ok {
		return newDef(name, typ, help, labels...).doc(doc)
	}
	help, doc, _ := strings.Cut(text, ". ")
	if doc == "" {
		return newDef(name, typ, text, labels...)
	}
	return newDef(name, typ, help+".", labels...).doc(doc)
}

// doc adds the guidance that the metrics reference prints after the HELP.
func (d *Def) doc(text string) *Def {
	d.Doc = text
	return d
}

func (d *Def) live() *Def {
	d.Live = true
	return d
}

// Desc returns the family's descriptor.
func (d *Def) Desc() *prometheus.Desc { return d.desc }

// Namespaced reports whether the family's series carry a namespace: such a
// series comes from the shard that owns the namespace, any other from shard 0.
func (d *Def) Namespaced() bool { return d.namespaceLabel >= 0 }

// emitter collects the series of one collector's run, dropping a repeated
// label set of a family (which would make the whole scrape fail) when asked
// to check. The exporter sends them only when the run succeeds. Gauges are
// kept as samples (the label values slice is kept: pass one per series);
// other metrics, the node agent's counters, as const metrics.
type emitter struct {
	samples []sample
	metrics []prometheus.Metric
	seen    map[string]struct{}
	shard   shard.Shard
}

func (e *emitter) gauge(d *Def, v float64, lvs ...string) {
	if !e.owns(d, lvs) {
		return
	}
	e.samples = append(e.samples, sample{def: d, v: v, lvs: lvs})
}

// constMetrics returns every series as client_golang const metrics.
func (e *emitter) constMetrics() []prometheus.Metric {
	out := make([]prometheus.Metric, 0, len(e.samples)+len(e.metrics))
	for _, s := range e.samples {
		out = append(out, prometheus.MustNewConstMetric(s.def.desc, prometheus.GaugeValue, s.v, s.lvs...))
	}
	return append(out, e.metrics...)
}

// uniqueGauge emits a gauge unless the family already has this label set.
func (e *emitter) uniqueGauge(d *Def, v float64, lvs ...string) {
	if e.seen == nil {
		e.seen = map[string]struct{}{}
	}
	if !e.owns(d, lvs) {
		return
	}
	key := d.Name + "\xff" + strings.Join(lvs, "\xff")
	if _, dup := e.seen[key]; dup {
		return
	}
	e.seen[key] = struct{}{}
	e.gauge(d, v, lvs...)
}

// owns reports whether this shard emits the series: the one sharding rule,
// applied to every family alike so that each series has exactly one shard.
func (e *emitter) owns(d *Def, lvs []string) bool {
	if !e.shard.Sharded() {
		return true
	}
	if d.namespaceLabel < 0 {
		return e.shard.OwnsCluster()
	}
	return e.shard.Owns(lvs[d.namespaceLabel])
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
