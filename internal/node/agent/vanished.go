package agent

import (
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// VanishedSliceTTL is how long the agent keeps using the last ResourceSlices
// of a pool that has none any more. The kubelet deletes every ResourceSlice
// of its node when it starts (kubernetes v1.37
// pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, wipeResourceSlices "all
// drivers" at startup) and a running driver publishes them again only after
// its resourceslice controller's sync delay (k8s.io/dynamic-resource-allocation
// resourceslice.DefaultSyncDelay, 30 s; about a minute seen on a real node).
// The devices did not change meanwhile: without the last slices a kubelet
// restart would make every held GPU read unallocated, and a process on it an
// isolation violation.
const VanishedSliceTTL = 10 * time.Minute

// sliceMemory remembers the last slices of each pool (driver and pool name).
type sliceMemory struct {
	mu    sync.Mutex
	pools map[string]rememberedPool
}

type rememberedPool struct {
	slices []*objects.Slice
	seen   time.Time // last time the API had slices of the pool
}

func poolKey(s *objects.Slice) string { return s.Spec.Driver + "/" + s.Spec.Pool.Name }

// withVanished returns the current slices and, for every pool that has none
// now but had some within VanishedSliceTTL, the pool's last slices.
func (m *sliceMemory) withVanished(current []*objects.Slice, now time.Time) []*objects.Slice {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pools == nil {
		m.pools = map[string]rememberedPool{}
	}
	byPool := map[string][]*objects.Slice{}
	for _, s := range current {
		if s != nil {
			byPool[poolKey(s)] = append(byPool[poolKey(s)], s)
		}
	}
	for k, slices := range byPool {
		m.pools[k] = rememberedPool{slices: slices, seen: now}
	}
	var vanished []*objects.Slice
	for k, p := range m.pools {
		if _, ok := byPool[k]; ok {
			continue
		}
		if now.Sub(p.seen) > VanishedSliceTTL {
			delete(m.pools, k)
			continue
		}
		vanished = append(vanished, p.slices...)
	}
	if len(vanished) == 0 {
		return current
	}
	out := make([]*objects.Slice, 0, len(current)+len(vanished))
	return append(append(out, current...), vanished...)
}
