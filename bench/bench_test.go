package bench

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// sizes are the cluster sizes, in claims. Select one with
// -bench 'Scrape/10k$'.
var sizes = []struct {
	name   string
	claims int
}{
	{"1k", 1_000},
	{"10k", 10_000},
	{"100k", 100_000},
}

var budget = flag.Duration("budget", 30*time.Second,
	"skip a size when the previous size of the same benchmark, scaled linearly, predicts more than this per op (0: run every size)")

// guard skips the sizes a benchmark cannot finish in reasonable time. Its
// prediction scales the previous size's time per op linearly, a lower bound
// for the code measured here, so it never skips a size that would be fast;
// a size selected alone with -bench always runs.
type guard struct {
	ns     float64 // per op, previous size
	claims int
}

func (g *guard) check(b *testing.B, claims int) {
	b.Helper()
	if *budget <= 0 || g.claims == 0 {
		return
	}
	predicted := time.Duration(g.ns * float64(claims) / float64(g.claims))
	if predicted > *budget {
		// go test prints a benchmark's skip message only with -v; this
		// line shows in every run (benchstat ignores it).
		fmt.Printf("--- SKIP: %s: %d claims took %s per op, so %d claims would take at least %s per op (over -budget %s; -budget 0 runs it)\n",
			b.Name(), g.claims, time.Duration(g.ns).Round(time.Millisecond), claims, predicted.Round(time.Second), *budget)
		b.SkipNow()
	}
}

func (g *guard) record(b *testing.B, claims int) {
	g.ns, g.claims = float64(b.Elapsed().Nanoseconds())/float64(b.N), claims
}

// unreservedGrace is the serve command's default --claim.unreserved-grace-period.
const unreservedGrace = 5 * time.Minute

// clusterCollectors is the serve command's list with its default flags.
func clusterCollectors() []engine.Collector {
	return collector.ClusterCollectors(collector.Config{
		AttributeLabels: collector.DefaultAttributeLabels,
		UnreservedGrace: unreservedGrace,
	})
}

// fixture is one generated cluster: its objects trimmed as the informers
// trim them, and (once built) the index over them.
type fixture struct {
	claims  int
	cluster *Cluster // counts only; the object slices are dropped
	objs    []any
	ix      *index.Index
	// podKeys maps claim i to its pod (the key is set even where the
	// outcome leaves the pod out).
	podKeys []index.Key
}

// current holds the fixture of one size at a time, so that a 100k cluster
// does not stay on the heap while other sizes run (the heap figures would
// include it).
var current *fixture

func load(tb testing.TB, claims int) *fixture {
	tb.Helper()
	if current != nil && current.claims == claims {
		return current
	}
	current = nil
	runtime.GC()
	start := time.Now()
	c := Generate(claims)
	objs := c.Objects()
	var trimmer objects.Trimmer // the default flags keep no pod labels
	for i, o := range objs {
		objs[i] = trimmer.Trim(o)
	}
	podKeys := make([]index.Key, claims)
	for i, rc := range c.Claims {
		podKeys[i] = index.Key{Namespace: rc.Namespace, Name: rc.OwnerReferences[0].Name}
	}
	// Keep the counts; let the untrimmed objects go.
	counts := *c
	counts.Classes, counts.Nodes, counts.Slices, counts.Claims, counts.Pods, counts.Events, counts.SchedulerEvents = nil, nil, nil, nil, nil, nil, nil
	current = &fixture{claims: claims, cluster: &counts, objs: objs, podKeys: podKeys}
	tb.Logf("generated %d claims: %d objects in %s", claims, len(objs), time.Since(start).Round(time.Millisecond))
	return current
}

func (f *fixture) now() time.Time { return f.cluster.Now }

// build upserts every object into a fresh index, as the informers' initial
// list does (not live: no latency is observed for past transitions).
func (f *fixture) build(tb testing.TB) *index.Index {
	ix := index.New(index.Config{
		Now:                   f.now,
		Observer:              collector.NewLatency(),
		DevicePluginResources: []string{"nvidia.com/gpu"},
	})
	for _, o := range f.objs {
		if err := ix.Upsert(o, false); err != nil {
			tb.Fatal(err)
		}
	}
	return ix
}

func (f *fixture) index(tb testing.TB) *index.Index {
	if f.ix == nil {
		f.ix = f.build(tb)
	}
	return f.ix
}

