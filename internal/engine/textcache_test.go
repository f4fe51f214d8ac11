package engine

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testobj"
)

// countingCollector is pure, like the built-in collectors but the leak
// one, and counts its runs; it emits one series per node in the snapshot.
type countingCollector struct {
	name string
	def  *family.Def
	runs *atomic.Int32
}

func (c countingCollector) Name() string        { return c.name }
func (c countingCollector) Defs() []*family.Def { return []*family.Def{c.def} }
func (countingCollector) SnapshotPure()         {}
func (c countingCollector) Update(s *index.Snapshot, _ time.Time, e *family.Emitter) error {
	c.runs.Add(1)
	for _, n := range s.Nodes {
		e.Gauge(c.def, 1, n.Name)
	}
	return nil
}

func text(x *Exporter, openMetrics bool) []byte {
	var out []byte
	for _, f := range x.TextFamilies(openMetrics) {
		if f.Name != scrapeDuration.Name {
			out = f.AppendTo(out)
		}
	}
	return out
}

// An unchanged index is written from the last scrape's text without
// running the pure collectors again, in either format (the cache holds the
// text format; OpenMetrics is converted as it is written); a change renders
// again; an impure collector (fakeCollector) runs on every scrape; and a
// family two collectors write into is never kept.
func TestTextFamiliesReuseFollowsTheIndex(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0))
	var pure, shared atomic.Int32
	sharedDef := family.New("dra_test_shared", family.TypeGauge, "Written by two collectors.", "node")
	x := NewExporter(ix, nil, true, nil,
		countingCollector{"pure", family.New("dra_test_pure", family.TypeGauge, "A pure family.", "node"), &pure},
		countingCollector{"shared1", sharedDef, &shared},
		countingCollector{"shared2", sharedDef, &shared},
		newFake("impure"))

	first := text(x, false)
	second := text(x, false)
	if !bytes.Equal(first, second) {
		t.Fatalf("an unchanged index scraped twice differs:\n%s\n---\n%s", first, second)
	}
	if got := pure.Load(); got != 1 {
		t.Errorf("pure collector ran %d times over one snapshot, want 1", got)
	}
	if got := shared.Load(); got != 4 {
		t.Errorf("collectors sharing a family ran %d times in two scrapes, want 4", got)
	}
	if !bytes.Contains(second, []byte(`dra_test_pure{node="node-a"} 1`)) || !bytes.Contains(second, []byte(`dra_exporter_scrape_collector_success{collector="pure"} 1`)) {
		t.Errorf("a reused scrape lost the pure family or its success series:\n%s", second)
	}

	om := text(x, true)
	if pure.Load() != 1 || !bytes.Contains(om, []byte(`dra_test_pure{node="node-a"} 1.0`)) {
		t.Errorf("the other format rendered again, or is not OpenMetrics (runs %d):\n%s", pure.Load(), om)
	}
	if text(x, false); pure.Load() != 1 {
		t.Errorf("back in the text format the pure collector ran again (runs %d)", pure.Load())
	}

	if err := ix.Upsert(testobj.Node("node-b", 0), true); err != nil {
		t.Fatal(err)
	}
	after := text(x, true)
	if pure.Load() != 2 || !bytes.Contains(after, []byte(`dra_test_pure{node="node-b"} 1.0`)) {
		t.Errorf("a change in the index did not render again (runs %d):\n%s", pure.Load(), after)
	}
	fresh := NewExporter(ix, nil, true, nil,
		countingCollector{"pure", family.New("dra_test_pure", family.TypeGauge, "A pure family.", "node"), new(atomic.Int32)},
		countingCollector{"shared1", sharedDef, new(atomic.Int32)},
		countingCollector{"shared2", sharedDef, new(atomic.Int32)},
		newFake("impure"))
	if want := text(fresh, true); !bytes.Equal(after, want) {
		t.Errorf("after a change the kept exporter writes\n%s\na fresh one\n%s", after, want)
	}
}

// After Prerender a scrape, in either format, is written from what it
// rendered: the pure collector does not run again.
func TestPrerenderFillsTheCache(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0))
	var runs atomic.Int32
	x := NewExporter(ix, nil, true, nil, countingCollector{"pure", family.New("dra_test_pure", family.TypeGauge, "A pure family.", "node"), &runs})
	x.Prerender()
	for _, om := range []bool{false, true} {
		if out := text(x, om); !bytes.Contains(out, []byte(`dra_test_pure{node="node-a"} 1`)) {
			t.Errorf("openmetrics %v: the family is missing:\n%s", om, out)
		}
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("the pure collector ran %d times, want once (by Prerender)", got)
	}
}
