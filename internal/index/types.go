// Package index joins the DRA objects of a cluster: claims to the devices they
// were allocated, devices to the ResourceSlice that publishes them (node,
// attributes, capacity), claims to the pods they are reserved for, and device
// classes to the devices their CEL selectors select. It is built
// incrementally from informer events (or once from a file of objects) and read
// through immutable snapshots. It does not import Prometheus.
package index

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/devattr"
	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// Key names a namespaced object.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

// DeviceKey names a device the way an allocation result does.
type DeviceKey struct {
	Driver string
	Pool   string
	Device string
}

func (k DeviceKey) String() string { return k.Driver + "/" + k.Pool + "/" + k.Device }

// PoolKey returns the key of the device's pool.
func (k DeviceKey) PoolKey() PoolKey { return PoolKey{Driver: k.Driver, Pool: k.Pool} }

// Device is one device of the newest generation of its pool.
type Device struct {
	Key   DeviceKey
	Slice string
	// Node is the node the device is local to; empty for network-attached
	// devices (slices with allNodes or a node selector).
	Node       string
	GPUUUID    string
	Attributes devattr.Attributes
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	Counters   []resourceapi.DeviceCounterConsumption
	Taints     []resourceapi.DeviceTaint
	// Shareable devices (allowMultipleAllocations) may be allocated to
	// several claims at once.
	Shareable bool
	// Classes are the names of the device classes whose selectors select
	// this device, sorted.
	Classes []string
	// ClassErrors maps a class name to the error its selectors gave on this
	// device; such a device is not selected by that class.
	ClassErrors map[string]string

	slice *objects.Slice
}

// Attribute returns the string form of an attribute, looked up by its bare
// name in the driver's domain or by its fully qualified name.
func (d *Device) Attribute(name string) (string, bool) {
	return attributeString(d.Attributes, d.Key.Driver, name)
}

