package index

import (
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
)

// matchCache keeps the result of request selectors on a device across
// snapshots. Devices are immutable records (a changed slice or class
// membership replaces the record), so a result keyed by the record and the
// selectors' expressions holds until the record goes: a scrape then
// evaluates CEL only for new devices and new selectors, not for every pod
// blocked on every device each time. Entries of records no snapshot holds
// any more are dropped when a snapshot is taken.
type matchCache struct {
	mu sync.Mutex
	m  map[*Device]map[string]matchResult
}

type matchResult struct {
	ok  bool
	err error
}

func newMatchCache() *matchCache { return &matchCache{m: map[*Device]map[string]matchResult{}} }

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

// match evaluates the selectors on the device, or returns the kept result.
func (c *matchCache) match(m *celmatch.Matcher, key string, selectors []resourceapi.DeviceSelector, d *Device) (bool, error) {
	c.mu.Lock()
	r, ok := c.m[d][key]
	c.mu.Unlock()
	if ok {
		return r.ok, r.err
	}
	r.ok, r.err = m.Match(selectors, celmatch.Device{Driver: d.Key.Driver, Attributes: d.Attributes, Capacity: d.Capacity})
	c.mu.Lock()
	byKey := c.m[d]
	if byKey == nil {
		byKey = map[string]matchResult{}
		c.m[d] = byKey
	}
	byKey[key] = r
	c.mu.Unlock()
	return r.ok, r.err
}

// retain drops the entries of devices not in current.
func (c *matchCache) retain(current []*Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) <= len(current) {
		// Stale entries, if any, are fewer than the devices: bounded.
		return
	}
	keep := make(map[*Device]map[string]matchResult, len(current))
	for _, d := range current {
		if r, ok := c.m[d]; ok {
			keep[d] = r
		}
	}
	c.m = keep
}
