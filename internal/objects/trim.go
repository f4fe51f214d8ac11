// Package objects prepares Kubernetes objects for the index: it trims what no
// join reads (managedFields, most of a pod spec) so that informer caches stay
// small, and it reads objects from files (kubectl get -o yaml Lists,
// multi-document YAML or JSON).
package objects

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// Trimmer trims objects. PodLabels is the allowlist of pod label keys kept
// (for the pod labels metric); every other label and all annotations of pods
// are dropped.
type Trimmer struct {
	PodLabels []string
	// EventNamespaces, when set, keeps only the events about pods in the
	// namespaces it accepts (a shard's); the others keep only their
	// identity, so that the informer's store stays small.
	EventNamespaces func(namespace string) bool
	// ContextPods, when set, names the namespaces whose pods are read only
	// as context for other pods' verdicts (another shard's, on a shard
	// that serves no cluster-wide series): such a pod keeps what those
	// verdicts read (node, priority, phase, GPU requests, claim names) and
	// loses its conditions, container statuses, labels and owners.
	ContextPods func(namespace string) bool
}

// Trim returns a trimmed copy of a supported object, or the object itself
// when its kind is not one the trimmer knows. A ResourceSlice becomes a
// *Slice, its device attributes compact.
func (t Trimmer) Trim(obj any) any {
	switch o := obj.(type) {
	case *corev1.Pod:
		if t.ContextPods != nil && t.ContextPods(o.Namespace) {
			return contextPod(t.pod(o))
		}
		return t.pod(o)
	case *corev1.Node:
		return node(o)
	case *resourceapi.ResourceClaim:
		return claim(o)
	case *resourceapi.ResourceSlice:
		return CompactSlice(o)
	case *resourceapi.DeviceClass:
		c := o.DeepCopy()
		c.ManagedFields = nil
		c.Annotations = nil
		c.Spec.Config = nil
		return c
	case *resourceapi.DeviceTaintRule:
		r := o.DeepCopy()
		r.ManagedFields = nil
		r.Annotations = nil
		return r
	case *corev1.Event:
		if t.EventNamespaces != nil && !t.EventNamespaces(o.InvolvedObject.Namespace) {
			return &corev1.Event{ObjectMeta: meta(o.ObjectMeta)}
		}
		return event(o)
	case *eventsv1.Event:
		if !vocab.RelevantEvent(o.Reason, o.Note) || (t.EventNamespaces != nil && !t.EventNamespaces(o.Regarding.Namespace)) {
			return &eventsv1.Event{ObjectMeta: meta(o.ObjectMeta)}
		}
		e := o.DeepCopy()
		e.ManagedFields = nil
		return e
	}
	return obj
}

func meta(in metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              in.Name,
		Namespace:         intern(in.Namespace),
		UID:               in.UID,
		ResourceVersion:   in.ResourceVersion,
		Generation:        in.Generation,
		CreationTimestamp: in.CreationTimestamp,
		DeletionTimestamp: in.DeletionTimestamp,
	}
}

