package index

import (
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

func newClaim(obj *resourceapi.ResourceClaim) *Claim {
	c := &Claim{
		Obj:      obj,
		Key:      Key{obj.Namespace, obj.Name},
		UID:      obj.UID,
		Extended: obj.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true",
	}
	c.OwnerPod, c.OwnerGroup = dra.Owners(obj)
	c.Requests = requestClasses(obj.Spec.Devices.Requests)
	alloc := obj.Status.Allocation
	if alloc == nil {
		return c
	}
	if alloc.AllocationTimestamp != nil {
		c.AllocatedAt = alloc.AllocationTimestamp.Time
	}
	c.Node = nodeFromSelector(alloc.NodeSelector)
	c.Results = make([]Result, 0, len(alloc.Devices.Results))
	for _, r := range alloc.Devices.Results {
		class := c.ClassOf(r.Request)
		if class == "" {
			parent, _, _ := strings.Cut(r.Request, "/")
			class = c.ClassOf(parent)
		}
		c.Results = append(c.Results, Result{
			Request:          r.Request,
			Class:            class,
			Device:           DeviceKey{Driver: r.Driver, Pool: r.Pool, Device: r.Device},
			AdminAccess:      r.AdminAccess != nil && *r.AdminAccess,
			Shared:           r.ShareID != nil,
			ConsumedCapacity: r.ConsumedCapacity,
		})
	}
	return c
}

// requestClasses lists the requests and subrequests with their classes,
// sorted by name; of a name given twice (invalid) the last counts.
func requestClasses(requests []resourceapi.DeviceRequest) []RequestClass {
	var out []RequestClass
	for _, r := range requests {
		if r.Exactly != nil {
			out = append(out, RequestClass{Request: r.Name, Class: r.Exactly.DeviceClassName})
		}
		for _, sub := range r.FirstAvailable {
			out = append(out, RequestClass{Request: r.Name + "/" + sub.Name, Class: sub.DeviceClassName})
		}
	}
	slices.SortStableFunc(out, func(a, b RequestClass) int { return strings.Compare(a.Request, b.Request) })
	kept := out[:0]
	for i, r := range out {
		if i+1 < len(out) && out[i+1].Request == r.Request {
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// nodeFromSelector returns the node an allocation is bound to. The scheduler
// writes one term with matchFields metadata.name In [node]; a selector of any
// other shape is not node-local.
func nodeFromSelector(sel *corev1.NodeSelector) string {
	if sel == nil || len(sel.NodeSelectorTerms) != 1 {
		return ""
	}
	term := sel.NodeSelectorTerms[0]
	for _, req := range append(term.MatchFields, term.MatchExpressions...) {
		if (req.Key == "metadata.name" || req.Key == corev1.LabelHostname) &&
			req.Operator == corev1.NodeSelectorOpIn && len(req.Values) == 1 {
			return req.Values[0]
		}
	}
	return ""
}

func newClass(obj *resourceapi.DeviceClass) *Class {
	c := &Class{Name: obj.Name, Selectors: obj.Spec.Selectors, Created: obj.CreationTimestamp.Time}
	if obj.Spec.ExtendedResourceName != nil {
		c.ExtendedResource = *obj.Spec.ExtendedResourceName
	}
	return c
}

func newPod(obj *corev1.Pod) *Pod {
	return &Pod{
		Obj:              obj,
		Key:              Key{obj.Namespace, obj.Name},
		UID:              obj.UID,
		ExtendedRequests: extendedRequests(obj),
		ready:            podCondition(obj, corev1.PodReady) == corev1.ConditionTrue,
	}
}

// extendedRequests computes the pod's effective request of each extended
// resource with the scheduler's own helper (component-helpers PodRequests:
// app containers and restartable init containers (sidecars) add up, a
// larger ordinary init container wins), requests defaulted from limits as
// the API server does.
func extendedRequests(obj *corev1.Pod) map[string]int64 {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     defaulted(obj.Spec.Containers),
		InitContainers: defaulted(obj.Spec.InitContainers),
	}}
	var out map[string]int64
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{ExcludeOverhead: true, SkipPodLevelResources: true}) {
		if !vocab.IsExtendedResource(string(name)) || q.IsZero() {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[string(name)] = quantityValue(q)
	}
	return out
}

// quantityValue is q as an int64, saturating instead of wrapping around for
// amounts no int64 holds.
func quantityValue(q resource.Quantity) int64 {
	if v, ok := q.AsInt64(); ok {
		return v
	}
	if q.Sign() > 0 && q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.DecimalSI)) > 0 {
		return math.MaxInt64
	}
	return q.Value()
}