// heapInUse returns the bytes of heap spans in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// perClaim reports the average time of one iteration divided by the
// cluster size.
func perClaim(b *testing.B, claims int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(claims), "ns/claim")
}

// BenchmarkIndexBuild upserts every trimmed object into a fresh index. It
// reports the heap in use afterwards (trimmed objects, which the informer
// caches hold in production, plus the index) and the index's share of it.
func BenchmarkIndexBuild(b *testing.B) {
	var g guard
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			g.check(b, size.claims)
			f := load(b, size.claims)
			f.ix = nil
			base := heapInUse()
			var ix *index.Index
			for b.Loop() {
				ix = f.build(b)
			}
			perClaim(b, size.claims)
			g.record(b, size.claims)
			f.ix = ix
			after := heapInUse()
			b.ReportMetric(mib(after), "heap-MiB")
			b.ReportMetric(mib(after-min(base, after)), "index-MiB")
		})
	}
}

// BenchmarkSnapshot takes one snapshot of a built index from scratch (copy
// under the lock, then every join), as after a change of every kind; a
// scrape after a change of a few kinds rebuilds only their joins.
func BenchmarkSnapshot(b *testing.B) {
	var g guard
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			g.check(b, size.claims)
			f := load(b, size.claims)
			ix := f.index(b)
			for b.Loop() {
				_ = ix.SnapshotFromScratch()
			}
			perClaim(b, size.claims)
			g.record(b, size.claims)
		})
	}
}

// BenchmarkClassify runs the decision tree over every pod of a fresh
// snapshot (classify.Blocked); the snapshot is taken outside the timer, so
// that its per-snapshot selector memo starts cold as in a scrape.
func BenchmarkClassify(b *testing.B) {
	var g guard
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			g.check(b, size.claims)
			f := load(b, size.claims)
			ix := f.index(b)
			var blocked []classify.Verdict
			for b.Loop() {
				b.StopTimer()
				if err := ix.Upsert(f.objs[len(f.objs)-1], true); err != nil {
					b.Fatal(err)
				}
				s := ix.Snapshot() // a new one: the index changed
				b.StartTimer()
				blocked = classify.Blocked(s)
			}
			perClaim(b, size.claims)
			g.record(b, size.claims)
			b.ReportMetric(float64(len(blocked)), "blocked-pods")
		})
	}
}

// BenchmarkScrape is one full scrape as the serve command answers it: the
// Exporter (one snapshot, every cluster collector, timed) gathered by a
// registry and encoded as text. It reports the series and bytes of the
// exposition, and each collector's own duration from
// dra_exporter_scrape_collector_duration_seconds (ms-<collector>).
//
// The index hands out the same snapshot while nothing changed, and the
// exporter writes an unchanged cluster's families from the last scrape's
// text: BenchmarkScrape measures that steady state (only the timing series
// are rendered each time).
func BenchmarkScrape(b *testing.B) { benchmarkScrape(b, clusterCollectors(), nil) }

// BenchmarkScrapeAfterChange changes one object before every scrape
// (changeOf: claim, pod, event, pod-ready, claim-status), as an informer
// update does: the index takes a new snapshot and the
// collectors that read that kind render again; the others write their
// families from the last scrape.
func BenchmarkScrapeAfterChange(b *testing.B) {
	benchmarkScrape(b, clusterCollectors(), []string{"claim", "pod", "event", "pod-ready", "claim-status"})
}

// BenchmarkScrapeExceptBlocked is BenchmarkScrapeAfterChange/claim without
// the blocked collector (the decision tree), so that the rest of a scrape
// can be measured at sizes where classification is too slow to run.
func BenchmarkScrapeExceptBlocked(b *testing.B) {
	var cs []engine.Collector
	for _, c := range clusterCollectors() {
		if c.Name() != "blocked" {
			cs = append(cs, c)
		}
	}
	benchmarkScrape(b, cs, []string{"claim"})
}