// pod keeps what the joins read. Pods that name no claim and request no
// extended resource keep only their identity.
func (t Trimmer) pod(in *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: in.TypeMeta, ObjectMeta: meta(in.ObjectMeta)}
	for _, k := range t.PodLabels {
		if v, ok := in.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = intern(v)
		}
	}
	if !relevantPod(in) {
		return out
	}
	out.OwnerReferences = ownerReferences(in.OwnerReferences)
	for i := range out.OwnerReferences {
		// A ReplicaSet's pods name the same owner.
		out.OwnerReferences[i].Name = intern(out.OwnerReferences[i].Name)
	}
	if in.DeletionTimestamp != nil && len(in.Finalizers) > 0 {
		// A pod in deletion held by a finalizer is its owner's to finish,
		// not stuck on its devices (leak pod_stuck_terminating).
		out.Finalizers = slices.Clone(in.Finalizers)
	}
	out.Spec.NodeName = intern(in.Spec.NodeName)
	out.Spec.ResourceClaims = slices.Clone(in.Spec.ResourceClaims)
	for i := range out.Spec.ResourceClaims {
		out.Spec.ResourceClaims[i].Name = intern(out.Spec.ResourceClaims[i].Name)
	}
	out.Spec.SchedulingGroup = in.Spec.SchedulingGroup
	out.Spec.SchedulingGates = in.Spec.SchedulingGates
	out.Spec.Priority = in.Spec.Priority
	out.Spec.PriorityClassName = intern(in.Spec.PriorityClassName)
	out.Spec.Containers = trimContainers(in.Spec.Containers)
	out.Spec.InitContainers = trimContainers(in.Spec.InitContainers)
	st := &in.Status
	out.Status = corev1.PodStatus{
		Phase:                       corev1.PodPhase(intern(string(st.Phase))),
		StartTime:                   st.StartTime,
		ResourceClaimStatuses:       st.ResourceClaimStatuses,
		ExtendedResourceClaimStatus: st.ExtendedResourceClaimStatus,
	}
	for _, c := range st.Conditions {
		switch c.Type {
		case corev1.PodScheduled, corev1.PodReady, corev1.ContainersReady, corev1.PodReadyToStartContainers:
			c.Type = corev1.PodConditionType(intern(string(c.Type)))
			c.Status = corev1.ConditionStatus(intern(string(c.Status)))
			c.Reason = intern(c.Reason)
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	out.Status.ContainerStatuses = trimStatuses(st.ContainerStatuses)
	out.Status.InitContainerStatuses = trimStatuses(st.InitContainerStatuses)
	return out
}

// contextPod cuts a trimmed pod down to what the verdicts about other pods
// read: who holds a device and at which priority (lower-priority holders),
// what device-plugin GPUs it takes on its node, whether it still runs.
func contextPod(p *corev1.Pod) *corev1.Pod {
	p.Labels = nil
	p.OwnerReferences = nil
	p.Spec.SchedulingGates = nil
	p.Spec.SchedulingGroup = nil
	p.Spec.PriorityClassName = ""
	p.Status = corev1.PodStatus{Phase: p.Status.Phase, ExtendedResourceClaimStatus: p.Status.ExtendedResourceClaimStatus}
	return p
}

func relevantPod(p *corev1.Pod) bool {
	if len(p.Spec.ResourceClaims) > 0 || p.Status.ExtendedResourceClaimStatus != nil {
		return true
	}
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for _, c := range cs {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name := range rl {
					if vocab.IsExtendedResource(string(name)) {
						return true
					}
				}
			}
		}
	}
	return false
}

func trimContainers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i, c := range in {
		out[i] = corev1.Container{Name: intern(c.Name), RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Claims: c.Resources.Claims}}
		out[i].Resources.Requests = extendedOnly(c.Resources.Requests)
		out[i].Resources.Limits = extendedOnly(c.Resources.Limits)
	}
	return out
}

func extendedOnly(in corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range in {
		if vocab.IsExtendedResource(string(name)) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q
		}
	}
	return out
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, cs := range in {
		out[i] = corev1.ContainerStatus{
			Name:                 intern(cs.Name),
			Ready:                cs.Ready,
			Started:              cs.Started,
			RestartCount:         cs.RestartCount,
			State:                cs.State,
			LastTerminationState: cs.LastTerminationState,
			// The kubelet's device health (KEP-4680), per allocated device.
			AllocatedResourcesStatus: cs.AllocatedResourcesStatus,
		}
	}
	return out
}

func node(in *corev1.Node) *corev1.Node {
	out := &corev1.Node{TypeMeta: in.TypeMeta, ObjectMeta: meta(in.ObjectMeta)}
	out.Status.Allocatable = extendedOnly(in.Status.Allocatable)
	out.Status.Capacity = extendedOnly(in.Status.Capacity)
	out.Spec.Unschedulable = in.Spec.Unschedulable
	for _, c := range in.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out
}

