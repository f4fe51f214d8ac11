package classify

import (
	"maps"
	"slices"
	"sync"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Verdicts keeps the verdicts of the last Blocked call, so that the next
// one walks the tree again only for the pods whose verdict can have
// changed. A pod's verdict reads three things: the pod itself, its claims
// and the events about it, which are compared record by record (a changed
// object is a new record), and the rest of the cluster (devices, classes,
// nodes, and where the other claims and pods hold devices), which is
// compared by version: any change of a class, slice, taint rule or node, or
// a change of placement (index.KindPlacement) of any claim or pod, walks
// every pod again. A readiness flip, a driver's device status or a new
// event walks only the pods they are about.
//
// The zero value is ready; it is safe for concurrent use. The verdicts are
// the same as Blocked's.
type Verdicts struct {
	mu      sync.Mutex
	version index.Version
	kept    map[index.Key]*keptVerdict
	calls   uint64
	// walks counts the walks of the tree, for tests.
	walks int
}

// world are the kinds every verdict reads: all but a pod's, its claims' and
// its events' own records, which are compared one by one.
const world = index.AllKinds &^ (1<<index.KindClaim | 1<<index.KindPod | 1<<index.KindEvent)

type keptVerdict struct {
	pod    *index.Pod
	claims []index.PodClaim
	events []*index.Event
	v      Verdict
	// call is the last call that saw the pod.
	call uint64
}

// Blocked returns Blocked(s), walking the tree only for the pods whose
// inputs changed since the last call.
func (m *Verdicts) Blocked(s *index.Snapshot) []Verdict {
	kept := m.Kept(s)
	out := make([]Verdict, len(kept))
	for i, v := range kept {
		out[i] = *v
	}
	return out
}

// Kept is Blocked, the verdicts as kept: the same pointer stands for the
// same verdict of the same pod while it holds (a reader may key what it
// derived on it). The verdicts must not be modified.
func (m *Verdicts) Kept(s *index.Snapshot) []*Verdict {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kept == nil || !s.Version().Unchanged(m.version, world) {
		m.kept = map[index.Key]*keptVerdict{}
	}
	// Without a claim change a pod that is the same record resolves to
	// the same claims.
	claimsSame := s.Version().Unchanged(m.version, index.KindsOf(index.KindClaim))
	m.calls++
	seen := 0
	var out []*Verdict
	for _, p := range s.Pods {
		if p.Ready() || p.Terminal() || p.Obj.DeletionTimestamp != nil || !s.Owns(p.Key.Namespace) {
			continue
		}
		seen++
		events := s.PodEventRecords(p)
		k := m.kept[p.Key]
		switch {
		case k != nil && k.pod == p && claimsSame && slices.Equal(k.events, events):
		default:
			claims := s.ResolvePodClaims(p)
			if k != nil && k.pod == p && slices.Equal(k.claims, claims) && slices.Equal(k.events, events) {
				break
			}
			k = &keptVerdict{pod: p, claims: claims, events: events, v: classifyPod(s, p, false)}
			m.kept[p.Key] = k
			m.walks++
		}
		k.call = m.calls
		if k.v.Blocked {
			out = append(out, &k.v)
		}
	}
	if len(m.kept) > seen {
		maps.DeleteFunc(m.kept, func(_ index.Key, k *keptVerdict) bool { return k.call != m.calls })
	}
	m.version = s.Version()
	return out
}