// changeOf returns the last object of the kind the generator made and a
// changed copy of it: for claim, pod and event one generation on (a change
// of placement for claims and pods, index.KindPlacement); for pod-ready
// the last Ready pod's readiness flipped, for claim-status the last
// allocated claim's device status written by its driver (the most frequent
// writes of a running cluster, which change no placement).
func changeOf(b *testing.B, objs []any, kind string) (obj, changed any) {
	for i := len(objs) - 1; i >= 0 && obj == nil; i-- {
		switch o := objs[i].(type) {
		case *resourceapi.ResourceClaim:
			switch {
			case kind == "claim":
				obj = o
			case kind == "claim-status" && o.Status.Allocation != nil:
				c := o.DeepCopy()
				for _, r := range c.Status.Allocation.Devices.Results {
					c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
						Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.NewTime(time.Unix(1e9, 0))}}})
				}
				obj, changed = o, c
			}
		case *corev1.Pod:
			switch {
			case kind == "pod":
				obj = o
			case kind == "pod-ready" && podReady(o):
				p := o.DeepCopy()
				for j, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
						p.Status.Conditions[j].Status = corev1.ConditionFalse
					}
				}
				obj, changed = o, p
			}
		case *corev1.Event:
			if kind == "event" {
				obj = o
			}
		}
	}
	if obj == nil {
		b.Fatalf("no %s in the cluster", kind)
	}
	if changed == nil {
		next := obj.(kruntime.Object).DeepCopyObject()
		m := next.(metav1.Object)
		m.SetGeneration(m.GetGeneration() + 1)
		changed = next
	}
	return obj, changed
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// benchmarkScrape scrapes each size: with no kinds, an unchanged index;
// with kinds, one sub-benchmark per kind that re-applies its object
// before each scrape. The size guard follows the first kind.
func benchmarkScrape(b *testing.B, collectors []engine.Collector, kinds []string) {
	var g guard
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			g.check(b, size.claims)
			f := load(b, size.claims)
			if len(kinds) == 0 {
				scrapeLoop(b, f, collectors, [2]any{})
				g.record(b, size.claims)
				return
			}
			for i, kind := range kinds {
				obj, changed := changeOf(b, f.objs, kind)
				b.Run(kind, func(b *testing.B) {
					scrapeLoop(b, f, collectors, [2]any{changed, obj})
					if i == 0 {
						g.record(b, size.claims)
					}
				})
			}
		})
	}
}

// scrapeLoop times scrapes of the fixture's index; the versions of the
// changed object, when set, take turns before each (a change of content:
// the index leaves out a write that changes nothing it holds).
func scrapeLoop(b *testing.B, f *fixture, collectors []engine.Collector, versions [2]any) {
	ix := f.index(b)
	exp := engine.NewExporter(ix, f.now, true, slog.New(slog.DiscardHandler), collectors...)
	var res scrapeResult
	collectorSeconds := map[string]float64{}
	// The first scrape renders everything, outside the timer: what the
	// loop measures is the steady state, or what a change costs on top.
	if _, err := scrape(exp); err != nil {
		b.Fatal(err)
	}
	k := 0
	for b.Loop() {
		if versions[0] != nil {
			if err := ix.Upsert(versions[k%2], true); err != nil {
				b.Fatal(err)
			}
			k++
		}
		var err error
		res, err = scrape(exp)
		if err != nil {
			b.Fatal(err)
		}
		for name, s := range res.collectorSeconds {
			collectorSeconds[name] += s
		}
	}
	perClaim(b, f.claims)
	b.ReportMetric(float64(res.series), "series/scrape")
	b.ReportMetric(float64(res.bytes), "exposition-B")
	for name, s := range collectorSeconds {
		b.ReportMetric(s*1000/float64(b.N), "ms-"+name)
	}
}

// BenchmarkScrapeFormats is one scrape in each format /metrics serves from
// the kept families, and in protobuf as it was served before (gather:
// client_golang's Gather over every collector, then expfmt's delimited
// encoder, which a Prometheus with native histograms on asked for first):
// over an unchanged index, and after one claim's change (claim/...). All
// of one size run in one process, so that their ratios compare like with
// like. The index is built once per size; each sub-benchmark has its own
// exporter, whose first scrape (outside the timer) renders everything.
func BenchmarkScrapeFormats(b *testing.B) {
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			f := load(b, size.claims)
			ix := f.index(b)
			obj, changed := changeOf(b, f.objs, "claim")
			for _, change := range []bool{false, true} {
				for _, format := range []string{"text", "protobuf", "protobuf-gather"} {
					name := format
					if change {
						name = "claim/" + format
					}
					b.Run(name, func(b *testing.B) {
						exp := engine.NewExporter(ix, f.now, true, slog.New(slog.DiscardHandler), clusterCollectors()...)
						write := scrapeFormat(b, exp, format)
						write()
						versions := [2]any{changed, obj}
						k := 0
						for b.Loop() {
							if change {
								if err := ix.Upsert(versions[k%2], true); err != nil {
									b.Fatal(err)
								}
								k++
							}
							write()
						}
						perClaim(b, f.claims)
						b.ReportMetric(float64(formatBuf.Len()), "exposition-B")
					})
				}
			}
		})
	}
}

