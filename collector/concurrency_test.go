package collector_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Scrapes read snapshots while informer handlers keep changing the index:
// a snapshot must never see (or race with) a later change. Run with -race
// to catch shared state; without it the runtime still aborts on a map
// written while a scrape iterates it.
func TestScrapeWhileIndexChanges(t *testing.T) {
	// "broken" fails on every full GPU, so every device carries a class
	// error while "flex" flips between failing and not.
	ix := Build(t, index.Config{Now: func() time.Time { return T0 }, DevicePluginResources: []string{GPUResource}},
		GPUClass(), DeviceClass("broken", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"),
		Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1")),
		Node("node-1", 0))
	exp := engine.NewExporter(ix, func() time.Time { return T0 }, true, slog.New(slog.DiscardHandler),
		collector.NewDeviceCollector(collector.DefaultAttributeLabels), collector.NewDeviceClassCollector(),
		collector.NewClaimCollector(), collector.NewBlockedCollector(), collector.NewLeakCollector(time.Minute),
		collector.NewLaneCollector(), collector.NewPodCollector(nil))

	const rounds = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	wg.Add(2)
	go func() {
		defer wg.Done()
		p := WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "t")
		for i := 0; i < rounds; i++ {
			flex := DeviceClass("flex", "device.attributes['gpu.nvidia.com'].type == 'mig'")
			if i%2 == 1 {
				flex = DeviceClass("flex", "device.attributes['gpu.nvidia.com'].parentUUID == 'GPU-x'")
			}
			c := ReservedFor(Allocated(OwnedBy(Claim("llm-0-gpu", "uid-c"), p, "gpu"), "node-1", T0, Result("gpu", "node-1", fmt.Sprintf("gpu-%d", i%2))), p)
			for _, obj := range []any{flex, Slice("node-1", "node-1", int64(1+i%2), GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1")), p, c} {
				if err := ix.Upsert(obj, true); err != nil {
					errs <- err
					return
				}
			}
			if i%3 == 0 {
				if err := ix.Delete(c); err != nil {
					errs <- err
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < rounds/3; i++ {
			if _, err := engine.Render(exp); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
