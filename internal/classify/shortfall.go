package classify

// Why a device that is not held outright is still not free: its pool is
// incomplete or invalid, sibling partitions drew its shared counters, or
// the claims sharing it left too little capacity.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// shortfalls explains, for the first three matching devices a new
// allocation cannot have for a reason other than a plain holder (which
// holders names), what falls short.
func shortfalls(alloc *allocator.Model, devices []*index.Device, dm allocator.Demand) []string {
	s := alloc.Snapshot()
	var out []string
	seenPool := map[index.PoolKey]bool{}
	devices = slices.Clone(devices)
	slices.SortFunc(devices, func(a, b *index.Device) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	for _, d := range devices {
		if len(out) == 3 {
			out = append(out, "...")
			break
		}
		if p := s.PoolProblem(d.Key); p != "" {
			pk := index.PoolKey{Driver: d.Key.Driver, Pool: d.Key.Pool}
			if !seenPool[pk] {
				seenPool[pk] = true
				out = append(out, fmt.Sprintf("pool %s/%s is %s: the scheduler allocates none of its devices", pk.Driver, pk.Pool, p))
			}
			continue
		}
		held := s.AllocatedTo(d.Key)
		if len(held) > 0 && d.Shareable {
			if why := alloc.CapacityShortfall(d, dm); why != "" {
				out = append(out, fmt.Sprintf("%s is shared by %d claims: %s", d.Key, len(distinctClaims(held)), why))
			}
			continue
		}
		if len(held) > 0 {
			continue
		}
		if why := alloc.CounterShortfall(d); why != "" {
			out = append(out, fmt.Sprintf("%s shares counters with allocated partitions %s: %s", d.Key, siblingHolders(alloc, d), why))
		}
	}
	return out
}

// siblingHolders names the allocated partitions drawing on the device's
// counters and their claims (the first three).
func siblingHolders(alloc *allocator.Model, d *index.Device) string {
	s := alloc.Snapshot()
	var names []string
	for _, k := range alloc.CounterSiblings(d) {
		var claims []string
		for _, c := range distinctClaims(s.AllocatedTo(k)) {
			claims = append(claims, c.Key.String())
		}
		names = append(names, fmt.Sprintf("%s (claim %s)", k.Device, strings.Join(claims, ", ")))
	}
	return summarize(names, "partitions")
}

// capacityRequests writes a request's capacity.requests as name=value.
func capacityRequests(c *resourceapi.CapacityRequirements) string {
	if c == nil {
		return "none"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(c.Requests)) {
		q := c.Requests[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ", ")
}
