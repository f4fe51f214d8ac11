package engine

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// oddCollector emits what expfmt escapes, sorts or formats specially:
// quotes, backslashes and newlines in label values and help, labels not in
// name order, a repeated label set, NaN, infinities, negative zero, big and
// small numbers.
type oddCollector struct{ a, b *family.Def }

func (oddCollector) Name() string          { return "odd" }
func (c oddCollector) Defs() []*family.Def { return []*family.Def{c.a, c.b} }
func (c oddCollector) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	e.Gauge(c.a, 1, "z", `say "hi"`, "x")
	e.Gauge(c.a, 2, "a", `back\slash`, "x")
	e.Gauge(c.a, 3, "a", "new\nline", "")
	e.Gauge(c.a, 4, "z", `say "hi"`, "x") // repeated: Gather keeps the first
	e.Gauge(c.a, math.NaN(), "m", "", "nan")
	e.Gauge(c.a, math.Inf(1), "m", "", "inf")
	e.Gauge(c.a, math.Inf(-1), "m", "", "-inf")
	e.Gauge(c.a, math.Copysign(0, -1), "m", "", "-0")
	e.Gauge(c.a, 1.5e300, "m", "", "big")
	e.Gauge(c.a, 123456789, "m", "", "int")
	e.Gauge(c.a, -1, "m", "", "-1")
	e.Gauge(c.a, 1e-7, "m", "", "small")
	e.Gauge(c.b, 0.25)
	return nil
}

// TestTextMatchesGather holds the fast path to client_golang's Gather and
// expfmt's encoders byte for byte, in the text format, in OpenMetrics and
// in delimited protobuf.
func TestTextMatchesGather(t *testing.T) {
	odd := oddCollector{
		a: family.New("dra_test_odd", family.TypeGauge, "Help with \\ a backslash, \"quotes\"\nand a newline.", "zone", "app", "b_label"),
		b: family.New("dra_test_alone", family.TypeGauge, "No labels."),
	}
	x := NewExporter(index.New(index.Config{}), nil, true, nil, odd, newFake("ok"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	mfs, err := reg.Gather()
	if err == nil {
		t.Fatal("Gather accepted the repeated label set; the test no longer covers it")
	}
	for _, openMetrics := range []bool{false, true} {
		var want bytes.Buffer
		for _, mf := range mfs {
			if mf.GetName() == scrapeDuration.Name {
				continue // its value differs between the two runs
			}
			if openMetrics {
				_, err = expfmt.MetricFamilyToOpenMetrics(&want, mf)
			} else {
				_, err = expfmt.MetricFamilyToText(&want, mf)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		var got []byte
		for _, f := range x.TextFamilies(openMetrics) {
			if f.Name != scrapeDuration.Name {
				got = f.AppendTo(got)
			}
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("openMetrics=%v: fast path\n%s\nGather and expfmt\n%s", openMetrics, got, want.Bytes())
		}
	}

	var want bytes.Buffer
	enc := expfmt.NewEncoder(&want, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range mfs {
		if mf.GetName() == scrapeDuration.Name {
			continue
		}
		for _, m := range mf.GetMetric() {
			// The kept text holds a negative zero as 0 (as expfmt writes
			// it), so protobuf carries +0: the same sample to Prometheus.
			if g := m.GetGauge(); g != nil && g.GetValue() == 0 {
				g.Value = new(0.0)
			}
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	var got bytes.Buffer
	for _, f := range x.TextFamilies(false) {
		if f.Name == scrapeDuration.Name {
			continue
		}
		if _, err := f.WriteProtoTo(&got); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("protobuf: fast path\n%q\nGather and expfmt\n%q", got.Bytes(), want.Bytes())
	}
}

// A series whose Metric is longer than the length slot appendMetric keeps
// for it (2 MiB) is encoded as client_golang encodes it.
func TestProtoLongSeries(t *testing.T) {
	long := family.New("dra_test_long", family.TypeGauge, "A long label value.", "value")
	x := NewExporter(index.New(index.Config{}), nil, false, nil, longCollector{long, strings.Repeat("v", 3<<20)})
	reg := prometheus.NewRegistry()
	reg.MustRegister(x)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var want, got bytes.Buffer
	enc := expfmt.NewEncoder(&want, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range x.TextFamilies(false) {
		if _, err := f.WriteProtoTo(&got); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("a 3 MiB label value: %d bytes, client_golang %d", got.Len(), want.Len())
	}
}

type longCollector struct {
	d     *family.Def
	value string
}

func (longCollector) Name() string          { return "long" }
func (c longCollector) Defs() []*family.Def { return []*family.Def{c.d} }
func (c longCollector) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	e.Gauge(c.d, 7, c.value)
	return nil
}