func attributeString(attrs devattr.Attributes, driver, name string) (string, bool) {
	// A bare name is in the driver's domain; so is a name qualified with
	// the driver's own domain, which drivers may publish either way.
	a, ok := attrs.Get(resourceapi.QualifiedName(name))
	if !ok && !strings.Contains(name, "/") {
		a, ok = attrs.Get(resourceapi.QualifiedName(driver + "/" + name))
	}
	if bare, found := strings.CutPrefix(name, driver+"/"); !ok && found {
		a, ok = attrs.Get(resourceapi.QualifiedName(bare))
	}
	if !ok {
		return "", false
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue, true
	case a.VersionValue != nil:
		return *a.VersionValue, true
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10), true
	case a.BoolValue != nil:
		if *a.BoolValue {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

// Class is a DeviceClass.
type Class struct {
	Name      string
	Selectors []resourceapi.DeviceSelector
	// ExtendedResource is the extended resource name that the class
	// serves (spec.extendedResourceName), empty when unset.
	ExtendedResource string
	// CompileError is set when a selector does not compile.
	CompileError string
	// Created is the class's creation time: of two classes naming the same
	// extended resource, the scheduler uses the newer.
	Created time.Time
}

// Claim is a ResourceClaim with its joins precomputed.
type Claim struct {
	Obj *resourceapi.ResourceClaim
	Key Key
	UID types.UID
	// OwnerPod is the controlling owner when it is a Pod (claims generated
	// from a template or for an extended resource).
	OwnerPod *Owner
	// OwnerGroup is the controlling owner when it is a PodGroup
	// (scheduling.k8s.io): a claim generated for a whole group of pods.
	OwnerGroup *Owner
	// Extended marks a claim the scheduler created for an extended resource.
	Extended bool
	// Requests are the request names ("gpu", or "gpu/sub" for a
	// subrequest) with their device class, sorted by name (a slice: a map
	// per claim was 300 bytes of each claim's record).
	Requests []RequestClass
	// Results are the allocated devices, in allocation order.
	Results []Result
	// Node is the node the allocation is bound to, from its node selector;
	// empty when unallocated or not node-local.
	Node string
	// AllocatedAt is status.allocation.allocationTimestamp, or when
	// absent the time the status manager last wrote the allocation.
	AllocatedAt time.Time
}

// RequestClass is a request of a claim and the device class it asks for.
type RequestClass struct {
	Request string
	Class   string
}

// ClassOf returns the device class of a request or subrequest, "" when the
// claim has no such request.
func (c *Claim) ClassOf(request string) string {
	i, ok := slices.BinarySearchFunc(c.Requests, request, func(r RequestClass, name string) int {
		return strings.Compare(r.Request, name)
	})
	if !ok {
		return ""
	}
	return c.Requests[i].Class
}

// Owner is a controlling owner reference (dra.Owner).
type Owner = dra.Owner

// Result is one allocated device of a claim.
type Result struct {
	Request string
	Class   string
	Device  DeviceKey
	// AdminAccess allocations do not take the device from others.
	AdminAccess bool
	// Shared is set when the result carries a shareID: one of several
	// allocations of a device with allowMultipleAllocations. The scheduler
	// treats a result without one as taking the whole device.
	Shared bool
	// ConsumedCapacity is what a shared allocation takes of the device's
	// capacity (status.allocation.devices.results[].consumedCapacity).
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity
}

// Allocated reports whether the claim has an allocation.
func (c *Claim) Allocated() bool { return c.Obj.Status.Allocation != nil }

// ReservedFor reports whether the claim is reserved for the pod UID.
func (c *Claim) ReservedFor(uid types.UID) bool { return dra.ReservedFor(c.Obj, uid) }

// ReservedForPod reports whether the claim is reserved for the pod, itself
// or through the PodGroup it belongs to (dra.ReservedForPod).
func (c *Claim) ReservedForPod(p *Pod) bool { return dra.ReservedForPod(c.Obj, p.Obj) }

// Classes returns the distinct device classes of the claim's requests, sorted.
func (c *Claim) Classes() []string {
	out := make([]string, 0, len(c.Requests))
	for _, r := range c.Requests {
		if r.Class != "" && !slices.Contains(out, r.Class) {
			out = append(out, r.Class)
		}
	}
	slices.Sort(out)
	return out
}

// AllocatedClasses returns the distinct classes of the allocated devices
// (for firstAvailable requests, the subrequest that was chosen), sorted;
// the request classes when nothing is allocated.
func (c *Claim) AllocatedClasses() []string {
	if len(c.Results) == 0 {
		return c.Classes()
	}
	out := make([]string, 0, 1)
	for _, r := range c.Results {
		if r.Class != "" && !slices.Contains(out, r.Class) {
			out = append(out, r.Class)
		}
	}
	slices.Sort(out)
	return out
}

// Pod is a pod that uses DRA or requests an extended resource.
type Pod struct {
	Obj *corev1.Pod
	Key Key
	UID types.UID
	// ExtendedRequests are the pod's effective requests of extended
	// resources (sum over containers, or the largest init container).
	ExtendedRequests map[string]int64

	// ready is the Ready condition, read once: every scrape asks it of
	// every pod.
	ready bool
}

// Priority is spec.priority (set from the PriorityClass at admission; 0
// when none).
func (p *Pod) Priority() int32 {
	if p.Obj.Spec.Priority != nil {
		return *p.Obj.Spec.Priority
	}
	return 0
}

// Group returns the name of the PodGroup the pod belongs to, "" when none.
func (p *Pod) Group() string { return dra.Group(p.Obj) }

// Terminal reports whether the pod has finished.
func (p *Pod) Terminal() bool {
	return p.Obj.Status.Phase == corev1.PodSucceeded || p.Obj.Status.Phase == corev1.PodFailed
}

// Ready reports whether the pod's Ready condition is true.
func (p *Pod) Ready() bool { return p.ready }

// UsesClaims reports whether the pod names resource claims in its spec.
func (p *Pod) UsesClaims() bool { return len(p.Obj.Spec.ResourceClaims) > 0 }

// Started reports whether any container of the pod has run, which means
// its resources were prepared on the node.
func (p *Pod) Started() bool {
	for _, statuses := range [][]corev1.ContainerStatus{p.Obj.Status.InitContainerStatuses, p.Obj.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
				return true
			}
		}
	}
	return false
}