// claim drops managedFields, opaque configuration and device status data.
// It first takes from managedFields the time the allocation was written
// when status.allocation.allocationTimestamp is absent (API servers before
// the timestamp existed).
func claim(in *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	out := &resourceapi.ResourceClaim{TypeMeta: in.TypeMeta, ObjectMeta: meta(in.ObjectMeta)}
	out.OwnerReferences = ownerReferences(in.OwnerReferences)
	for _, k := range []string{resourceapi.PodResourceClaimAnnotation, resourceapi.ExtendedResourceClaimAnnotation} {
		if v, ok := in.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = make(map[string]string, 1)
			}
			out.Annotations[k] = intern(v)
		}
	}
	spec := in.Spec
	spec.Devices.Config = nil
	out.Spec = *spec.DeepCopy()
	for i := range out.Spec.Devices.Requests {
		r := &out.Spec.Devices.Requests[i]
		r.Name = intern(r.Name)
		if r.Exactly != nil {
			r.Exactly.DeviceClassName = intern(r.Exactly.DeviceClassName)
		}
	}

	st := in.Status
	if st.Allocation != nil {
		a := *st.Allocation
		a.Devices.Config = nil
		if a.AllocationTimestamp == nil {
			a.AllocationTimestamp = allocationWriteTime(in.ManagedFields)
		}
		st.Allocation = &a
	}
	st.Devices = slices.Clone(st.Devices)
	for i := range st.Devices {
		st.Devices[i].Data = nil
		st.Devices[i].NetworkData = nil
	}
	out.Status = *st.DeepCopy()
	if a := out.Status.Allocation; a != nil {
		for i := range a.Devices.Results {
			r := &a.Devices.Results[i]
			r.Request, r.Driver, r.Pool, r.Device = intern(r.Request), intern(r.Driver), intern(r.Pool), intern(r.Device)
		}
		if a.NodeSelector != nil {
			for _, term := range a.NodeSelector.NodeSelectorTerms {
				for _, reqs := range [][]corev1.NodeSelectorRequirement{term.MatchFields, term.MatchExpressions} {
					for i := range reqs {
						reqs[i].Key = intern(reqs[i].Key)
						for j := range reqs[i].Values {
							reqs[i].Values[j] = intern(reqs[i].Values[j])
						}
					}
				}
			}
		}
	}
	for i := range out.Status.ReservedFor {
		r := &out.Status.ReservedFor[i]
		r.APIGroup, r.Resource = intern(r.APIGroup), intern(r.Resource)
	}
	return out
}

// ownerReferences copies the references with their group, version and kind
// interned.
func ownerReferences(in []metav1.OwnerReference) []metav1.OwnerReference {
	if in == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(in))
	for i, r := range in {
		r.APIVersion, r.Kind = intern(r.APIVersion), intern(r.Kind)
		out[i] = *r.DeepCopy()
	}
	return out
}

// intern returns the one copy of a string that many objects repeat
// (namespaces, node and driver names, classes, kinds).
func intern(s string) string { return devattr.Intern(s) }

func allocationWriteTime(fields []metav1.ManagedFieldsEntry) *metav1.Time {
	var newest *metav1.Time
	for _, f := range fields {
		if f.Subresource != "status" || f.FieldsV1 == nil || f.Time == nil {
			continue
		}
		if !strings.Contains(f.FieldsV1.GetRawString(), `"f:allocation"`) {
			continue
		}
		if newest == nil || f.Time.After(newest.Time) {
			newest = f.Time
		}
	}
	return newest
}

// event keeps DRA evidence; other Warning events about pods (probe
// failures, back-offs) keep only their identity.
func event(in *corev1.Event) *corev1.Event {
	if !vocab.RelevantEvent(in.Reason, in.Message) {
		return &corev1.Event{ObjectMeta: meta(in.ObjectMeta)}
	}
	out := &corev1.Event{
		ObjectMeta:          meta(in.ObjectMeta),
		InvolvedObject:      in.InvolvedObject,
		Reason:              in.Reason,
		Message:             in.Message,
		Source:              in.Source,
		FirstTimestamp:      in.FirstTimestamp,
		LastTimestamp:       in.LastTimestamp,
		Count:               in.Count,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Series:              in.Series,
		ReportingController: in.ReportingController,
	}
	out.InvolvedObject.FieldPath = ""
	return out
}
