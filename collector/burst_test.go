package collector_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// A burst of 10k updates (100 pods and their claims flipping between
// pending and Ready-with-a-reserved-GPU, 50 times each, the slice replaced
// on the way) while /metrics' fast path scrapes: every exposition is
// consistent (each claim in exactly one state, no pod blocked twice), and
// the
// exposition after the burst equals that of an index built from scratch
// from the final objects: nothing kept across scrapes (the selector results)
// goes stale.
func TestBurstBetweenScrapesIsConsistent(t *testing.T) {
	const pods, rounds = 100, 50
	cfg := index.Config{Now: func() time.Time { return T0 }}
	gpus := make([]resourceapi.Device, pods)
	for i := range gpus {
		gpus[i] = GPUDevice(fmt.Sprintf("gpu-%d", i), fmt.Sprintf("GPU-%d", i))
	}
	collectors := func() []engine.Collector {
		return []engine.Collector{collector.NewClaimCollector(), collector.NewBlockedCollector(),
			collector.NewDeviceCollector(collector.DefaultAttributeLabels), collector.NewDeviceClassCollector(),
			collector.NewLaneCollector(), collector.NewPodCollector(nil)}
	}
	state := func(i, round int) []any {
		p := WithTemplateClaim(Pod(fmt.Sprintf("llm-%d", i), fmt.Sprintf("uid-llm-%d", i)), "gpu", "t")
		c := OwnedBy(Claim(fmt.Sprintf("llm-%d-gpu", i), fmt.Sprintf("uid-c-%d", i), Request("gpu", GPUClassName)), p, "gpu")
		p = WithClaimStatus(p, "gpu", c.Name)
		if (i+round)%2 == 0 {
			p = Ready(Running(Bound(p, "node-1")))
			c = ReservedFor(Allocated(c, "node-1", T0, Result("gpu", "node-1", fmt.Sprintf("gpu-%d", i))), p)
		}
		return []any{c, p}
	}
	slice := func(gen int64) *resourceapi.ResourceSlice { return Slice("node-1", "node-1", gen, gpus...) }

	ix := Build(t, cfg, GPUClass(), slice(1), Node("node-1", 0))
	live := engine.NewExporter(ix, cfg.Now, false, nil, collectors()...)
	final := []any{GPUClass(), Node("node-1", 0)}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		updates := 0
		for round := 0; round < rounds; round++ {
			if round%10 == 5 {
				Upsert(t, ix, slice(int64(2+round)), true)
			}
			for i := 0; i < pods; i++ {
				for _, o := range state(i, round) {
					Upsert(t, ix, o, true)
					updates++
				}
			}
		}
		if updates != 2*pods*rounds {
			t.Errorf("%d updates, want %d", updates, 2*pods*rounds)
		}
	}()
	scrapes := 0
	for {
		select {
		case <-done:
		default:
			checkConsistent(t, text(live))
			scrapes++
			continue
		}
		break
	}
	wg.Wait()
	for i := 0; i < pods; i++ {
		final = append(final, state(i, rounds-1)...)
	}
	final = append(final, slice(int64(2+45)))
	after := text(live)
	checkConsistent(t, after)
	fresh := text(engine.NewExporter(Build(t, cfg, final...), cfg.Now, false, nil, collectors()...))
	if !bytes.Equal(after, fresh) {
		t.Errorf("after the burst the exposition differs from a fresh index's:\n%s\n--- fresh ---\n%s", after, fresh)
	}
	t.Logf("%d scrapes during %d updates", scrapes, 2*pods*rounds)
}

func text(x *engine.Exporter) []byte {
	var out []byte
	for _, f := range x.TextFamilies(false) {
		out = f.AppendTo(out)
	}
	return out
}

func checkConsistent(t *testing.T, exposition []byte) {
	t.Helper()
	states := map[string]int{} // claim -> states at 1
	blocked := map[string]int{}
	for line := range bytes.Lines(exposition) {
		s := string(line)
		switch {
		case strings.HasPrefix(s, "dra_claim_status{") && strings.HasSuffix(s, " 1\n"):
			states[label(s, "claim")]++
		case strings.HasPrefix(s, "dra_claim_status{"):
			states[label(s, "claim")] += 0
		case strings.HasPrefix(s, "dra_pod_blocked{") && strings.HasSuffix(s, " 1\n"):
			blocked[label(s, "pod")]++
		}
	}
	for claim, n := range states {
		if n != 1 {
			t.Fatalf("claim %s in %d states at once", claim, n)
		}
	}
	for pod, n := range blocked {
		if n > 1 {
			t.Fatalf("pod %s blocked %d times", pod, n)
		}
	}
}

// label returns a label's value from an exposition line.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}