// Sandbox says whether the node has prepared the pod's devices now, and
// since when. The kubelet prepares DRA resources before it creates the pod
// sandbox (and again when it recreates a lost sandbox, after a node reboot
// or a kubelet restart), so the condition PodReadyToStartContainers says it:
// True, prepared; False, not (any more). Without the condition (older
// kubelets, hand-made objects), a container that has run, or one waiting
// for a reason that only comes after the sandbox exists (an image pull, a
// missing ConfigMap or Secret), shows it; the time is then zero.
func (p *Pod) Sandbox() (state SandboxState, since time.Time) {
	for _, c := range p.Obj.Status.Conditions {
		if c.Type != corev1.PodReadyToStartContainers {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			return SandboxReady, c.LastTransitionTime.Time
		case corev1.ConditionFalse:
			return SandboxNotReady, c.LastTransitionTime.Time
		}
	}
	if p.Started() || p.WaitsPastPrepare() {
		return SandboxReady, time.Time{}
	}
	return SandboxUnknown, time.Time{}
}

// WaitsPastPrepare reports whether a container waits for a reason that
// only comes after the kubelet prepared the pod's devices in its current
// sync (an image pull, a missing ConfigMap or Secret): the freshest proof
// that preparation passed, newer than any failure event.
func (p *Pod) WaitsPastPrepare() bool {
	for _, statuses := range [][]corev1.ContainerStatus{p.Obj.Status.InitContainerStatuses, p.Obj.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if cs.State.Waiting == nil {
				continue
			}
			if vocab.WaitsPastPrepare(cs.State.Waiting.Reason) {
				return true
			}
		}
	}
	return false
}

// SandboxState is what a pod's status says of its sandbox.
type SandboxState int

// Sandbox states.
const (
	SandboxUnknown SandboxState = iota // nothing says it exists yet
	SandboxReady
	SandboxNotReady // PodReadyToStartContainers=False
)

// SchedulingGates returns the gates that keep the pod from the scheduler
// (spec.schedulingGates), nil when none.
func (p *Pod) SchedulingGates() []string {
	if p.Obj.Spec.NodeName != "" {
		return nil
	}
	// Only the spec counts: the API server sets PodScheduled=False
	// SchedulingGated at creation and leaves it when the gates go, until
	// the scheduler tries the pod.
	var out []string
	for _, g := range p.Obj.Spec.SchedulingGates {
		out = append(out, g.Name)
	}
	return out
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// Node is a node's extended-resource view.
type Node struct {
	Name string
	// Unusable says why no new pod lands on the node ("" when it can):
	// cordoned, or its Ready condition is False or Unknown.
	Unusable string
	// NotReady is set when the node's Ready condition is False or Unknown
	// ("Ready=Unknown (NodeStatusUnknown)"): its kubelet is not running pods.
	NotReady string
	// Allocatable holds the node's allocatable extended resources (the
	// healthy devices of a device plugin), Capacity all of them.
	Allocatable map[string]int64
	Capacity    map[string]int64
}

// same reports whether two node records say the same (o may be nil).
func (n *Node) same(o *Node) bool {
	return o != nil && n.Name == o.Name && n.Unusable == o.Unusable && n.NotReady == o.NotReady &&
		maps.Equal(n.Allocatable, o.Allocatable) && maps.Equal(n.Capacity, o.Capacity)
}

// Event is the newest Warning event of one reason about one pod.
type Event struct {
	Key       Key // the Event object
	Pod       Key
	PodUID    types.UID
	Reason    string
	Message   string
	Reporter  string
	Count     int32
	Timestamp time.Time
	// AboutPodWarning is false for Normal events and events about other
	// objects; the informer's field selector drops those, files may not.
	AboutPodWarning bool
}
