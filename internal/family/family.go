// Package family defines the metric families and writes their series: Def,
// one family's name, type, help and labels, the single source of its
// descriptor and of the generated metrics reference; the Emitter a
// collector writes its series into; and a series' line in the text
// exposition, byte for byte what client_golang writes. It knows nothing of
// the cluster, so that the node agent defines its families here without
// linking the cluster exporter's index, classifier or CEL (the engine that
// runs the cluster collectors is internal/engine).
package family

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// Metric types, as written in the metrics reference.
const (
	TypeGauge     = "gauge"
	TypeCounter   = "counter"
	TypeHistogram = "histogram"
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
	// order is the positions of Labels sorted by name (LabelOrder).
	orderOnce sync.Once
	order     []int
	// namespaceLabel is the position of the namespace label, -1 for a
	// cluster-scoped family: it decides which shard emits a series.
	namespaceLabel int
}

// New describes a family whose HELP line is help.
func New(name, typ, help string, labels ...string) *Def {
	return &Def{Name: name, Type: typ, Help: help, Labels: labels, desc: prometheus.NewDesc(name, help, labels, nil),
		namespaceLabel: slices.Index(labels, "namespace")}
}

// NewSplit is New for a text whose first sentence is the HELP line and
// whose rest is the reference's guidance; or the HELP line, a NUL and the
// guidance.
func NewSplit(name, typ, text string, labels ...string) *Def {
	if help, doc, ok := strings.Cut(text, "\x00"); ok {
		return New(name, typ, help, labels...).WithDoc(doc)
	}
	help, doc, _ := strings.Cut(text, ". ")
	if doc == "" {
		return New(name, typ, text, labels...)
	}
	return New(name, typ, help+".", labels...).WithDoc(doc)
}

// WithDoc adds the guidance that the metrics reference prints after the
// HELP.
func (d *Def) WithDoc(text string) *Def {
	d.Doc = text
	return d
}

// Liveness marks a family only a running process serves.
func (d *Def) Liveness() *Def {
	d.Live = true
	return d
}

// Desc returns the family's descriptor.
func (d *Def) Desc() *prometheus.Desc { return d.desc }

// Namespaced reports whether the family's series carry a namespace: such a
// series comes from the shard that owns the namespace, any other from shard 0.
func (d *Def) Namespaced() bool { return d.namespaceLabel >= 0 }

// Sample is one series of a gauge family, as a collector emitted it.
type Sample struct {
	Def   *Def
	Value float64
	// LabelValues are in the order of Def.Labels.
	LabelValues []string
}

// Emitter collects the series of one collector's run, dropping a repeated
// label set of a family (which would make the whole scrape fail) when asked
// to check, and the series another shard emits. The engine sends them only
// when the run succeeds. The label values slice is kept: pass one per
// series.
type Emitter struct {
	samples []Sample
	seen    map[string]struct{}
	shard   shard.Shard
}

// NewEmitter returns an emitter for the series shard s emits.
func NewEmitter(s shard.Shard) *Emitter { return &Emitter{shard: s} }

// Samples returns the series emitted so far.
func (e *Emitter) Samples() []Sample { return e.samples }

// Gauge emits a gauge series.
func (e *Emitter) Gauge(d *Def, v float64, lvs ...string) {
	if !e.owns(d, lvs) {
		return
	}
	e.samples = append(e.samples, Sample{Def: d, Value: v, LabelValues: lvs})
}

// UniqueGauge emits a gauge unless the family already has this label set.
func (e *Emitter) UniqueGauge(d *Def, v float64, lvs ...string) {
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
	e.Gauge(d, v, lvs...)
}

// owns reports whether this shard emits the series: the one sharding rule,
// applied to every family alike so that each series has exactly one shard.
func (e *Emitter) owns(d *Def, lvs []string) bool {
	if !e.shard.Sharded() {
		return true
	}
	if d.namespaceLabel < 0 {
		return e.shard.OwnsCluster()
	}
	return e.shard.Owns(lvs[d.namespaceLabel])
}

// BoolFloat is a boolean as a gauge's value: 1 or 0.
func BoolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
