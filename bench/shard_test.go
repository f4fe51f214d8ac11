package bench

import (
	"log/slog"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// BenchmarkShardScrape is BenchmarkScrape for an unsharded exporter and for
// shards 0 and 1 of 3 (--total-shards=3) over the same cluster (50
// namespaces). Each variant trims the objects as its informers would (a
// shard cuts other shards' events to their identity) and reports the heap
// that its informer store and index take (store+index-MiB), and the series
// of its scrape: what sharding divides and what it does not.
func BenchmarkShardScrape(b *testing.B) {
	variants := []struct {
		name  string
		shard shard.Shard
	}{
		{"unsharded", shard.Shard{}},
		{"shard-0-of-3", shard.Shard{Index: 0, Total: 3}},
		{"shard-1-of-3", shard.Shard{Index: 1, Total: 3}},
	}
	for _, size := range sizes {
		b.Run(size.name, func(b *testing.B) {
			f := load(b, size.claims)
			f.ix = nil
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) {
					var g guard
					g.check(b, size.claims)
					base := heapInUse()
					trimmer := objects.Trimmer{}
					if v.shard.Sharded() {
						trimmer.EventNamespaces = v.shard.Owns
						if !v.shard.OwnsCluster() {
							trimmer.ContextPods = func(ns string) bool { return !v.shard.Owns(ns) }
						}
					}
					store := make([]any, len(f.objs))
					for i, o := range f.objs {
						store[i] = trimmer.Trim(o)
					}
					ix := index.New(index.Config{Now: f.now, DevicePluginResources: []string{"nvidia.com/gpu"}, Shard: v.shard})
					for _, o := range store {
						if err := ix.Upsert(o, false); err != nil {
							b.Fatal(err)
						}
					}
					after := heapInUse()
					exp := engine.NewExporter(ix, f.now, true, slog.New(slog.DiscardHandler), clusterCollectors()...).Shard(v.shard)
					var res scrapeResult
					for b.Loop() {
						var err error
						if res, err = scrape(exp); err != nil {
							b.Fatal(err)
						}
					}
					perClaim(b, size.claims)
					b.ReportMetric(mib(after-min(base, after)), "store+index-MiB")
					b.ReportMetric(float64(res.series), "series/scrape")
				})
			}
		})
	}
}
