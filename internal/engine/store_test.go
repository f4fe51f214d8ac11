package engine

import (
	"bytes"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// nodeRows has a row per node, which says whether class exists (the
// link, in linkedNodeRows), and counts the rows it renders. panicAt makes the pass
// panic at that node, after rendering the rows before it.
type nodeRows struct {
	name    string
	def     *family.Def
	class   string
	renders *atomic.Int32
	panicAt string
}

func (c nodeRows) Name() string        { return c.name }
func (c nodeRows) Defs() []*family.Def { return []*family.Def{c.def} }
func (c nodeRows) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	UpdateRows(c, s, now, e)
	return nil
}
func (c nodeRows) EachRow(s *index.Snapshot, _ time.Time, rows *Rows) {
	for _, n := range s.Nodes {
		if n.Name == c.panicAt {
			panic("boom")
		}
		e := rows.Row(n)
		if e == nil {
			continue
		}
		c.renders.Add(1)
		e.Gauge(c.def, family.BoolFloat(s.Class(c.class) != nil), n.Name)
	}
	// A repeated key is one row.
	if len(s.Nodes) > 0 {
		if e := rows.Row(s.Nodes[0]); e != nil {
			e.Gauge(c.def, 2, s.Nodes[0].Name)
		}
	}
}

// linkedNodeRows declares its link to the class.
type linkedNodeRows struct{ nodeRows }

func (c linkedNodeRows) Links() []Link {
	return []Link{{Name: "a class's nodes", Kinds: index.KindsOf(index.KindClass),
		Of: func(s *index.Snapshot, _ any, out []any) []any { return append(out, s.Class(c.class)) }}}
}

func newNodeRows(name string, renders *atomic.Int32) nodeRows {
	return nodeRows{name: name, def: family.New("dra_test_"+name, family.TypeGauge, "Nodes.", "node"),
		class: testobj.GPUClassName, renders: renders}
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

// A row is rendered once and written from the store while its object is
// the same record, in either format; a new object renders its row alone; a
// collector that is not a row collector runs on every scrape; and every
// scrape writes what a fresh exporter writes.
func TestStoreRendersOnlyChangedRows(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0))
	var renders, fresh atomic.Int32
	x := NewExporter(ix, nil, true, nil, newNodeRows("rows", &renders), newFake("impure"))
	check := func(what string, om bool) []byte {
		t.Helper()
		got := text(x, om)
		if want := text(NewExporter(ix, nil, true, nil, newNodeRows("rows", &fresh), newFake("impure")), om); !bytes.Equal(got, want) {
			t.Fatalf("%s: the store writes\n%s\na fresh exporter\n%s", what, got, want)
		}
		return got
	}
	first := check("first scrape", false)
	if !bytes.Contains(first, []byte(`dra_test_rows{node="node-a"} 0`)) || !bytes.Contains(first, []byte(`dra_test_impure{collector="impure"} 1`)) {
		t.Fatalf("first scrape lacks a family:\n%s", first)
	}
	check("unchanged", false)
	if om := check("unchanged, OpenMetrics", true); !bytes.Contains(om, []byte(`dra_test_rows{node="node-a"} 0.0`)) {
		t.Errorf("not OpenMetrics:\n%s", om)
	}
	if got := renders.Load(); got != 1 {
		t.Errorf("one node over three scrapes rendered %d rows, want 1", got)
	}
	testobj.Upsert(t, ix, testobj.Node("node-b", 0), true)
	check("a node added", false)
	if got := renders.Load(); got != 2 {
		t.Errorf("a new node rendered %d rows in all, want 2 (its own)", got)
	}
	testobj.Del(t, ix, testobj.Node("node-a", 0))
	if out := check("a node deleted", false); bytes.Contains(out, []byte("node-a")) {
		t.Errorf("a deleted node's row stays:\n%s", out)
	}
	if got := renders.Load(); got != 2 {
		t.Errorf("a deleted node rendered rows (%d in all, want 2)", got)
	}
}

