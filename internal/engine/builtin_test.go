package engine_test

// The engine over the built-in collectors (collector/), which this package
// does not import: its caches hold their families, and a panicking
// collector does not lose theirs.

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// panicking emits one gauge, then panics.
type panicking struct{ def *family.Def }

func (panicking) Name() string          { return "boom" }
func (p panicking) Defs() []*family.Def { return []*family.Def{p.def} }
func (p panicking) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	e.Gauge(p.def, 1, "boom")
	panic("boom")
}

func text(x *engine.Exporter) []byte {
	var out []byte
	for _, f := range x.TextFamilies(false) {
		out = f.AppendTo(out)
	}
	return out
}

// The built-in collectors scraped twice over an unchanged index write the
// same bytes as the first scrape and as a fresh exporter.
func TestTextFamiliesReuseBuiltins(t *testing.T) {
	objs := []any{testobj.GPUClass(), testobj.Node("node-1", 0)}
	for i := range 3 {
		p := testobj.Pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-p-%d", i))
		objs = append(objs, p)
	}
	ix := testobj.Build(t, index.Config{}, objs...)
	builtins := func() []engine.Collector {
		return []engine.Collector{collector.NewClaimCollector(), collector.NewBlockedCollector(), collector.NewDeviceCollector(collector.DefaultAttributeLabels),
			collector.NewDeviceClassCollector(), collector.NewLaneCollector(), collector.NewPodCollector(nil), collector.NewConflictCollector(), collector.NewHeldCollector(), collector.NewLeakCollector(time.Minute)}
	}
	x := engine.NewExporter(ix, nil, false, nil, builtins()...)
	a, b := text(x), text(x)
	want := text(engine.NewExporter(ix, nil, false, nil, builtins()...))
	if !bytes.Equal(a, b) || !bytes.Equal(b, want) {
		t.Errorf("reused scrape differs: first %d bytes, second %d, fresh %d", len(a), len(b), len(want))
	}
	if x.KeptRows() == 0 {
		t.Error("the row store kept no row of the built-in collectors")
	}
}

// The leak collector's kept families hold until an allocated, unreserved
// claim passes its grace period, and not past it.
func TestTextFamiliesLeakKeptUntilGraceEnds(t *testing.T) {
	t0 := testobj.T0
	cfg := index.Config{Now: func() time.Time { return t0 }}
	c := testobj.Allocated(testobj.Claim("idle", "uid-idle", testobj.Request("gpu", testobj.GPUClassName)), "node-1", t0,
		testobj.Result("gpu", "node-1", "gpu-0"))
	ix := testobj.Build(t, cfg, testobj.GPUClass(), testobj.Node("node-1", 0),
		testobj.Slice("node-1", "node-1", 1, testobj.GPUDevice("gpu-0", "GPU-0")), c)
	now := t0.Add(30 * time.Second)
	x := engine.NewExporter(ix, func() time.Time { return now }, false, nil, collector.NewLeakCollector(time.Minute))
	leaked := []byte(`reason="allocated_unreserved"`)
	if out := text(x); bytes.Contains(out, leaked) {
		t.Fatalf("leaked within the grace period:\n%s", out)
	}
	now = t0.Add(time.Minute)
	if out := text(x); bytes.Contains(out, leaked) {
		t.Fatalf("leaked at the end of the grace period:\n%s", out)
	}
	now = t0.Add(time.Minute + time.Second)
	out := text(x)
	if !bytes.Contains(out, leaked) {
		t.Fatalf("past the grace period the kept families still show no leak:\n%s", out)
	}
	if want := text(engine.NewExporter(ix, func() time.Time { return now }, false, nil, collector.NewLeakCollector(time.Minute))); !bytes.Equal(out, want) {
		t.Errorf("kept exporter writes\n%s\na fresh one\n%s", out, want)
	}
}

// A panic inside one collector must not lose the families of the
// collectors after it in the same scrape, on real data.
func TestExporterOtherCollectorsStillEmit(t *testing.T) {
	ix := index.New(index.Config{})
	node := "node-1"
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: &node,
			Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0"}}},
	}
	if err := ix.Upsert(s, false); err != nil {
		t.Fatal(err)
	}
	boom := panicking{family.New("dra_test_boom", family.TypeGauge, "A test family.", "collector")}
	x := engine.NewExporter(ix, nil, true, slog.New(slog.DiscardHandler), boom, collector.NewDeviceCollector(nil))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(x)
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, mf := range gathered {
		families[mf.GetName()] = mf
	}
	if mf := families["dra_device_info"]; mf == nil || len(mf.GetMetric()) != 1 {
		t.Errorf("dra_device_info missing after a panicking collector: %v", mf)
	}
	success := map[string]float64{}
	for _, m := range families["dra_exporter_scrape_collector_success"].GetMetric() {
		success[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	if success["device"] != 1 || success["boom"] != 0 {
		t.Errorf("success by collector = %v, want device 1 and boom 0", success)
	}
}