// defaulted copies containers with their requests defaulted from limits.
func defaulted(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: containerRequests(c)}}
	}
	return out
}

// containerRequests returns requests, defaulted from limits as the API
// server does for extended resources.
func containerRequests(c corev1.Container) corev1.ResourceList {
	if len(c.Resources.Limits) == 0 {
		return c.Resources.Requests
	}
	out := corev1.ResourceList{}
	for name, q := range c.Resources.Limits {
		out[name] = q
	}
	for name, q := range c.Resources.Requests {
		out[name] = q
	}
	return out
}

func newNode(obj *corev1.Node) *Node {
	n := &Node{Name: obj.Name}
	if obj.Spec.Unschedulable {
		n.Unusable = "cordoned"
	}
	for _, c := range obj.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			n.NotReady = "Ready=" + string(c.Status)
			if c.Reason != "" {
				n.NotReady += " (" + c.Reason + ")"
			}
			n.Unusable = n.NotReady
		}
	}
	n.Allocatable = extendedAmounts(obj.Status.Allocatable)
	n.Capacity = extendedAmounts(obj.Status.Capacity)
	return n
}

func extendedAmounts(list corev1.ResourceList) map[string]int64 {
	var out map[string]int64
	for name, q := range list {
		if vocab.IsExtendedResource(string(name)) {
			if out == nil {
				out = map[string]int64{}
			}
			out[string(name)] = quantityValue(q)
		}
	}
	return out
}

func newCoreEvent(obj *corev1.Event) *Event {
	e := &Event{
		Key:             Key{obj.Namespace, obj.Name},
		Pod:             Key{obj.InvolvedObject.Namespace, obj.InvolvedObject.Name},
		PodUID:          obj.InvolvedObject.UID,
		Reason:          obj.Reason,
		Message:         obj.Message,
		Count:           obj.Count,
		AboutPodWarning: obj.Type == corev1.EventTypeWarning && obj.InvolvedObject.Kind == "Pod",
	}
	e.Reporter = obj.ReportingController
	if e.Reporter == "" {
		e.Reporter = obj.Source.Component
	}
	switch {
	case obj.Series != nil && !obj.Series.LastObservedTime.IsZero():
		e.Timestamp = obj.Series.LastObservedTime.Time
		e.Count = obj.Series.Count
	case !obj.LastTimestamp.IsZero():
		e.Timestamp = obj.LastTimestamp.Time
	case !obj.EventTime.IsZero():
		e.Timestamp = obj.EventTime.Time
	case !obj.FirstTimestamp.IsZero():
		e.Timestamp = obj.FirstTimestamp.Time
	default:
		e.Timestamp = obj.CreationTimestamp.Time
	}
	if e.Count == 0 {
		e.Count = 1
	}
	return e
}

func newEventsV1Event(obj *eventsv1.Event) *Event {
	e := &Event{
		Key:             Key{obj.Namespace, obj.Name},
		Pod:             Key{obj.Regarding.Namespace, obj.Regarding.Name},
		PodUID:          obj.Regarding.UID,
		Reason:          obj.Reason,
		Message:         obj.Note,
		Reporter:        obj.ReportingController,
		Count:           obj.DeprecatedCount,
		AboutPodWarning: obj.Type == corev1.EventTypeWarning && obj.Regarding.Kind == "Pod",
	}
	switch {
	case obj.Series != nil && !obj.Series.LastObservedTime.IsZero():
		e.Timestamp = obj.Series.LastObservedTime.Time
		e.Count = obj.Series.Count
	case !obj.EventTime.IsZero():
		e.Timestamp = obj.EventTime.Time
	case !obj.DeprecatedLastTimestamp.IsZero():
		e.Timestamp = obj.DeprecatedLastTimestamp.Time
	default:
		e.Timestamp = obj.CreationTimestamp.Time
	}
	if e.Count == 0 {
		e.Count = 1
	}
	return e
}
