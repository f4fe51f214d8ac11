package allocator

import (
	"maps"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// matchCache keeps the result of request selectors on a device across
// snapshots. Devices are immutable records (a changed slice or class
// membership replaces the record), so a result keyed by the selectors'
// expressions and the record holds until the record goes: a scrape then
// evaluates CEL only for new devices and new selectors, not for every pod
// blocked on every device each time. Results are grouped by selectors, so
// that a pass over a class's devices hashes the expressions once. Entries
// of records no snapshot holds any more are dropped when the model of a
// snapshot with other devices is built.
type matchCache struct {
	mu sync.Mutex
	m  map[string]*selectorMatches
}

// selectorMatches are one set of selectors' results, by device.
type selectorMatches struct {
	mu sync.Mutex
	m  map[*index.Device]matchResult
}

type matchResult struct {
	ok  bool
	err error
}

func newMatchCache() *matchCache { return &matchCache{m: map[string]*selectorMatches{}} }

// selectorsKey joins the selectors' expressions; "" for none.
func selectorsKey(selectors []resourceapi.DeviceSelector) string {
	var b strings.Builder
	for i, sel := range selectors {
		if i > 0 {
			b.WriteByte(0)
		}
		if sel.CEL != nil {
			b.WriteString(sel.CEL.Expression)
		}
	}
	return b.String()
}

// of returns the results kept for the selectors with this key.
func (c *matchCache) of(key string) *selectorMatches {
	c.mu.Lock()
	defer c.mu.Unlock()
	sm := c.m[key]
	if sm == nil {
		sm = &selectorMatches{m: map[*index.Device]matchResult{}}
		c.m[key] = sm
	}
	return sm
}

// match evaluates the selectors on the device, or returns the kept result.
func (sm *selectorMatches) match(m *celmatch.Matcher, selectors []resourceapi.DeviceSelector, d *index.Device) (bool, error) {
	sm.mu.Lock()
	r, ok := sm.m[d]
	sm.mu.Unlock()
	if ok {
		return r.ok, r.err
	}
	r.ok, r.err = m.Match(selectors, celmatch.Device{Driver: d.Key.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
	sm.mu.Lock()
	sm.m[d] = r
	sm.mu.Unlock()
	return r.ok, r.err
}

// retain drops the entries of devices not in current.
func (c *matchCache) retain(current []*index.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live map[*index.Device]bool
	for _, sm := range c.m {
		sm.mu.Lock()
		if len(sm.m) > len(current) {
			// Stale entries, if any, are fewer than the devices
			// otherwise: bounded.
			if live == nil {
				live = make(map[*index.Device]bool, len(current))
				for _, d := range current {
					live[d] = true
				}
			}
			maps.DeleteFunc(sm.m, func(d *index.Device, _ matchResult) bool { return !live[d] })
		}
		sm.mu.Unlock()
	}
}
