package classify

// The verdict of one pod and the walker that produces it: the links are
// checked in tree order (claimlinks.go, requests.go, nodelinks.go) and the
// earliest failure wins.

import (
	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// State is the outcome of one link.
type State string

// Link states. Wait marks a link that is not a DRA failure but holds the pod
// (binding in progress); Skip marks links after the first failure.
const (
	Pass State = "PASS"
	Fail State = "FAIL"
	Wait State = "WAIT"
	Skip State = "SKIP"
)

// Link is one step of the chain from a pod to a ready GPU.
type Link struct {
	Step     string
	Layer    Layer
	Claim    string // the claim (or pod claim entry) the step is about
	Class    string // the device class the step is about, when one
	State    State
	Reason   Reason // set when State is Fail
	Evidence []string

	// lowerPriorityHolders counts, on a capacity failure, the pods of lower
	// priority that hold matching devices.
	lowerPriorityHolders int
}

// Verdict is the decision tree's answer for one pod.
type Verdict struct {
	Pod  *index.Pod
	Lane string
	// DRA is true when the pod gets devices through DRA.
	DRA bool
	// Blocked is true when the pod is not Ready because of a failing link.
	Blocked bool
	Reason  Reason
	Layer   Layer
	Claim   string
	// DeviceClass is the class of the failing request, or of the
	// allocated device for node and application reasons.
	DeviceClass string
	Node        string
	Device      string
	Links       []Link
	// Note says why a pod is not classified (not a DRA pod, finished...).
	Note string
	// ReadyDespite is set when the pod is Ready although a link fails
	// (Reason and Layer name it); the pod is not blocked.
	ReadyDespite bool
	// LowerPriorityHolders, for capacity_exhausted, counts the pods of
	// lower priority than this one that hold matching devices. The
	// scheduler does not preempt pods to free DRA devices, so a pod
	// waiting behind them waits for good.
	LowerPriorityHolders int
}

// Pod walks the decision tree for one pod, with the evidence of every link
// (what explain prints).
func Pod(s *index.Snapshot, p *index.Pod) Verdict { return classifyPod(s, p, true) }

// classifyPod walks the tree; without explain it records only the verdict,
// which is what a scrape needs, and skips building evidence.
func classifyPod(s *index.Snapshot, p *index.Pod, explain bool) Verdict {
	v := Verdict{Pod: p, Lane: s.PodLane(p)}
	v.DRA = v.Lane == index.LaneDRA || v.Lane == index.LaneDRAExtended
	switch {
	case !v.DRA:
		v.Note = "the pod does not use DRA"
		if v.Lane == index.LaneDevicePlugin {
			v.Note = "the pod gets its GPUs from the device-plugin lane"
		}
		return v
	case p.Terminal():
		v.Note = fmt.Sprintf("the pod has finished (phase %s)", p.Obj.Status.Phase)
		return v
	case p.Obj.DeletionTimestamp != nil:
		v.Note = "the pod is being deleted"
		return v
	}
	w := walker{s: s, a: allocator.Of(s), p: p, v: &v, explain: explain}
	w.walk()
	if v.Blocked && p.Ready() {
		// A failing link does not hold a pod that is Ready (a claim deleted
		// or unreserved under a running pod): explain says so, as the
		// metric, which leaves Ready pods out, does.
		v.Blocked = false
		v.ReadyDespite = true
	}
	return v
}

// Blocked returns the verdicts of every DRA pod that is blocked.
func Blocked(s *index.Snapshot) []Verdict {
	var out []Verdict
	for _, p := range s.Pods {
		if p.Ready() || p.Terminal() || p.Obj.DeletionTimestamp != nil || !s.Owns(p.Key.Namespace) {
			continue
		}
		if v := classifyPod(s, p, false); v.Blocked {
			out = append(out, v)
		}
	}
	return out
}

type walker struct {
	s       *index.Snapshot
	a       *allocator.Model // s's, asked for the requests' selections
	p       *index.Pod
	v       *Verdict
	explain bool
	// claims are the pod's claims, resolved once per walk.
	claims []index.PodClaim
	// waiting is set when a Wait link ends the walk (a gang member
	// waiting for its group).
	waiting bool
	// selectorErrors is set when a request's class or own selectors
	// failed to evaluate on some device (walkRequests).
	selectorErrors bool
	// first failure so far
	failed *Link
	fClaim *index.Claim
	fName  string
}

func (w *walker) add(l Link) {
	if w.explain {
		w.v.Links = append(w.v.Links, l)
	}
}

func (w *walker) fail(l Link, claim *index.Claim, claimName string) {
	l.State = Fail
	l.Layer = l.Reason.Layer()
	w.add(l)
	if w.failed == nil || l.Reason.rank() < w.failed.Reason.rank() {
		cp := l
		w.failed, w.fClaim, w.fName = &cp, claim, claimName
	}
}

func (w *walker) walk() {
	w.claims = w.s.ResolvePodClaims(w.p)
	gated := len(w.p.SchedulingGates()) > 0
	for _, pc := range w.claims {
		w.walkClaim(pc, gated)
	}
	if w.v.Lane == index.LaneDRAExtended && !hasExtendedClaim(w.claims) && !gated {
		w.walkExtendedRequests()
	}
	if w.failed != nil {
		w.add(Link{Step: "pod scheduled, prepared, ready", State: Skip, Evidence: []string{"not evaluated: an earlier link failed"}})
		w.conclude()
		return
	}
	if !w.waiting {
		w.walkPod()
	}
	w.conclude()
}

func hasExtendedClaim(claims []index.PodClaim) bool {
	for _, pc := range claims {
		if pc.Name == "" {
			return true
		}
	}
	return false
}

func (w *walker) conclude() {
	if w.failed == nil {
		return
	}
	v := w.v
	v.Blocked = true
	v.Reason = w.failed.Reason
	v.Layer = w.failed.Reason.Layer()
	v.Claim = w.fName
	v.DeviceClass = w.failed.Class
	v.LowerPriorityHolders = w.failed.lowerPriorityHolders
	v.Node = w.p.Obj.Spec.NodeName
	c := w.fClaim
	if c == nil && v.Layer != LayerController && v.Layer != LayerScheduler {
		c = firstAllocated(w.claims)
		if c != nil {
			v.Claim = c.Key.Name
		}
	}
	if c != nil && len(c.Results) > 0 {
		// A claim may span nodes (a PodGroup's, network-attached devices):
		// name a device on the pod's node, so that node and device agree.
		r := c.Results[0]
		for _, x := range c.Results {
			if d := w.s.Device(x.Device); v.Node != "" && d != nil && d.Node == v.Node {
				r = x
				break
			}
		}
		v.Device = r.Device.Device
		if v.DeviceClass == "" {
			v.DeviceClass = r.Class
		}
		if v.Node == "" {
			v.Node = claimNode(w.s, c)
		}
	}
}

func firstAllocated(claims []index.PodClaim) *index.Claim {
	for _, pc := range claims {
		if pc.Claim != nil && pc.Claim.Allocated() {
			return pc.Claim
		}
	}
	return nil
}

// claimNode is the node of an allocation: its node selector, else the node
// of its first node-local device.
func claimNode(s *index.Snapshot, c *index.Claim) string {
	if c.Node != "" {
		return c.Node
	}
	for _, r := range c.Results {
		if d := s.Device(r.Device); d != nil && d.Node != "" {
			return d.Node
		}
	}
	return ""
}
