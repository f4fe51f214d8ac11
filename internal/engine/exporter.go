// Package engine runs the cluster exporter's collectors over index
// snapshots and writes what they emit: the Exporter (one snapshot per
// scrape, every collector over it, each timed, a failing one left out),
// the row store that keeps each object's rendered series and renders only
// the rows of changed objects (store.go, lines.go), and the text,
// OpenMetrics and protobuf encoders /metrics serves. The collectors are in
// collector/, which names this package; the engine names none of them: a
// collector says what the engine may keep or must hold through the
// interfaces it implements (RowCollector with its fan-out links, Verdict,
// ClockBound).
package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// Source hands out index snapshots.
type Source interface {
	Snapshot() *index.Snapshot
}

// Collector emits the metrics of one concern for a snapshot.
type Collector interface {
	// Name labels the collector's scrape duration.
	Name() string
	// Defs lists the families the collector emits.
	Defs() []*family.Def
	// Update emits the metrics for one snapshot taken at now.
	Update(s *index.Snapshot, now time.Time, e *family.Emitter) error
}

var (
	scrapeDuration = family.New("dra_exporter_scrape_collector_duration_seconds", family.TypeGauge,
		"Time the collector took to render the last scrape, in seconds.", "collector").Liveness()
	scrapeSuccess = family.New("dra_exporter_scrape_collector_success", family.TypeGauge,
		"Whether the collector succeeded on the last scrape (1) or failed (0).", "collector").Liveness()
)

// Exporter is the prometheus.Collector that takes one snapshot per scrape
// and runs every collector over it, timing each.
type Exporter struct {
	src        Source
	now        func() time.Time
	collectors []Collector
	// timing adds the per-collector duration and success families; the
	// offline snapshot leaves them out.
	timing bool
	logger *slog.Logger
	// complete reports whether the index holds the whole cluster (every
	// informer listed); until then nothing is rendered.
	complete func() bool
	// shard limits the series to this exporter's part of the cluster.
	shard shard.Shard
	// store keeps the row collectors' rendered rows (see store.go).
	store store
	// holdVerdicts reports whether the verdict collectors must run over
	// the last snapshot taken while it was false (see HoldVerdictsWhen).
	holdVerdicts func() bool
	heldMu       sync.Mutex
	held         *index.Snapshot
	heldAt       time.Time
}

// Verdict marks the collectors whose series are verdicts that page people
// (a pod blocked, a reservation leaked, a device given twice, and the gates
// that read them): each reads claims and pods together, and a claim from
// before an outage beside a pod from after it is a verdict the cluster
// never had. HoldVerdictsWhen holds them.
type Verdict interface{ Verdict() }

// HoldVerdictsWhen makes the verdict collectors (blocked pods, leaks,
// allocation conflicts) run over the last snapshot, at the time, of the
// last scrape for which hold returned false, for as long as it returns
// true: their families then read exactly as they did then. The exporter
// holds them while any resource's watch is stale (internal/kube), so that
// no verdict mixes a fresh resource with a stale one; the other families
// serve what each resource last said. Before any such scrape they are
// left out.
func (x *Exporter) HoldVerdictsWhen(hold func() bool) *Exporter {
	x.holdVerdicts = hold
	return x
}

// verdictView returns the snapshot and time the verdict collectors read:
// s and now, or those held (nil when there are none yet).
func (x *Exporter) verdictView(s *index.Snapshot, now time.Time) (*index.Snapshot, time.Time) {
	if x.holdVerdicts == nil {
		return s, now
	}
	hold := x.holdVerdicts()
	x.heldMu.Lock()
	defer x.heldMu.Unlock()
	if !hold {
		x.held, x.heldAt = s, now
	}
	return x.held, x.heldAt
}

// Shard makes the exporter emit only its shard's series: those whose
// namespace label the shard owns and, on shard 0, the cluster-scoped ones.
// The snapshot must still hold every claim and pod (see internal/shard).
func (x *Exporter) Shard(s shard.Shard) *Exporter {
	x.shard = s
	return x
}

// RenderOnlyWhen makes the exporter render the cluster families only while
// complete returns true. Before the informers' initial lists finish, the
// index is partial: a claim whose pod is not listed yet would read as a
// leak, a class whose slices are not listed yet as empty. Self-metrics
// (informer sync) say why the families are absent.
func (x *Exporter) RenderOnlyWhen(complete func() bool) *Exporter {
	x.complete = complete
	return x
}

// NewExporter wires the collectors, in the order given.
func NewExporter(src Source, now func() time.Time, timing bool, logger *slog.Logger, collectors ...Collector) *Exporter {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Exporter{src: src, now: now, collectors: collectors, timing: timing, logger: logger}
}

// Describe sends every family's descriptor.
func (x *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range x.collectors {
		for _, d := range c.Defs() {
			ch <- d.Desc()
		}
	}
	if x.timing {
		ch <- scrapeDuration.Desc()
		ch <- scrapeSuccess.Desc()
	}
}

// Collect takes one snapshot and runs every collector over it. A collector
// that fails (or panics on unexpected data) is logged, with the panic's
// value and stack, and reported by dra_exporter_scrape_collector_success;
// none of its series are sent, because half a family reads as a healthy
// cluster (the blocked pods it did not reach would look unblocked). The
// other collectors still emit.
func (x *Exporter) Collect(ch chan<- prometheus.Metric) {
	x.each(func(i int, s *index.Snapshot, now time.Time) ([]family.Sample, error) {
		e, err := x.run(x.collectors[i], s, now)
		if err != nil {
			return nil, err
		}
		return e.Samples(), nil
	}, func(_ int, samples []family.Sample) {
		for _, s := range samples {
			ch <- prometheus.MustNewConstMetric(s.Def.Desc(), prometheus.GaugeValue, s.Value, s.LabelValues...)
		}
	})
}

func (x *Exporter) logFailure(c Collector, err error) {
	var p panicError
	if errors.As(err, &p) {
		x.logger.Error("collector panicked; its series are left out of this scrape", "collector", c.Name(), "panic", fmt.Sprint(p.value), "stack", string(p.stack))
	} else {
		x.logger.Error("collector failed; its series are left out of this scrape", "collector", c.Name(), "err", err)
	}
}

// shardRuns reports whether the collector has anything to emit on this
// shard: one whose families are all cluster-scoped runs on shard 0 only
// (its series would all be dropped elsewhere, and capacity is costly).
func (x *Exporter) shardRuns(c Collector) bool {
	if x.shard.OwnsCluster() {
		return true
	}
	for _, d := range c.Defs() {
		if d.Namespaced() {
			return true
		}
	}
	return false
}

func (x *Exporter) run(c Collector, s *index.Snapshot, now time.Time) (e *family.Emitter, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, panicError{value: r, stack: debug.Stack()}
		}
	}()
	e = family.NewEmitter(x.shard)
	if err := c.Update(s, now, e); err != nil {
		return nil, err
	}
	return e, nil
}

// panicError is a collector's panic, with the stack where it happened.
type panicError struct {
	value any
	stack []byte
}

func (p panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// Defs lists every family the exporter emits, in collector order.
func (x *Exporter) Defs() []*family.Def {
	var out []*family.Def
	for _, c := range x.collectors {
		out = append(out, c.Defs()...)
	}
	if x.timing {
		out = append(out, scrapeDuration, scrapeSuccess)
	}
	return out
}
