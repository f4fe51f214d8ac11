package classify

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// candidate is one way to satisfy a request: the request itself, or one of
// its firstAvailable subrequests.
type candidate struct {
	name        string
	class       string
	selectors   []resourceapi.DeviceSelector
	mode        resourceapi.DeviceAllocationMode
	count       int64
	admin       bool
	tolerations []resourceapi.DeviceToleration
	capacity    *resourceapi.CapacityRequirements
}

func (c candidate) demand() allocator.Demand {
	return allocator.Demand{Tolerations: c.tolerations, Capacity: c.capacity}
}

func candidates(r resourceapi.DeviceRequest) []candidate {
	if r.Exactly != nil {
		e := r.Exactly
		return []candidate{{name: r.Name, class: e.DeviceClassName, selectors: e.Selectors, mode: e.AllocationMode, count: e.Count,
			admin: e.AdminAccess != nil && *e.AdminAccess, tolerations: e.Tolerations, capacity: e.Capacity}}
	}
	out := make([]candidate, 0, len(r.FirstAvailable))
	for _, s := range r.FirstAvailable {
		out = append(out, candidate{name: r.Name + "/" + s.Name, class: s.DeviceClassName, selectors: s.Selectors, mode: s.AllocationMode, count: s.Count,
			tolerations: s.Tolerations, capacity: s.Capacity})
	}
	return out
}

// check is the outcome of the scheduler-side links for one candidate.
type check struct {
	class string // the candidate's DeviceClass
	links []Link
	fail  Reason // "" when every link passed
	// selectorErrors is set when the class's or the request's selectors
	// failed to evaluate on some device.
	selectorErrors bool
}

// walkRequests checks, for each request of an unallocated claim, that its
// class exists, selects devices, that the request's selectors keep some,
// and that enough of those are free. It reports whether all passed.
func (w *walker) walkRequests(c *index.Claim) (ok bool, class string) {
	ok = true
	for _, r := range c.Obj.Spec.Devices.Requests {
		var best *check
		for _, cand := range candidates(r) {
			ch := w.checkCandidate(c, cand)
			if best == nil || ch.fail == "" || (best.fail != "" && ch.fail.rank() > best.fail.rank()) {
				best = &ch
			}
			if ch.fail == "" {
				break
			}
		}
		if best == nil {
			continue
		}
		if class == "" {
			class = best.class // for firstAvailable, the subrequest that passed or got furthest
		}
		w.selectorErrors = w.selectorErrors || best.selectorErrors
		for _, l := range best.links {
			if l.State == Fail {
				w.fail(l, c, c.Key.Name)
				ok = false
			} else {
				w.add(l)
			}
		}
	}
	return ok, class
}