// A row that reads another object through a declared link renders again
// when that object changes; without the declaration it is kept, stale:
// what the fan-out table is for.
func TestStoreLinksRenderAgain(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0))
	var renders atomic.Int32
	unlinked := newNodeRows("unlinked", &renders)
	linked := linkedNodeRows{newNodeRows("linked", &renders)}
	x := NewExporter(ix, nil, false, nil, unlinked, linked)
	text(x, false)
	testobj.Upsert(t, ix, testobj.GPUClass(), true)
	out := text(x, false)
	if !bytes.Contains(out, []byte(`dra_test_linked{node="node-a"} 1`)) {
		t.Errorf("a linked row did not render again when its class appeared:\n%s", out)
	}
	if !bytes.Contains(out, []byte(`dra_test_unlinked{node="node-a"} 0`)) {
		t.Errorf("an undeclared read was noticed (the test's premise is wrong):\n%s", out)
	}
	if got := renders.Load(); got != 3 {
		t.Errorf("rendered %d rows, want 3 (two first, the linked one again)", got)
	}
}

// A pass that panics half-way is not kept: the scrape leaves the family
// out, and the next pass renders every row again.
func TestStoreForgetsAFailedPass(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0), testobj.Node("node-b", 0))
	var renders atomic.Int32
	boom := newNodeRows("rows", &renders)
	boom.panicAt = "node-c"
	y := NewExporter(ix, nil, false, nil, boom)
	text(y, false)
	testobj.Upsert(t, ix, testobj.Node("node-c", 0), true)
	if out := text(y, false); bytes.Contains(out, []byte("dra_test_rows")) {
		t.Errorf("a failed pass wrote its family:\n%s", out)
	}
	testobj.Del(t, ix, testobj.Node("node-c", 0))
	renders.Store(0)
	if out := text(y, false); !bytes.Contains(out, []byte(`dra_test_rows{node="node-b"} 0`)) {
		t.Errorf("after a failed pass the family is missing:\n%s", out)
	}
	if got := renders.Load(); got != 2 {
		t.Errorf("after a failed pass %d rows rendered, want every row (2)", got)
	}
}

// After Prerender a scrape, in either format, is written from the store:
// no row is rendered again.
func TestPrerenderFillsTheStore(t *testing.T) {
	ix := testobj.Build(t, index.Config{}, testobj.Node("node-a", 0))
	var renders atomic.Int32
	x := NewExporter(ix, nil, true, nil, newNodeRows("rows", &renders))
	x.Prerender()
	for _, om := range []bool{false, true} {
		if out := text(x, om); !bytes.Contains(out, []byte(`dra_test_rows{node="node-a"} 0`)) {
			t.Errorf("openmetrics %v: the family is missing:\n%s", om, out)
		}
	}
	if got := renders.Load(); got != 1 {
		t.Errorf("rendered %d rows, want once (by Prerender)", got)
	}
}

// podRows has a row per pod and counts its whole passes and the pods it
// is handed alone (Partial).
type podRows struct {
	def          *family.Def
	passes, some *atomic.Int32
}

func (c podRows) Name() string        { return "pods" }
func (c podRows) Defs() []*family.Def { return []*family.Def{c.def} }
func (c podRows) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	UpdateRows(c, s, now, e)
	return nil
}
func (c podRows) EachRow(s *index.Snapshot, _ time.Time, rows *Rows) {
	c.passes.Add(1)
	for _, p := range s.Pods {
		c.row(p, rows)
	}
}
func (c podRows) RowsOf(_ *index.Snapshot, _ time.Time, objs []any, rows *Rows) {
	for _, o := range objs {
		c.some.Add(1)
		c.row(o.(*index.Pod), rows)
	}
}
func (c podRows) row(p *index.Pod, rows *Rows) {
	if e := rows.Row(p); e != nil {
		e.Gauge(c.def, family.BoolFloat(p.Ready()), p.Key.Name)
	}
}

