package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/offline"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

const testShards = 3

// TestShardsUnionIsUnsharded renders every golden scenario, and the
// fixtures of testdata/sharding (joins across namespaces that the goldens
// keep in one), as 3 shards, for every way of spreading the objects'
// namespaces over them (and for the real hash), and checks that no series
// comes from two shards and that the union of the shards' series is the
// unsharded exposition, value for value.
func TestShardsUnionIsUnsharded(t *testing.T) {
	var paths []string
	for _, dir := range scenarios(t) {
		paths = append(paths, filepath.Join(dir, "objects.yaml"))
	}
	fixtures, _ := filepath.Glob("testdata/sharding/*.yaml")
	if len(fixtures) == 0 {
		t.Fatal("no fixtures in testdata/sharding")
	}
	paths = append(paths, fixtures...)
	renders := 0
	for _, path := range paths {
		name := filepath.Base(filepath.Dir(path))
		if name == "sharding" {
			name = strings.TrimSuffix(filepath.Base(path), ".yaml")
		}
		t.Run(name, func(t *testing.T) {
			want := parseSeries(t, renderShard(t, path, shard.Shard{}))
			namespaces := scenarioNamespaces(t, path)
			assignments := [][]int{nil} // nil: the FNV-1a hash
			for a := range allAssignments(len(namespaces), testShards) {
				assignments = append(assignments, a)
			}
			for _, a := range assignments {
				name := "fnv1a"
				if a != nil {
					name = fmt.Sprint(a)
				}
				got := map[string]float64{}
				from := map[string]int{}
				for i := 0; i < testShards; i++ {
					sh := shardFor(t, i, a, namespaces)
					for series, v := range parseSeries(t, renderShard(t, path, sh)) {
						if j, dup := from[series]; dup {
							t.Errorf("assignment %s: %s comes from shards %d and %d", name, series, j, i)
							continue
						}
						from[series] = i
						got[series] = v
					}
					renders++
				}
				compareSeries(t, name, got, want)
			}
		})
	}
	t.Logf("%d shard renders", renders)
}

// shardFor returns shard i of testShards; assignment a gives the shard of
// each of the scenario's namespaces, nil means the real hash.
func shardFor(t *testing.T, i int, a []int, namespaces []string) shard.Shard {
	t.Helper()
	var sh shard.Shard
	var err error
	if a == nil {
		sh, err = shard.New(i, testShards)
	} else {
		sh, err = shard.WithAssignment(i, testShards, func(ns string) int {
			if k := slices.Index(namespaces, ns); k >= 0 {
				return a[k]
			}
			return 0 // a namespace named by no object: a label value such as ""
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

func renderShard(t *testing.T, path string, sh shard.Shard) []byte {
	t.Helper()
	cfg, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.shard = sh
	now, _ := time.Parse(time.RFC3339, goldenNow)
	clock := func() time.Time { return now }
	ix, _, err := offline.Build([]string{path}, cfg.trimmer(), cfg.indexConfig(clock, nil))
	if err != nil {
		t.Fatal(err)
	}
	collectors, err := cfg.collectors()
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(engine.NewExporter(ix, clock, false, nil, collectors...).Shard(sh))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// scenarioNamespaces lists the namespaces the scenario's objects live in
// or, for events, are about.
func scenarioNamespaces(t *testing.T, path string) []string {
	t.Helper()
	objs, _, err := objects.LoadFiles([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetNamespace() != "" {
			set[m.GetNamespace()] = true
		}
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// allAssignments yields every map of n namespaces onto shards.
func allAssignments(n, shards int) func(func([]int) bool) {
	return func(yield func([]int) bool) {
		a := make([]int, n)
		for {
			if !yield(slices.Clone(a)) {
				return
			}
			i := 0
			for ; i < n; i++ {
				if a[i]++; a[i] < shards {
					break
				}
				a[i] = 0
			}
			if i == n {
				return
			}
		}
	}
}

// parseSeries reads an exposition into series (name and sorted labels) and
// values.
func parseSeries(t *testing.T, text []byte) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			if m.GetGauge() == nil {
				t.Fatalf("%s: only gauges are expected offline", name)
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

func compareSeries(t *testing.T, assignment string, got, want map[string]float64) {
	t.Helper()
	for s, v := range want {
		g, ok := got[s]
		switch {
		case !ok:
			t.Errorf("assignment %s: %s missing from every shard", assignment, s)
		case g != v:
			t.Errorf("assignment %s: %s = %v over the shards, %v unsharded", assignment, s, g, v)
		}
	}
	for s := range got {
		if _, ok := want[s]; !ok {
			t.Errorf("assignment %s: %s comes from a shard but not from the unsharded exporter", assignment, s)
		}
	}
}
