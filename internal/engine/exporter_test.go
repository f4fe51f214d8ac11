package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// fakeCollector emits one gauge, then fails or panics as told.
type fakeCollector struct {
	name  string
	def   *family.Def
	fail  error
	panic any
}

func (f fakeCollector) Name() string        { return f.name }
func (f fakeCollector) Defs() []*family.Def { return []*family.Def{f.def} }
func (f fakeCollector) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	e.Gauge(f.def, 1, f.name)
	if f.panic != nil {
		panic(f.panic)
	}
	return f.fail
}

func newFake(name string) fakeCollector {
	return fakeCollector{name: name, def: family.New("dra_test_"+name, family.TypeGauge, "A test family.", "collector")}
}

type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// valueOf returns the gauge value of the series whose label "collector" is name.
func valueOf(mf *dto.MetricFamily, name string) (float64, bool) {
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "collector" && lp.GetValue() == name {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestExporterRecoversFailingCollectors(t *testing.T) {
	boom := newFake("boom")
	boom.panic = "index out of range"
	weird := newFake("weird")
	weird.panic = 42
	failing := newFake("failing")
	failing.fail = errors.New("no snapshot")
	ok := newFake("ok")

	logs := &logRecorder{}
	x := NewExporter(index.New(index.Config{}), nil, true, slog.New(logs), boom, ok, weird, failing)
	families := gather(t, x)

	for name, want := range map[string]float64{"boom": 0, "weird": 0, "failing": 0, "ok": 1} {
		got, found := valueOf(families["dra_exporter_scrape_collector_success"], name)
		if !found || got != want {
			t.Errorf("success{collector=%q} = %v (found %v), want %v", name, got, found, want)
		}
		if _, found := valueOf(families["dra_exporter_scrape_collector_duration_seconds"], name); !found {
			t.Errorf("no duration for collector %q", name)
		}
	}
	if _, found := valueOf(families["dra_test_ok"], "ok"); !found {
		t.Errorf("the healthy collector's family is missing")
	}
	// Each fake emitted one series before it failed: none of them stays.
	for _, name := range []string{"boom", "weird", "failing"} {
		if mf := families["dra_test_"+name]; mf != nil {
			t.Errorf("the failed collector %s left %d partial series in the scrape", name, len(mf.GetMetric()))
		}
	}
	joined := strings.Join(logs.msgs, "\n")
	for _, want := range []string{"collector=boom panic=index out of range stack=goroutine", "collector=weird panic=42 stack=goroutine", "collector=failing err=no snapshot"} {
		if !strings.Contains(joined, want) {
			t.Errorf("log lacks %q:\n%s", want, joined)
		}
	}
	if !strings.Contains(joined, "exporter_test.go") {
		t.Errorf("the logged stack does not reach the panicking Update:\n%s", joined)
	}
}

func TestExporterWithoutTimingOmitsSelfFamilies(t *testing.T) {
	x := NewExporter(index.New(index.Config{}), nil, false, slog.New(slog.DiscardHandler), newFake("ok"))
	families := gather(t, x)
	if _, found := families["dra_exporter_scrape_collector_success"]; found {
		t.Errorf("timing off, yet success is exported")
	}
	if len(x.Defs()) != 1 {
		t.Errorf("Defs = %d, want 1", len(x.Defs()))
	}
	if n := len(NewExporter(nil, nil, true, nil, newFake("ok")).Defs()); n != 3 {
		t.Errorf("Defs with timing = %d, want 3", n)
	}
}

// The offline paths (snapshot, golden tests) build the Exporter with a nil
// logger; a failing collector must then still be skipped, not crash the
// scrape.
func TestExporterNilLoggerFailingCollector(t *testing.T) {
	failing := newFake("failing")
	failing.fail = errors.New("no snapshot")
	x := NewExporter(index.New(index.Config{}), nil, true, nil, failing, newFake("ok"))
	ch := make(chan prometheus.Metric, 64)
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Collect panicked with a nil logger: %v", r)
			}
		}()
		x.Collect(ch)
	}()
	close(ch)
	n := 0
	for range ch {
		n++
	}
	if n != 5 { // the healthy gauge (the failed one is dropped), two durations, two successes
		t.Errorf("collected %d metrics, want 5", n)
	}
}

// Until the index is complete nothing is rendered: a partial index reads
// as leaks and empty classes.
func TestExporterRendersOnlyWhenComplete(t *testing.T) {
	complete := false
	x := NewExporter(index.New(index.Config{}), nil, true, nil, newFake("ok")).RenderOnlyWhen(func() bool { return complete })
	if families := gather(t, x); len(families) != 0 {
		t.Errorf("incomplete index, yet rendered %d families", len(families))
	}
	complete = true
	if families := gather(t, x); families["dra_exporter_scrape_collector_success"] == nil {
		t.Errorf("complete index, yet nothing rendered: %v", families)
	}
}
