package classify

import (
	"maps"
	"slices"
	"sync"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Memo is the one memo of the verdict families: it keeps, between calls,
// what they read of the snapshot, so that the next call evaluates again
// only what changed. The snapshot-wide answers (leaks, double allocations,
// capacity per class and per lane) are kept while the world (below) is the
// same (memoworld.go). Per pod it keeps its verdict (Blocked) and its gate
// (APIGate, or NegativeControl for a control), evaluated again only for
// the pods whose inputs changed. One entry per pod holds both. Both read the pod itself
// and the events about it, compared record by record (a changed object is a
// new record): a readiness flip or a new event evaluates the one pod again,
// its verdict and its gate. The rest they read differently, so each keeps
// its own rule:
//
//   - a verdict reads the pod's claims, record by record, and the rest of
//     the cluster (devices, classes, nodes, and where the other claims and
//     pods hold devices), by version: any change of a class, slice, taint
//     rule or node, or a change of placement (index.KindPlacement) of any
//     claim or pod, walks every pod again;
//   - a gate reads its pod's verdict, where its claims are allocated and
//     whom they are reserved for, and the devices (the nodes of its
//     allocation), by version: a change of placement checks every pod's
//     claims (a map lookup each) and evaluates those whose claims changed;
//     a driver's device status changes nothing here.
//
// The zero value is ready, with no negative controls; it is safe for
// concurrent use. The verdicts and gates are the same as Blocked's,
// APIGate's and NegativeControl's.
type Memo struct {
	isControl func(*index.Pod) bool

	mu   sync.Mutex
	pods map[index.Key]*podMemo
	// The snapshot version each part was last brought to, and its calls.
	verdictVersion index.Version
	verdictsValid  bool
	verdictCalls   uint64
	gateVersion    index.Version
	gatesValid     bool
	gateCalls      uint64
	// The entries with a verdict, with a gate: when a call saw fewer, some
	// are stale (forget).
	nVerdicts, nGates int
	// walks counts the walks of the tree, for tests.
	walks int

	// last is the last verdict pass's answer and the snapshot version it
	// answers for: the blocked collector and the gates both read the
	// verdicts of a scrape's snapshot, and the second takes them from here,
	// without a pass or a wait for the gate pass (lastMu, not mu).
	lastMu      sync.Mutex
	last        []*Verdict
	lastVersion index.Version

	// The snapshot-wide answers (memoworld.go).
	leaks                       wide[[]Leak]
	conflicts                   wide[[]Conflict]
	classCapacity, laneCapacity wide[[]index.Capacity]
}

// NewMemo returns a memo whose negative controls are the pods isControl
// marks (nil: none).
func NewMemo(isControl func(*index.Pod) bool) *Memo {
	return &Memo{isControl: isControl}
}

// podMemo is one pod's entry: the records both parts read, and each part.
type podMemo struct {
	pod    *index.Pod
	events []*index.Event

	// verdict is nil until evaluated for this pod record.
	verdict       *Verdict
	verdictClaims []index.PodClaim
	verdictCall   uint64

	// gate is nil until evaluated for this pod record.
	gate        *PodGate
	gateClaims  []index.PodClaim
	gateVerdict verdictKey
	gateCall    uint64
}

// PodGate is a DRA pod's gate: its api gate, or its negative control.
type PodGate struct {
	Pod     *index.Pod
	API     GateResult
	Control *ControlResult
}

// world are the kinds every verdict and every snapshot-wide answer reads:
// all but a pod's, its claims' and its events' own records (a verdict
// compares its pod's one by one; the snapshot-wide answers read of them
// only their placement, index.KindPlacement).
const world = index.AllKinds &^ (1<<index.KindClaim | 1<<index.KindPod | 1<<index.KindEvent)

// gateWorld are the kinds a gate reads beyond its pod's own records.
const gateWorld = index.DeviceKinds

// entry returns the pod's entry, a new one when the pod or the events
// about it are not the records the entry holds.
func (m *Memo) entry(p *index.Pod, events []*index.Event) *podMemo {
	if m.pods == nil {
		m.pods = map[index.Key]*podMemo{}
	}
	e := m.pods[p.Key]
	if e == nil || e.pod != p || !slices.Equal(e.events, events) {
		if e != nil {
			m.drop(e, true, true)
		}
		e = &podMemo{pod: p, events: events}
		m.pods[p.Key] = e
	}
	return e
}

// drop clears an entry's verdict, its gate, or both, keeping the counts.
func (m *Memo) drop(e *podMemo, verdict, gate bool) {
	if verdict && e.verdict != nil {
		e.verdict, e.verdictClaims = nil, nil
		m.nVerdicts--
	}
	if gate && e.gate != nil {
		e.gate, e.gateClaims = nil, nil
		m.nGates--
	}
}

// forget drops the verdicts (or gates) of the pods the last call did not
// see, when it saw fewer than there are, and the entries left with
// neither.
func (m *Memo) forget(verdicts bool, seen int) {
	if verdicts && m.nVerdicts <= seen || !verdicts && m.nGates <= seen {
		return
	}
	maps.DeleteFunc(m.pods, func(_ index.Key, e *podMemo) bool {
		if verdicts && e.verdictCall != m.verdictCalls || !verdicts && e.gateCall != m.gateCalls {
			m.drop(e, verdicts, !verdicts)
		}
		return e.verdict == nil && e.gate == nil
	})
}

// reset drops every verdict (or gate), and the entries left with neither.
func (m *Memo) reset(verdicts bool) {
	maps.DeleteFunc(m.pods, func(_ index.Key, e *podMemo) bool {
		m.drop(e, verdicts, !verdicts)
		return e.verdict == nil && e.gate == nil
	})
}

// Blocked returns Blocked(s), walking the tree only for the pods whose
// inputs changed since the last call.
func (m *Memo) Blocked(s *index.Snapshot) []Verdict {
	kept := m.Kept(s)
	out := make([]Verdict, len(kept))
	for i, v := range kept {
		out[i] = *v
	}
	return out
}

// Kept is Blocked, the verdicts as kept: the same pointer stands for the
// same verdict of the same pod while it holds (a reader may key what it
// derived on it). Neither the slice nor the verdicts may be modified.
func (m *Memo) Kept(s *index.Snapshot) []*Verdict {
	v := s.Version()
	m.lastMu.Lock()
	if v.Unchanged(m.lastVersion, index.AllKinds) {
		out := m.last
		m.lastMu.Unlock()
		return out
	}
	m.lastMu.Unlock()
	m.mu.Lock()
	out := m.verdicts(s)
	m.mu.Unlock()
	m.lastMu.Lock()
	m.last, m.lastVersion = out, v
	m.lastMu.Unlock()
	return out
}

func (m *Memo) verdicts(s *index.Snapshot) []*Verdict {
	if !m.verdictsValid || !s.Version().Unchanged(m.verdictVersion, world) {
		m.reset(true)
	}
	// Without a claim change a pod that is the same record resolves to
	// the same claims.
	claimsSame := m.verdictsValid && s.Version().Unchanged(m.verdictVersion, index.KindsOf(index.KindClaim))
	m.verdictCalls++
	seen := 0
	var out []*Verdict
	for _, p := range s.Pods {
		if p.Ready() || p.Terminal() || p.Obj.DeletionTimestamp != nil || !s.Owns(p.Key.Namespace) {
			continue
		}
		seen++
		e := m.entry(p, s.PodEventRecords(p))
		if e.verdict == nil || !claimsSame {
			claims := s.ResolvePodClaims(p)
			if e.verdict == nil || !slices.Equal(e.verdictClaims, claims) {
				m.drop(e, true, false)
				v := classifyPod(s, p, false)
				e.verdict, e.verdictClaims = &v, claims
				m.nVerdicts++
				m.walks++
			}
		}
		e.verdictCall = m.verdictCalls
		if e.verdict.Blocked {
			out = append(out, e.verdict)
		}
	}
	m.verdictVersion, m.verdictsValid = s.Version(), true
	m.forget(true, seen)
	return out
}

// Gates returns the gate of every DRA pod of s that is not finished or
// being deleted (a negative control: not deleted before it started), in
// the snapshot's order, as kept: the same pointer stands for the same gate
// of the same pod while it holds. The gates must not be modified.
func (m *Memo) Gates(s *index.Snapshot) []*PodGate {
	// The verdicts first, in a pass of their own: the blocked collector,
	// which reads them too, need not wait for the gates.
	blocked := map[index.Key]*Verdict{}
	for _, v := range m.Kept(s) {
		blocked[v.Pod.Key] = v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.gatesValid || !s.Version().Unchanged(m.gateVersion, gateWorld) {
		m.reset(false)
	}
	// A claim change that is no change of placement (the driver's device
	// status) changes no gate: the gate reads where a claim is allocated
	// and whom it is reserved for.
	claimsSame := m.gatesValid && s.Version().Unchanged(m.gateVersion, index.KindsOf(index.KindPlacement))
	m.gateCalls++
	var out []*PodGate
	for _, p := range s.Pods {
		if !s.Owns(p.Key.Namespace) {
			continue
		}
		isControl := m.isControl != nil && m.isControl(p)
		switch {
		case isControl && p.Obj.DeletionTimestamp != nil && !p.Started():
			continue
		case !isControl && (p.Terminal() || p.Obj.DeletionTimestamp != nil):
			continue
		}
		lane := s.PodLane(p)
		if lane != index.LaneDRA && lane != index.LaneDRAExtended {
			continue
		}
		e, v := m.entry(p, s.PodEventRecords(p)), blocked[p.Key]
		same := e.gate != nil && e.gateVerdict == keyOf(v)
		if same && !claimsSame && !claimsCurrent(s, p, e.gateClaims) {
			same = slices.Equal(e.gateClaims, s.ResolvePodClaims(p))
		}
		if !same {
			m.drop(e, false, true)
			g := &PodGate{Pod: p}
			if isControl {
				x := NegativeControl(s, p, v, false)
				g.Control = &x
			} else {
				g.API = APIGate(s, p, v, false)
			}
			e.gate, e.gateClaims, e.gateVerdict = g, s.ResolvePodClaims(p), keyOf(v)
			m.nGates++
		}
		e.gateCall = m.gateCalls
		out = append(out, e.gate)
	}
	m.gateVersion, m.gatesValid = s.Version(), true
	m.forget(false, len(out))
	return out
}

// claimsCurrent reports whether each claim the pod resolved to is still the
// snapshot's record of that name: a map lookup a claim, where resolving is
// a walk of the pod's spec, status and owned claims. Only when every claim
// was found and the pod requests no extended resource (whose claim the
// scheduler creates before it records it in the pod's status): a claim
// created since could otherwise be missed.
func claimsCurrent(s *index.Snapshot, p *index.Pod, kept []index.PodClaim) bool {
	if len(p.ExtendedRequests) > 0 {
		return false
	}
	for _, pc := range kept {
		if pc.Claim == nil || s.Claim(pc.Claim.Key) != pc.Claim {
			return false
		}
	}
	return true
}

// verdictKey is what a gate reads of its pod's verdict: the tree walks
// every pod again on a change of placement anywhere, giving new verdicts
// that say the same.
type verdictKey struct {
	blocked bool
	layer   Layer
	reason  Reason
	claim   string
}

func keyOf(v *Verdict) verdictKey {
	if v == nil {
		return verdictKey{}
	}
	return verdictKey{true, v.Layer, v.Reason, v.Claim}
}