func (w *walker) checkCandidate(c *index.Claim, cand candidate) check {
	ch := check{class: cand.class}
	link := func(step string) Link {
		return Link{Step: fmt.Sprintf("%s (request %s)", step, cand.name), Layer: LayerScheduler, Claim: c.Key.Name, Class: cand.class}
	}
	failed := func(l Link, reason Reason, ev ...string) check {
		l.State, l.Reason, l.Evidence = Fail, reason, ev
		if reason == CapacityExhausted {
			sel := w.a.Select(cand.class, cand.selectors, cand.demand())
			l.lowerPriorityHolders = sel.LowerPriorityHolders(w.a, w.p.Priority())
			if w.explain && l.lowerPriorityHolders > 0 {
				l.Evidence = append(l.Evidence, w.preemptionEvidence(sel, l.lowerPriorityHolders)...)
			}
		}
		ch.links = append(ch.links, l)
		ch.fail = reason
		return ch
	}
	class := w.s.Class(cand.class)
	if class == nil {
		return failed(link("device class exists"), DeviceClassNotFound, fmt.Sprintf("DeviceClass %q does not exist", cand.class))
	}
	ch.links = append(ch.links, Link{Step: fmt.Sprintf("device class exists (request %s)", cand.name), Layer: LayerScheduler, Claim: c.Key.Name, State: Pass,
		Evidence: []string{"DeviceClass " + class.Name}})

	devices := w.s.ClassDevices(class.Name)
	if len(devices) == 0 {
		return failed(link("devices published for class"), NoDevicesForClass, w.classEvidence(class)...)
	}
	pub := link("devices published for class")
	pub.State = Pass
	if w.explain {
		pub.Evidence = []string{fmt.Sprintf("%d devices of class %s on %s", len(devices), class.Name, nodesOf(devices))}
	}
	ch.links = append(ch.links, pub)

	sel := w.a.Select(class.Name, cand.selectors, cand.demand())
	selected := sel.Devices
	errEv := selectorErrorEvidence(class.Name, sel)
	ch.selectorErrors = sel.Errors > 0
	// The selector errors are shown with the request's selectors when it
	// has some, else with the free devices, whose count they change.
	capEv := errEv
	if sel.TooSmall > 0 {
		errEv = append(errEv, fmt.Sprintf("the request's capacity requests (%s) exceed what %d devices have, or their request policy allows", capacityRequests(cand.capacity), sel.TooSmall))
	}
	if len(cand.selectors) > 0 || sel.TooSmall > 0 {
		if len(selected) == 0 {
			ev := []string{fmt.Sprintf("the request's selectors keep 0 of the %d devices of class %s", len(devices), class.Name)}
			ev = append(ev, expressions(cand.selectors)...)
			ev = append(ev, errEv...)
			return failed(link("request selectors match devices"), SelectorMatchesNothing, ev...)
		}
		if sel.Nodes == 0 {
			ev := []string{fmt.Sprintf("the request's selectors keep %d of the %d devices of class %s, but every node that reaches them also reaches a device the selectors fail on", len(selected), len(devices), class.Name)}
			ev = append(ev, expressions(cand.selectors)...)
			ev = append(ev, errEv...)
			return failed(link("request selectors match devices"), SelectorMatchesNothing, ev...)
		}
		l := link("request selectors match devices")
		l.State, l.Evidence = Pass, []string{fmt.Sprintf("%d of %d devices of class %s match", len(selected), len(devices), class.Name)}
		l.Evidence = append(l.Evidence, errEv...)
		ch.links = append(ch.links, l)
		capEv = nil
		if sel.FreeOnErrorNodes > 0 {
			capEv = []string{fmt.Sprintf("%d of the free matching devices are on nodes the selector errors rule out (above)", sel.FreeOnErrorNodes)}
		}
	} else if sel.Nodes == 0 {
		ev := []string{fmt.Sprintf("every node that reaches a device of class %s also reaches a device the class selectors fail on", class.Name)}
		return failed(link("devices published for class"), NoDevicesForClass, append(ev, errEv...)...)
	}

	if cand.admin {
		return ch // admin access may use devices that are allocated
	}
	capLink := link("free matching devices")
	if cand.mode == resourceapi.DeviceAllocationModeAll {
		if !sel.AllFree {
			ev := []string{fmt.Sprintf("allocationMode All takes every matching device reachable from one node; no node has all of them free (%d of %d matching devices are free)", sel.Free, len(selected))}
			ev = append(ev, capEv...)
			if w.explain {
				ev = append(ev, holders(w.s, selected)...)
				ev = append(ev, shortfalls(w.a, selected, cand.demand())...)
			}
			return failed(capLink, CapacityExhausted, ev...)
		}
		capLink.State, capLink.Evidence = Pass, []string{fmt.Sprintf("allocationMode All: every matching device reachable from %s is free", nodeName(sel.AllFreeNode))}
		capLink.Evidence = append(capLink.Evidence, capEv...)
		ch.links = append(ch.links, capLink)
		return ch
	}
	need := int(max(cand.count, 1))
	switch {
	case sel.MostOnANode < need:
		ev := []string{fmt.Sprintf("the request needs %d devices from one node, and no node reaches more than %d matching devices (%d in all): it cannot be allocated as written", need, sel.MostOnANode, len(selected))}
		return failed(capLink, CapacityExhausted, append(ev, capEv...)...)
	case sel.BestNodeFree < need:
		var ev []string
		if sel.Free >= need {
			ev = []string{fmt.Sprintf("%d of %d matching devices are free, but at most %d on one node (%s); the request needs %d from one node", sel.Free, len(selected), sel.BestNodeFree, nodeName(sel.BestNode), need)}
		} else {
			ev = []string{fmt.Sprintf("%d of %d matching devices are free, the request needs %d", sel.Free, len(selected), need)}
		}
		if sel.FreeEach > sel.Free {
			ev = append(ev, fmt.Sprintf("%d matching devices are free each on its own, but they draw on the same shared counters: %d can be allocated together", sel.FreeEach, sel.Free))
		}
		ev = append(ev, capEv...)
		if w.explain && sel.Errors > 0 {
			ev = append(ev, w.schedulingEvidence()...) // the scheduler's own words for the error
		}
		if w.explain {
			ev = append(ev, holders(w.s, selected)...)
			ev = append(ev, shortfalls(w.a, selected, cand.demand())...)
		}
		return failed(capLink, CapacityExhausted, ev...)
	}
	capLink.State, capLink.Evidence = Pass, []string{fmt.Sprintf("%d of %d matching devices are free (%d on %s), the request needs %d", sel.Free, len(selected), sel.BestNodeFree, nodeName(sel.BestNode), need)}
	capLink.Evidence = append(capLink.Evidence, capEv...)
	ch.links = append(ch.links, capLink)
	return ch
}

