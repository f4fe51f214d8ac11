package classify

import (
	"slices"
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// leakMemo is the memo's leaks, kept per claim. A claim's leaks read the
// claim, the pods it names (leakReads) and the devices and taints of its
// allocation. So when the snapshot after the one last answered for changed
// only claims and pods (a change of placement included), the memo asks
// again only for the claims that changed and the claims naming a pod that
// changed (the index's change sets, Snapshot.Changed), where Leaks asks
// every claim. Any other change (a slice, class, taint rule or node), a
// snapshot that cannot tell its changes, another grace period, or the
// clock passing the earliest time a kept answer holds to, asks every claim.
type leakMemo struct {
	mu      sync.Mutex
	valid   bool
	version index.Version
	grace   time.Duration
	// until is the earliest of the kept claims' times (zero: none).
	until time.Time
	// claims holds the answer of every claim with a leak or a time it
	// changes at; readers, for each pod key, the claims that name it.
	claims  map[index.Key]claimAnswer
	readers map[index.Key][]index.Key
	out     []Leak
	// asked counts the claims asked, for tests.
	asked int
}

// claimAnswer is one claim's leaks and the time they stop holding with the
// clock (zero: until the claim or what it reads changes).
type claimAnswer struct {
	leaks []Leak
	until time.Time
}

// get returns Leaks(s, now, grace) and LeaksChangeAt(s, now, grace).
func (m *leakMemo) get(s *index.Snapshot, now time.Time, grace time.Duration) ([]Leak, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := s.Version()
	held := m.valid && m.grace == grace && (m.until.IsZero() || !now.After(m.until))
	switch {
	case held && v.Unchanged(m.version, world):
		m.version = v // the answer holds for v too: its changes are since v
		return m.out, m.until
	case held && v.Unchanged(m.version, world&^index.KindsOf(index.KindPlacement)):
		if claims, pods, ok := s.Changed(m.version); ok {
			m.patch(s, claims, pods, now)
			break
		}
		fallthrough
	default:
		m.compute(s, now, grace)
	}
	m.valid, m.version, m.grace = true, v, grace
	m.out, m.until = nil, time.Time{}
	for _, a := range m.claims {
		m.out = append(m.out, a.leaks...)
		m.until = earlier(m.until, a.until)
	}
	return m.out, m.until
}

// compute asks every claim of s.
func (m *leakMemo) compute(s *index.Snapshot, now time.Time, grace time.Duration) {
	m.claims = map[index.Key]claimAnswer{}
	m.readers = make(map[index.Key][]index.Key, len(s.Claims))
	for _, c := range s.Claims {
		if s.Owns(c.Key.Namespace) {
			m.ask(s, c, now, grace)
			m.read(c, true)
		}
	}
}

// patch asks again the claims changed since the last answer (claims: the
// records it held, nil for new ones) and those naming a changed pod.
func (m *leakMemo) patch(s *index.Snapshot, claims map[index.Key]*index.Claim, pods map[index.Key]*index.Pod, now time.Time) {
	dirty := make(map[index.Key]struct{}, len(claims))
	for k, old := range claims {
		if old != nil && s.Owns(k.Namespace) {
			m.read(old, false)
		}
		if c := s.Claim(k); c != nil && s.Owns(k.Namespace) {
			m.read(c, true)
		}
		dirty[k] = struct{}{}
	}
	for k := range pods {
		for _, ck := range m.readers[k] {
			dirty[ck] = struct{}{}
		}
	}
	for k := range dirty {
		delete(m.claims, k)
		if c := s.Claim(k); c != nil && s.Owns(k.Namespace) {
			m.ask(s, c, now, m.grace)
		}
	}
}

// ask keeps claim c's answer, when it has a leak or a time.
func (m *leakMemo) ask(s *index.Snapshot, c *index.Claim, now time.Time, grace time.Duration) {
	m.asked++
	a := claimAnswer{claimLeaks(s, c, now, grace), claimLeaksChangeAt(s, c, now, grace)}
	if len(a.leaks) > 0 || !a.until.IsZero() {
		m.claims[c.Key] = a
	}
}

// read records (add) or forgets that claim c names the pods it names.
func (m *leakMemo) read(c *index.Claim, add bool) {
	for _, pk := range leakReads(c) {
		rs := m.readers[pk]
		if add {
			if !slices.Contains(rs, c.Key) {
				m.readers[pk] = append(rs, c.Key)
			}
			continue
		}
		if rs = slices.DeleteFunc(rs, func(k index.Key) bool { return k == c.Key }); len(rs) == 0 {
			delete(m.readers, pk)
		} else {
			m.readers[pk] = rs
		}
	}
}
