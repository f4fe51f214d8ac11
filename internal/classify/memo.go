package classify

import (
	"maps"
	"slices"
	"sync"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Memo is the one memo of the verdict-derived families: it keeps, between
// calls, what they read of the snapshot, so that the next call evaluates
// again only what changed. The snapshot-wide answers (leaks, double
// allocations, capacity per class and per lane) are kept while the world
// (below) is the same (memoworld.go). Per pod it keeps, in one entry, its
// verdict (Blocked) and its gate (APIGate, or NegativeControl for a
// control), both brought to a snapshot in one pass (the blocked collector
// and the gates read the same pass). Both read the pod itself and the
// events about it, compared record by record (a changed object is a new
// record): a readiness flip or a new event evaluates the one pod again,
// its verdict and its gate. The rest they read differently:
//
//   - a verdict reads the pod's claims, record by record, and the world by
//     version: any change of a class, slice, taint rule or node, or a
//     change of placement (index.KindPlacement) of any claim or pod, walks
//     every pod again;
//   - a gate reads its pod's verdict, where its claims are allocated and
//     whom they are reserved for, and the devices (the nodes of its
//     allocation), by version: a change of placement evaluates again
//     the gates of the pods whose claims are among the claims changed
//     since the last pass (the index's change sets; where the snapshot
//     cannot tell, those whose claims are not the snapshot's records); a
//     driver's device status changes nothing here.
//
// The zero value is ready, with no negative controls; it is safe for
// concurrent use. The verdicts and gates are the same as Blocked's,
// APIGate's and NegativeControl's.
type Memo struct {
	isControl func(*index.Pod) bool

	mu   sync.Mutex
	pods map[index.Key]*podMemo
	// The snapshot version the entries were last brought to, and the
	// passes so far.
	version index.Version
	valid   bool
	calls   uint64
	// The entries with a verdict, with a gate: when a pass saw fewer, some
	// are stale (forget).
	nVerdicts, nGates int
	// walks counts the walks of the tree, for tests.
	walks int
	// last is the last pass's answer, for the snapshot version it is of.
	last *podAnswer

	// The snapshot-wide answers (memoworld.go).
	leaks                       leakMemo
	conflicts                   wide[[]Conflict]
	classCapacity, laneCapacity wide[[]allocator.Capacity]
}

// podAnswer is a pass's answer: the blocked pods' verdicts and the gates,
// in the snapshot's order.
type podAnswer struct {
	version  index.Version
	verdicts []*Verdict
	gates    []*PodGate
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
// only their placement, index.KindPlacement). A gate reads of the world
// only the devices (index.DeviceKinds).
const world = index.AllKinds &^ (1<<index.KindClaim | 1<<index.KindPod | 1<<index.KindEvent)

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

// forget drops the verdicts and gates of the pods the last pass did not
// see, when it saw fewer than there are, and the entries left with
// neither.
func (m *Memo) forget(verdicts, gates int) {
	if m.nVerdicts <= verdicts && m.nGates <= gates {
		return
	}
	maps.DeleteFunc(m.pods, func(_ index.Key, e *podMemo) bool {
		m.drop(e, e.verdictCall != m.calls, e.gateCall != m.calls)
		return e.verdict == nil && e.gate == nil
	})
}

// reset drops every verdict, every gate, or both, and the entries left
// with neither.
func (m *Memo) reset(verdicts, gates bool) {
	maps.DeleteFunc(m.pods, func(_ index.Key, e *podMemo) bool {
		m.drop(e, verdicts, gates)
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
func (m *Memo) Kept(s *index.Snapshot) []*Verdict { return m.answer(s).verdicts }

// Gates returns the gate of every DRA pod of s that is not finished or
// being deleted (a negative control: not deleted before it started), in
// the snapshot's order, as kept: the same pointer stands for the same gate
// of the same pod while it holds. The gates must not be modified.
func (m *Memo) Gates(s *index.Snapshot) []*PodGate { return m.answer(s).gates }

// answer brings the entries to s, in one pass over its pods (or returns
// the last pass's answer, when it is of the same snapshot).
func (m *Memo) answer(s *index.Snapshot) *podAnswer {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := s.Version()
	if m.last != nil && v.Unchanged(m.last.version, index.AllKinds) {
		return m.last
	}
	if !m.valid || !v.Unchanged(m.version, world) {
		m.reset(true, false)
	}
	if !m.valid || !v.Unchanged(m.version, index.DeviceKinds) {
		m.reset(false, true)
	}
	// Without a claim change a pod that is the same record resolves to
	// the same claims. A claim change that is no change of placement (the
	// driver's device status) changes no gate: the gate reads where a
	// claim is allocated and whom it is reserved for.
	claimsSame := m.valid && v.Unchanged(m.version, index.KindsOf(index.KindClaim))
	placementSame := m.valid && v.Unchanged(m.version, index.KindsOf(index.KindPlacement))
	// The claims written or deleted since the last pass, when s was taken
	// right after its snapshot (the index's change sets): a gate's claims
	// are current unless one of them is among those.
	var changed claimChanges
	if m.valid {
		changed.claims, _, changed.known = s.Changed(m.version)
	}
	m.calls++
	out := &podAnswer{version: v}
	verdicts := 0
	for _, p := range s.Pods {
		if !s.Owns(p.Key.Namespace) {
			continue
		}
		var e *podMemo
		var verdict *Verdict
		if !p.Ready() && !p.Terminal() && p.Obj.DeletionTimestamp == nil {
			verdicts++
			e = m.entry(p, s.PodEventRecords(p))
			m.verdict(s, e, claimsSame)
			if e.verdict.Blocked {
				verdict = e.verdict
				out.verdicts = append(out.verdicts, verdict)
			}
		}
		if !m.gated(s, p) {
			continue
		}
		if e == nil {
			e = m.entry(p, s.PodEventRecords(p))
		}
		m.gate(s, e, verdict, placementSame, changed)
		out.gates = append(out.gates, e.gate)
	}
	m.version, m.valid = v, true
	m.forget(verdicts, len(out.gates))
	m.last = out
	return out
}

// verdict brings an entry's verdict to s.
func (m *Memo) verdict(s *index.Snapshot, e *podMemo, claimsSame bool) {
	if e.verdict == nil || !claimsSame {
		claims := s.ResolvePodClaims(e.pod)
		if e.verdict == nil || !slices.Equal(e.verdictClaims, claims) {
			m.drop(e, true, false)
			v := classifyPod(s, e.pod, false)
			e.verdict, e.verdictClaims = &v, claims
			m.nVerdicts++
			m.walks++
		}
	}
	e.verdictCall = m.calls
}

// gated reports whether a pod has a gate: a DRA pod not finished or being
// deleted (a negative control: not deleted before it started).
func (m *Memo) gated(s *index.Snapshot, p *index.Pod) bool {
	isControl := m.isControl != nil && m.isControl(p)
	switch {
	case isControl && p.Obj.DeletionTimestamp != nil && !p.Started():
		return false
	case !isControl && (p.Terminal() || p.Obj.DeletionTimestamp != nil):
		return false
	}
	lane := s.PodLane(p)
	return lane == index.LaneDRA || lane == index.LaneDRAExtended
}

// gate brings an entry's gate to s, given the pod's verdict (nil: not
// blocked).
func (m *Memo) gate(s *index.Snapshot, e *podMemo, v *Verdict, placementSame bool, changed claimChanges) {
	p := e.pod
	same := e.gate != nil && e.gateVerdict == keyOf(v)
	if same && !placementSame && !claimsCurrent(s, p, e.gateClaims, changed) {
		same = slices.Equal(e.gateClaims, s.ResolvePodClaims(p))
	}
	if !same {
		m.drop(e, false, true)
		g := &PodGate{Pod: p}
		if m.isControl != nil && m.isControl(p) {
			x := NegativeControl(s, p, v, false)
			g.Control = &x
		} else {
			g.API = APIGate(s, p, v, false)
		}
		e.gate, e.gateClaims, e.gateVerdict = g, s.ResolvePodClaims(p), keyOf(v)
		m.nGates++
	}
	e.gateCall = m.calls
}

// claimChanges are the claims changed since the memo's last pass, when the
// snapshot can tell (known).
type claimChanges struct {
	claims map[index.Key]*index.Claim
	known  bool
}

// claimsCurrent reports whether each claim the pod resolved to is, in what
// a gate reads of it, the snapshot's claim of that name: none of them
// changed since the last pass (which brought every gate to its snapshot),
// or, when the snapshot cannot tell, each is still the snapshot's record
// of that name: a map lookup a claim, where resolving is a walk of the
// pod's spec, status and owned claims. Only when every claim was found and
// the pod requests no extended resource (whose claim the scheduler creates
// before it records it in the pod's status): a claim created since could
// otherwise be missed.
func claimsCurrent(s *index.Snapshot, p *index.Pod, kept []index.PodClaim, changed claimChanges) bool {
	if len(p.ExtendedRequests) > 0 {
		return false
	}
	for _, pc := range kept {
		if pc.Claim == nil {
			return false
		}
		if changed.known {
			if _, ok := changed.claims[pc.Claim.Key]; ok {
				return false
			}
		} else if s.Claim(pc.Claim.Key) != pc.Claim {
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
