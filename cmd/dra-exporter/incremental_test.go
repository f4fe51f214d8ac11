package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// TestKeptFamiliesMatchAFreshScrape replays every golden scenario into a
// live index one object at a time, in file order and shuffled, then
// deletes the objects again, and scrapes after every step: the exporter
// that keeps families and rows across scrapes (each collector's, while the
// kinds of objects it reads did not change), over snapshots that keep the
// joins of unchanged kinds, must write exactly what a fresh exporter
// renders from a snapshot built from scratch. A collector that reads a kind
// it does not declare, or a join kept past a change it depends on, shows
// here as a stale family.
func TestKeptFamiliesMatchAFreshScrape(t *testing.T) {
	now, _ := time.Parse(time.RFC3339, goldenNow)
	clock := func() time.Time { return now }
	steps := 0
	for _, dir := range scenarios(t) {
		var cfg config
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		cfg.register(fs)
		objs, _, err := objects.LoadFiles([]string{filepath.Join(dir, "objects.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		trimmer := cfg.trimmer()
		exporter := func(src collector.Source) *collector.Exporter {
			collectors, err := cfg.collectors()
			if err != nil {
				t.Fatal(err)
			}
			return collector.NewExporter(src, clock, false, nil, collectors...)
		}
		for pass, order := range [][]int{rand.New(rand.NewPCG(0, 0)).Perm(len(objs)), identity(len(objs))} {
			ix := index.New(cfg.indexConfig(clock, nil))
			// One kept exporter per format: a scrape in the other format
			// renders everything again.
			kept := map[bool]*collector.Exporter{false: exporter(ix), true: exporter(ix)}
			check := func(what string, obj any) {
				steps++
				for _, om := range []bool{false, true} {
					got, want := join(kept[om].TextFamilies(om)), join(exporter(scratch{ix}).TextFamilies(om))
					if !bytes.Equal(got, want) {
						t.Fatalf("%s pass %d: after %s %s the kept families differ from a fresh scrape (openmetrics %v):\n%s",
							filepath.Base(dir), pass, what, describe(obj), om, firstDiff(got, want))
					}
				}
			}
			for _, i := range order {
				obj := trimmer.Trim(objs[i])
				if err := ix.Upsert(obj, true); err != nil {
					t.Fatal(err)
				}
				check("upserting", obj)
			}
			for j := len(order) - 1; j >= 0; j-- {
				obj := trimmer.Trim(objs[order[j]])
				if err := ix.Delete(obj); err != nil {
					t.Fatal(err)
				}
				check("deleting", obj)
			}
		}
	}
	t.Logf("%d scrapes compared", steps)
}

// scratch hands out snapshots built without the last one's joins.
type scratch struct{ ix *index.Index }

func (s scratch) Snapshot() *index.Snapshot { return s.ix.SnapshotFromScratch() }

func describe(obj any) string {
	if m, ok := obj.(metav1.Object); ok {
		return fmt.Sprintf("%T %s/%s", obj, m.GetNamespace(), m.GetName())
	}
	return fmt.Sprintf("%T", obj)
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func join(families []collector.Family) []byte {
	var out []byte
	for _, f := range families {
		out = f.AppendTo(out)
	}
	return out
}