// While only pods changed, a row collector of pods is handed the changed
// pods alone, from the index's change sets; what it writes is what a
// fresh exporter writes. A change of another kind its rows are not keyed
// on (a node) leaves it alone; a snapshot the store did not see the one
// before of makes a whole pass.
func TestStoreRendersTheChangedPodsAlone(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return testobj.WithNamedClaim(testobj.Pod(name, "uid-"+name), "gpu", name+"-gpu")
	}
	ix := testobj.Build(t, index.Config{}, testobj.GPUClass(), testobj.Node("node-1", 0), pod("p-0"), pod("p-1"), pod("p-2"))
	def := family.New("dra_test_pods", family.TypeGauge, "Pods.", "pod")
	var passes, some atomic.Int32
	x := NewExporter(ix, nil, false, nil, podRows{def, &passes, &some})
	check := func(what string, wantPasses, wantSome int32) {
		t.Helper()
		got := text(x, false)
		if want := text(NewExporter(ix, nil, false, nil, podRows{def, new(atomic.Int32), new(atomic.Int32)}), false); !bytes.Equal(got, want) {
			t.Fatalf("%s: the store writes\n%s\na fresh exporter\n%s", what, got, want)
		}
		if passes.Load() != wantPasses || some.Load() != wantSome {
			t.Errorf("%s: %d whole passes and %d pods alone, want %d and %d", what, passes.Load(), some.Load(), wantPasses, wantSome)
		}
	}
	check("first scrape", 1, 0)
	testobj.Upsert(t, ix, testobj.Ready(testobj.Bound(pod("p-1"), "node-1")), true)
	check("one pod ready", 1, 1)
	testobj.Del(t, ix, pod("p-0"))
	testobj.Upsert(t, ix, pod("p-3"), true)
	check("a pod deleted, one added", 1, 2)
	testobj.Upsert(t, ix, testobj.Node("node-2", 0), true)
	check("a node added", 1, 2)
	testobj.Upsert(t, ix, pod("p-4"), true)
	ix.Snapshot() // a snapshot the store does not see
	testobj.Upsert(t, ix, pod("p-5"), true)
	check("two snapshots on", 2, 2)
}

// A family of rows keeps each chunk's protobuf encoding across scrapes: a
// scrape after one row's change encodes the chunk that changed, shares
// every other chunk's encoding with the scrape before, and writes what a
// fresh exporter writes.
func TestStoreKeepsChunkEncodings(t *testing.T) {
	var nodes []any
	for i := range 3 * chunkLines {
		nodes = append(nodes, testobj.Node(fmt.Sprintf("node-%04d", i), 0))
	}
	ix := testobj.Build(t, index.Config{}, nodes...)
	var renders atomic.Int32
	x := NewExporter(ix, nil, false, nil, newNodeRows("rows", &renders))
	proto := func(x *Exporter) ([]byte, lineSeq) {
		t.Helper()
		var buf bytes.Buffer
		var seq lineSeq
		for _, f := range x.TextFamilies(false) {
			if _, err := f.WriteProtoTo(&buf); err != nil {
				t.Fatal(err)
			}
			if f.Name == "dra_test_rows" {
				seq = f.lines
			}
		}
		return buf.Bytes(), seq
	}
	before, first := proto(x)
	if len(first.chunks) < 3 {
		t.Fatalf("%d chunks: the test needs several", len(first.chunks))
	}
	testobj.Upsert(t, ix, testobj.Node("node-0000a", 0), true) // a row in the first chunk
	after, second := proto(x)
	want, _ := proto(NewExporter(ix, nil, false, nil, newNodeRows("rows", &renders)))
	if !bytes.Equal(after, want) {
		t.Fatalf("after a change the kept encodings write %d bytes unlike a fresh exporter's %d", len(after), len(want))
	}
	if bytes.Equal(before, after) {
		t.Fatal("the change did not change the protobuf (the test's premise is wrong)")
	}
	shared := 0
	for c, p := range second.protos {
		if slices.Contains(first.protos, p) {
			shared++
			if &second.proto(c, nil)[0] != &first.protos[slices.Index(first.protos, p)].b[0] {
				t.Errorf("chunk %d encoded again", c)
			}
		}
	}
	if shared != len(second.chunks)-1 {
		t.Errorf("%d of %d chunks share their encoding after a one-row change, want all but one", shared, len(second.chunks))
	}
}