// selectorErrorEvidence says on how many devices the class's or the
// request's selectors failed to evaluate, on which nodes, and a few of the
// errors (device, node, selector, CEL error). The allocator returns such an
// error for a node whose device it evaluates, and the scheduler's Filter
// turns it into an error of the whole scheduling attempt, not a node
// unschedulable: the pod stays pending with the CEL error as its
// PodScheduled message, whatever the other nodes offer (seen on 1.37.2,
// TestClassSelectorErrorRulesOutANode). The tree still counts the other
// nodes' free devices, so that the verdict says what fixing the error
// leaves: capacity_exhausted when no other node could serve the pod.
func selectorErrorEvidence(class string, sel *allocator.Selection) []string {
	if sel.Errors == 0 {
		return nil
	}
	whose := fmt.Sprintf("the selectors of DeviceClass %s and of the request", class)
	switch sel.ClassErrors {
	case sel.Errors:
		whose = "the selectors of DeviceClass " + class
	case 0:
		whose = "the request's selectors"
	}
	nodes := make([]string, len(sel.ErrorNodes))
	for i, n := range sel.ErrorNodes {
		nodes[i] = n
		if n == "" {
			nodes[i] = "every node (a network-attached device)"
		}
	}
	ev := []string{fmt.Sprintf("%s fail to evaluate (CEL runtime error) on %d devices, on %s: a node that reaches one cannot be used, "+
		"and the scheduler gives up the pod's scheduling attempt when it meets the error (PodScheduled=False, reason SchedulerError), even where another node fits",
		whose, sel.Errors, summarize(nodes, "nodes"))}
	if sel.FreeOnErrorNodes > 0 {
		ev = append(ev, fmt.Sprintf("%d of the %d free matching devices are on those nodes", sel.FreeOnErrorNodes, sel.Free))
	}
	return append(ev, sel.ErrorSample...)
}

// preemptionEvidence names the lower-priority holders of the matching
// devices: the scheduler's preemption does not free DRA devices.
func (w *walker) preemptionEvidence(sel *allocator.Selection, n int) []string {
	var names []string
	for _, p := range sel.Holders(w.a)[:n] {
		names = append(names, fmt.Sprintf("%s (priority %d)", p.Key, p.Priority()))
	}
	return []string{
		fmt.Sprintf("%d pods of lower priority than this pod's %d hold matching devices: %s", n, w.p.Priority(), summarize(names, "pods")),
		"the scheduler does not preempt pods to free DRA devices: preemption will not help; free a device (scale down or delete a lower-priority holder), or let a queue such as Kueue preempt",
	}
}

func nodeName(n string) string {
	if n == "" {
		return "network-attached pools"
	}
	return "node " + n
}

func (w *walker) classEvidence(class *index.Class) []string {
	if !w.explain {
		return nil
	}
	s := w.s
	ev := []string{fmt.Sprintf("DeviceClass %s selects no device of any current ResourceSlice", class.Name)}
	ev = append(ev, expressions(class.Selectors)...)
	if class.CompileError != "" {
		ev = append(ev, "class selector does not compile: "+class.CompileError)
	}
	errors := 0
	var sampleKey, sample string
	for _, d := range s.Devices {
		if msg, ok := d.ClassErrors[class.Name]; ok {
			errors++
			if k := d.Key.String(); sampleKey == "" || k < sampleKey {
				sampleKey, sample = k, k+": "+msg
			}
		}
	}
	if errors > 0 {
		ev = append(ev, fmt.Sprintf("the class selectors failed on %d devices, e.g. %s", errors, sample))
	}
	if len(s.Devices) == 0 {
		ev = append(ev, "no ResourceSlice publishes any device: is the DRA driver running?")
	} else {
		ev = append(ev, fmt.Sprintf("%d devices are published by drivers %s", len(s.Devices), drivers(s.Devices)))
	}
	return ev
}

func expressions(selectors []resourceapi.DeviceSelector) []string {
	var out []string
	for _, sel := range selectors {
		if sel.CEL != nil {
			out = append(out, "selector: "+sel.CEL.Expression)
		}
	}
	return out
}

