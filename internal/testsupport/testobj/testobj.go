// Package testobj builds NVIDIA-shaped Kubernetes objects for the tests of
// the index, classifier and collectors: driver gpu.nvidia.com, pool = node
// name, devices gpu-N, classes gpu.nvidia.com and mig.nvidia.com.
package testobj

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
)

// NVIDIA-shaped test objects: driver gpu.nvidia.com, pool = node name,
// devices gpu-N, classes gpu.nvidia.com and mig.nvidia.com.
const (
	Driver       = nvidia.Driver
	GPUClassName = nvidia.GPUClass
	MIGClassName = nvidia.MIGClass
	GPUResource  = nvidia.ExtendedResource
	NS           = "prod"
)

var T0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func Ptr[T any](v T) *T { return &v }

func CEL(exprs ...string) []resourceapi.DeviceSelector { return nvidia.CEL(exprs...) }

func DeviceClass(name string, exprs ...string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("class-" + name)},
		Spec:       resourceapi.DeviceClassSpec{Selectors: CEL(exprs...)},
	}
}

// GPUClass and MIGClass are the driver's classes (nvidia.Classes) with a UID.
func GPUClass() *resourceapi.DeviceClass { return withClassUID(nvidia.Classes()[0]) }

func MIGClass() *resourceapi.DeviceClass { return withClassUID(nvidia.Classes()[1]) }

func withClassUID(c *resourceapi.DeviceClass) *resourceapi.DeviceClass {
	c.TypeMeta = metav1.TypeMeta{}
	c.UID = types.UID("class-" + c.Name)
	return c
}

func StrAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}

// GPUDevice is an H100 as the driver publishes it.
func GPUDevice(name, uuid string) resourceapi.Device {
	return nvidia.GPUDevice(name, uuid, nvidia.H100)
}

// MIGDevice is a MIG instance of an A100.
func MIGDevice(name, uuid, parent, profile, memory string) resourceapi.Device {
	return nvidia.MIGDevice(name, uuid, parent, profile, nvidia.A100, memory)
}

// consumes makes the device consume memory from a shared counter set.
func Consumes(d resourceapi.Device, set, memory string) resourceapi.Device {
	d.ConsumesCounters = append(d.ConsumesCounters, resourceapi.DeviceCounterConsumption{
		CounterSet: set,
		Counters:   map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(memory)}},
	})
	return d
}

func Slice(name, node string, gen int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	sl := nvidia.Slice(name, node, gen, devices...)
	sl.TypeMeta = metav1.TypeMeta{}
	sl.UID = types.UID("slice-" + name)
	return sl
}

func Request(name, class string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
	}}
}

func Claim(name, uid string, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	if len(requests) == 0 {
		requests = []resourceapi.DeviceRequest{Request("gpu", GPUClassName)}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(T0)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
}

func CreatedAt(c *resourceapi.ResourceClaim, at time.Time) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.CreationTimestamp = metav1.NewTime(at)
	return c
}

// ownedBy makes c the claim the resourceclaim controller generated for the
// pod claim entry podClaim of p.
func OwnedBy(c *resourceapi.ResourceClaim, p *corev1.Pod, podClaim string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID, Controller: Ptr(true)}}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if podClaim != "" {
		c.Annotations[resourceapi.PodResourceClaimAnnotation] = podClaim
	}
	return c
}

// extendedFor makes c the claim the scheduler created for p's extended
// resource requests.
func ExtendedFor(c *resourceapi.ResourceClaim, p *corev1.Pod) *resourceapi.ResourceClaim {
	c = OwnedBy(c, p, "")
	c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] = "true"
	return c
}

func Result(request, pool, device string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: Driver, Pool: pool, Device: device}
}

func NodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
}

