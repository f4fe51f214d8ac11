package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

var (
	testNamespaced = family.New("dra_test_namespaced", family.TypeGauge, "A namespaced test family.", "pod", "namespace")
	testCluster    = family.New("dra_test_cluster", family.TypeGauge, "A cluster-scoped test family.", "node")
)

// shardFake emits one namespaced series per namespace (once through
// uniqueGauge) and one cluster-scoped series.
type shardFake struct{ namespaces []string }

func (shardFake) Name() string        { return "shardfake" }
func (shardFake) Defs() []*family.Def { return []*family.Def{testNamespaced, testCluster} }
func (f shardFake) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	for _, ns := range f.namespaces {
		e.Gauge(testNamespaced, 1, "p", ns)
		e.UniqueGauge(testNamespaced, 2, "q", ns)
	}
	e.Gauge(testCluster, 1, "node-1")
	return nil
}

func TestShardEmitsItsNamespacesAndShardZeroTheCluster(t *testing.T) {
	if !testNamespaced.Namespaced() || testCluster.Namespaced() {
		t.Fatal("Namespaced() does not follow the namespace label")
	}
	fake := shardFake{namespaces: []string{"a", "b", "c"}}
	// a -> 0, b -> 1, c -> 2.
	assign := func(ns string) int { return int(ns[0] - 'a') }
	want := []string{
		`dra_test_cluster{node="node-1"} 1
dra_test_namespaced{namespace="a",pod="p"} 1
dra_test_namespaced{namespace="a",pod="q"} 2`,
		`dra_test_namespaced{namespace="b",pod="p"} 1
dra_test_namespaced{namespace="b",pod="q"} 2`,
		`dra_test_namespaced{namespace="c",pod="p"} 1
dra_test_namespaced{namespace="c",pod="q"} 2`,
	}
	for i := range 3 {
		sh, err := shard.WithAssignment(i, 3, assign)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Render(NewExporter(staticSource{}, nil, false, nil, fake).Shard(sh))
		if err != nil {
			t.Fatal(err)
		}
		if got := seriesLines(string(out)); got != want[i] {
			t.Errorf("shard %d:\n%s\nwant:\n%s", i, got, want[i])
		}
	}
	out, err := Render(NewExporter(staticSource{}, nil, false, nil, fake))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(seriesLines(string(out)), "\n") + 1; got != 7 {
		t.Errorf("unsharded: %d series, want all 7:\n%s", got, out)
	}
}

type staticSource struct{}

func (staticSource) Snapshot() *index.Snapshot { return index.New(index.Config{}).Snapshot() }

// seriesLines drops the HELP and TYPE lines.
func seriesLines(text string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// clusterOnly counts its runs.
type clusterOnly struct{ runs *int }

func (clusterOnly) Name() string        { return "clusteronly" }
func (clusterOnly) Defs() []*family.Def { return []*family.Def{testCluster} }
func (c clusterOnly) Update(_ *index.Snapshot, _ time.Time, e *family.Emitter) error {
	*c.runs++
	e.Gauge(testCluster, 1, "node-1")
	return nil
}

// A collector of cluster-scoped families only runs on shard 0: elsewhere
// all its series would be dropped.
func TestClusterOnlyCollectorRunsOnShardZero(t *testing.T) {
	for i, want := range []int{1, 0, 0} {
		runs := 0
		sh, err := shard.New(i, 3)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Render(NewExporter(staticSource{}, nil, true, nil, clusterOnly{&runs}).Shard(sh))
		if err != nil {
			t.Fatal(err)
		}
		if runs != want || strings.Contains(string(out), `collector="clusteronly"`) != (want == 1) {
			t.Errorf("shard %d: ran %d times, want %d:\n%s", i, runs, want, out)
		}
	}
}