func nodesOf(devices []*index.Device) string {
	seen := map[string]bool{}
	var nodes []string
	for _, d := range devices {
		n := d.Node
		if n == "" {
			n = "(no node)"
		}
		if !seen[n] {
			seen[n] = true
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return summarize(nodes, "nodes")
}

func drivers(devices []*index.Device) string {
	seen := map[string]bool{}
	var out []string
	for _, d := range devices {
		if !seen[d.Key.Driver] {
			seen[d.Key.Driver] = true
			out = append(out, d.Key.Driver)
		}
	}
	slices.Sort(out)
	return summarize(out, "drivers")
}

func summarize(items []string, noun string) string {
	if len(items) <= 4 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more %s", strings.Join(items[:4], ", "), len(items)-4, noun)
}

// holders names the claims that hold the matching devices (the first
// three by device name).
func holders(s *index.Snapshot, devices []*index.Device) []string {
	var out []string
	unusable := map[string]int{}
	for _, d := range devices {
		for _, c := range s.AllocatedTo(d.Key) {
			out = append(out, fmt.Sprintf("%s held by claim %s", d.Key, c.Key))
		}
		if n := s.Node(d.Node); n != nil && n.Unusable != "" && !s.InUse(d.Key) {
			unusable[d.Node+" ("+n.Unusable+")"]++
		}
	}
	slices.Sort(out)
	if len(out) > 3 {
		out = append(out[:3], "...")
	}
	for _, n := range slices.Sorted(maps.Keys(unusable)) {
		out = append(out, fmt.Sprintf("%d matching devices are on node %s, where no new pod lands", unusable[n], n))
	}
	return out
}

// walkExtendedRequests checks a pod whose extended-resource requests are
// served by a device class and for which the scheduler has not yet created
// a claim. Both lanes can serve such a request: DRA devices of the class and
// device-plugin capacity of nodes that advertise the resource.
func (w *walker) walkExtendedRequests() {
	names := make([]string, 0, len(w.p.ExtendedRequests))
	for name := range w.p.ExtendedRequests {
		names = append(names, name)
	}
	slices.Sort(names)
	failedAny := false
	served := ""
	for _, name := range names {
		class := w.s.ClassForExtendedResource(name)
		if class == nil {
			continue
		}
		if served == "" {
			served = class.Name
		}
		want := w.p.ExtendedRequests[name]
		devices := w.s.ClassDevices(class.Name)
		var pluginTotal, pluginFree int64
		for _, n := range w.s.Nodes {
			pluginTotal += n.Allocatable[name]
		}
		if pluginTotal > 0 {
			pluginFree = w.a.DevicePluginFree(name)
		}
		step := fmt.Sprintf("extended resource %s served by class %s", name, class.Name)
		if len(devices) == 0 && pluginTotal == 0 {
			w.fail(Link{Step: step, Class: class.Name, Reason: NoDevicesForClass, Evidence: w.classEvidence(class)}, nil, "")
			failedAny = true
			continue
		}
		sel := w.a.Select(class.Name, nil, allocator.Demand{})
		free := pluginFree + int64(sel.Free)
		// One node serves the whole request: through its device plugin
		// when it advertises the resource, else through DRA.
		best, bestNode := int64(sel.FreeOn("")), ""
		nodes := sel.DeviceNodes()
		for _, n := range w.s.Nodes {
			nodes = append(nodes, n.Name)
		}
		for _, n := range nodes {
			f := int64(sel.FreeOn(n))
			if w.s.Node(n) != nil && w.s.Node(n).Allocatable[name] > 0 {
				f = w.a.DevicePluginFreeOn(n, name)
			}
			if f > best {
				best, bestNode = f, n
			}
		}
		ev := fmt.Sprintf("%d DRA devices of class %s, %d device-plugin %s on nodes; %d free, at most %d on one node (%s); the pod requests %d",
			len(devices), class.Name, pluginTotal, name, free, best, bestNode, want)
		if best < want {
			w.fail(Link{Step: step, Class: class.Name, Reason: CapacityExhausted, Evidence: []string{ev}}, nil, "")
			failedAny = true
			continue
		}
		w.add(Link{Step: step, Layer: LayerScheduler, State: Pass, Evidence: []string{ev}})
	}
	if !failedAny {
		l := Link{Step: "extended-resource claim allocated", Class: served, Reason: Unallocated,
			Evidence: []string{"free devices exist, but the scheduler has not allocated a claim for the pod's extended resources"}}
		l.Evidence = append(l.Evidence, w.schedulingEvidence()...)
		w.fail(l, nil, "")
	}
}