// allocated returns c allocated on node (empty: no node selector) at the
// given time (zero: no allocationTimestamp).
func Allocated(c *resourceapi.ResourceClaim, node string, at time.Time, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	a := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	if node != "" {
		a.NodeSelector = NodeSelector(node)
	}
	if !at.IsZero() {
		a.AllocationTimestamp = Ptr(metav1.NewTime(at))
	}
	c.Status.Allocation = a
	return c
}

func Deallocated(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.Allocation = nil
	c.Status.ReservedFor = nil
	return c
}

// reservedFor replaces the claim's reservations with the pods.
func ReservedFor(c *resourceapi.ResourceClaim, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.ReservedFor = nil
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

func Pod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(T0)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func PodCreatedAt(p *corev1.Pod, at time.Time) *corev1.Pod {
	p = p.DeepCopy()
	p.CreationTimestamp = metav1.NewTime(at)
	return p
}

func WithTemplateClaim(p *corev1.Pod, name, template string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: Ptr(template)})
	return p
}

func WithNamedClaim(p *corev1.Pod, name, claimName string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: Ptr(claimName)})
	return p
}

func WithClaimStatus(p *corev1.Pod, name, claimName string) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: name, ResourceClaimName: Ptr(claimName)})
	return p
}

func WithExtendedClaimStatus(p *corev1.Pod, claimName string) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{
		ResourceClaimName: claimName,
		RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: GPUResource, RequestName: "container-0-request-0"}},
	}
	return p
}

// withLimit makes the pod's container ask for n of an extended resource.
func WithLimit(p *corev1.Pod, name string, n int64) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(name): *resource.NewQuantity(n, resource.DecimalSI)}
	return p
}

func Bound(p *corev1.Pod, node string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.NodeName = node
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	return p
}

func Running(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	return p
}

func Ready(p *corev1.Pod) *corev1.Pod {
	p = Running(p)
	p.Status.ContainerStatuses[0].Ready = true
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	return p
}

func Finished(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	p = p.DeepCopy()
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	var conds []corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady {
			conds = append(conds, c)
		}
	}
	p.Status.Conditions = conds
	return p
}

func Node(name string, gpus int64) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name)}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	if gpus > 0 {
		n.Status.Allocatable[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return n
}

// NotReadyNode is a GPU-less node whose kubelet stopped reporting: the node
// lifecycle controller set Ready=Unknown.
func NotReadyNode(name string) *corev1.Node {
	n := Node(name, 0)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}
	return n
}

func Event(name string, p *corev1.Pod, reason, message string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: name, UID: types.UID("event-" + name)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		LastTimestamp:  metav1.NewTime(at),
		Count:          1,
	}
}

// build adds the objects as an initial list (not live).
func Build(t testing.TB, cfg index.Config, objs ...any) *index.Index {
	t.Helper()
	ix := index.New(cfg)
	for _, o := range objs {
		Upsert(t, ix, o, false)
	}
	return ix
}

func Upsert(t testing.TB, ix *index.Index, obj any, live bool) {
	t.Helper()
	if err := ix.Upsert(obj, live); err != nil {
		t.Fatalf("Upsert(%T): %v", obj, err)
	}
}

func Del(t testing.TB, ix *index.Index, obj any) {
	t.Helper()
	if err := ix.Delete(obj); err != nil {
		t.Fatalf("Delete(%T): %v", obj, err)
	}
}

func DevKey(pool, device string) index.DeviceKey {
	return index.DeviceKey{Driver: Driver, Pool: pool, Device: device}
}

// deviceNames returns "pool/device" of every device, sorted.
func DeviceNames(s *index.Snapshot) []string {
	var out []string
	for _, d := range s.Devices {
		out = append(out, d.Key.Pool+"/"+d.Key.Device)
	}
	slices.Sort(out)
	return out
}

func ClassDeviceNames(s *index.Snapshot, class string) []string {
	var out []string
	for _, d := range s.ClassDevices(class) {
		out = append(out, d.Key.Pool+"/"+d.Key.Device)
	}
	slices.Sort(out)
	return out
}