// formatBuf holds the last scrape of BenchmarkScrapeFormats, kept across
// scrapes as the handler's buffered writer is.
var formatBuf bytes.Buffer

// scrapeFormat returns a function that writes one scrape of exp in the
// format into formatBuf.
func scrapeFormat(b *testing.B, exp *engine.Exporter, format string) func() {
	switch format {
	case "text":
		return func() {
			formatBuf.Reset()
			for _, f := range exp.TextFamilies(false) {
				if _, err := f.WriteTo(&formatBuf); err != nil {
					b.Fatal(err)
				}
			}
		}
	case "protobuf":
		return func() {
			formatBuf.Reset()
			for _, f := range exp.TextFamilies(false) {
				if _, err := f.WriteProtoTo(&formatBuf); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exp)
	return func() {
		formatBuf.Reset()
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(&formatBuf, expfmt.NewFormat(expfmt.TypeProtoDelim))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkClassifyPod walks the decision tree for one pod of each intended
// outcome (classify.Pod), to show what one pod costs by the branch it takes.
// The snapshot is shared by the iterations (its selector memo is warm after
// the first).
func BenchmarkClassifyPod(b *testing.B) {
	outcomes := []Outcome{Running, NotReady, PrepareFailed, CapacityExhausted, SelectorMatchesNothing, Unallocated}
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			f := load(b, size.claims)
			s := f.index(b).Snapshot()
			for _, o := range outcomes {
				p := s.Pod(podOf(f, o))
				if p == nil {
					b.Fatalf("no pod with outcome %s", o)
				}
				b.Run(o.String(), func(b *testing.B) {
					var v classify.Verdict
					for b.Loop() {
						v = classify.Pod(s, p)
					}
					if o != Running && !v.Blocked {
						b.Fatalf("pod %s (%s) is not blocked", p.Key, o)
					}
				})
			}
		})
	}
}

// podOf returns the key of the pod of the last claim with the outcome.
func podOf(f *fixture, o Outcome) index.Key {
	for i := f.claims - 1; i >= 0; i-- {
		if OutcomeOf(i, f.claims) == o {
			return f.podKeys[i]
		}
	}
	return index.Key{}
}

type scrapeResult struct {
	series           int
	bytes            int
	collectorSeconds map[string]float64
	// families counts the series of each family.
	families map[string]int
}

var scrapeBuf []byte

// scrape renders the exporter's families as /metrics does (the fast text
// path, engine.Exporter.TextFamilies) and counts them. It fails when a
// collector reports failure, so that a benchmark never measures a scrape
// that lost a collector.
func scrape(x *engine.Exporter) (scrapeResult, error) {
	res := scrapeResult{collectorSeconds: map[string]float64{}, families: map[string]int{}}
	for _, f := range x.TextFamilies(false) {
		// Written out, as the handler writes it (into a buffer kept
		// across scrapes).
		scrapeBuf = f.AppendTo(scrapeBuf[:0])
		res.bytes += len(scrapeBuf)
		for line := range bytes.Lines(scrapeBuf) {
			if line[0] == '#' {
				continue
			}
			res.series++
			res.families[f.Name]++
			if f.Name != "dra_exporter_scrape_collector_duration_seconds" && f.Name != "dra_exporter_scrape_collector_success" {
				continue
			}
			labels, value, _ := strings.Cut(strings.TrimSpace(string(line)), "} ")
			_, name, _ := strings.Cut(labels, `collector="`)
			name = strings.TrimSuffix(name, `"`)
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return scrapeResult{}, fmt.Errorf("%s: %w", line, err)
			}
			if f.Name == "dra_exporter_scrape_collector_duration_seconds" {
				res.collectorSeconds[name] += v
			} else if v != 1 {
				return scrapeResult{}, fmt.Errorf("collector %s failed", name)
			}
		}
	}
	return res, nil
}
