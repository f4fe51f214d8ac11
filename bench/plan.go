// Package bench generates synthetic, NVIDIA-shaped DRA clusters and
// benchmarks the exporter over them: index build, snapshot, classifier and
// a full scrape (see README.md). The generator is deterministic: the same
// size gives the same objects, byte for byte, on every run.
package bench

import (
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"

	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// The shape of the NVIDIA DRA driver (internal/testsupport/nvidia): driver
// gpu.nvidia.com, one pool per node named after the node, devices
// gpu-<minor>.
const (
	Driver      = nvidia.Driver
	GPUClass    = nvidia.GPUClass
	MIGClass    = nvidia.MIGClass
	GPUsPerNode = 8

	productH100 = nvidia.H100
	productH200 = nvidia.H200

	namespaces = 50
)

// Selectors of the claims the generator writes.
const (
	// h200Selector pins a claim to the H200 nodes, which the generator fills.
	h200Selector = "device.attributes['gpu.nvidia.com'].productName == '" + productH200 + "'"
	// bigMemorySelector asks for more memory than any published GPU has.
	bigMemorySelector = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0"
)

// Outcome is what the generator intends for one claim and its pod.
type Outcome int

// The outcomes. The first seven split the claims by i%100 (85/5/10 percent);
// the leaks replace a few Running claims.
const (
	// Running: allocated, reserved, pod Running and Ready.
	Running Outcome = iota
	// NotReady: allocated, reserved, containers running, readiness failing.
	NotReady
	// PreparePending: allocated, reserved, bound, containers not started.
	PreparePending
	// PrepareFailed: as PreparePending, with a kubelet
	// FailedPrepareDynamicResources event.
	PrepareFailed
	// CapacityExhausted: pending; the claim selects H200s, all allocated.
	CapacityExhausted
	// SelectorMatchesNothing: pending; the claim asks for 200Gi GPUs.
	SelectorMatchesNothing
	// Unallocated: pending; free GPUs match, the pod does not fit a node.
	Unallocated
	// LeakPodMissing: allocated claim reserved for a pod that is gone.
	LeakPodMissing
	// LeakPodFinished: allocated claim still reserved for a Succeeded pod.
	LeakPodFinished
	// LeakOwnerMissing: allocated, unreserved claim whose owner pod is gone.
	LeakOwnerMissing
	// LeakUnreserved: allocated claim reserved for nobody for an hour; its
	// owner pod has Succeeded.
	LeakUnreserved

	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"running", "not_ready", "prepare_pending", "prepare_failed", "capacity_exhausted",
	"selector_matches_nothing", "unallocated", "leak_pod_missing", "leak_pod_finished",
	"leak_owner_missing", "leak_unreserved",
}

func (o Outcome) String() string { return outcomeNames[o] }

// Allocated reports whether the outcome's claim holds a device.
func (o Outcome) Allocated() bool {
	switch o {
	case CapacityExhausted, SelectorMatchesNothing, Unallocated:
		return false
	}
	return true
}

// HasPod reports whether the outcome's pod exists.
func (o Outcome) HasPod() bool { return o != LeakPodMissing && o != LeakOwnerMissing }

// OutcomeOf returns the outcome of claim i of a cluster of n claims.
func OutcomeOf(i, n int) Outcome {
	if i%100 == 1 && i/100 < leakCount(n) {
		return LeakPodMissing + Outcome((i/100)%4)
	}
	switch b := i % 100; {
	case b < 85:
		return Running
	case b < 87:
		return NotReady
	case b < 89:
		return PreparePending
	case b < 90:
		return PrepareFailed
	case b < 95:
		return CapacityExhausted
	case b < 98:
		return SelectorMatchesNothing
	default:
		return Unallocated
	}
}

// leakCount is how many Running claims become leaks: one per thousand
// claims, at least one of each kind.
func leakCount(n int) int { return min(max(4, n/1000), n/100) }

// Cluster is a generated cluster. Its objects are what the API server would
// return (not trimmed).
type Cluster struct {
	Now             time.Time
	Classes         []*resourceapi.DeviceClass
	Nodes           []*corev1.Node
	Slices          []*resourceapi.ResourceSlice
	Claims          []*resourceapi.ResourceClaim
	Pods            []*corev1.Pod
	Events          []*corev1.Event   // kubelet events
	SchedulerEvents []*eventsv1.Event // events.k8s.io/v1, as the scheduler writes them

	// Outcomes counts the claims per intended outcome.
	Outcomes [numOutcomes]int
	// AllocatedDevices is the number of devices claims hold.
	AllocatedDevices int
	// H200Nodes are the first nodes; all their GPUs are allocated.
	H200Nodes int
}

// Objects returns every object in the order an exporter's informers
// typically deliver them: classes, nodes, slices, claims, pods, events.
func (c *Cluster) Objects() []any {
	out := make([]any, 0, len(c.Classes)+len(c.Nodes)+len(c.Slices)+len(c.Claims)+len(c.Pods)+len(c.Events)+len(c.SchedulerEvents))
	for _, o := range c.Classes {
		out = append(out, o)
	}
	for _, o := range c.Nodes {
		out = append(out, o)
	}
	for _, o := range c.Slices {
		out = append(out, o)
	}
	for _, o := range c.Claims {
		out = append(out, o)
	}
	for _, o := range c.Pods {
		out = append(out, o)
	}
	for _, o := range c.Events {
		out = append(out, o)
	}
	for _, o := range c.SchedulerEvents {
		out = append(out, o)
	}
	return out
}

// Now is the moment every generated cluster describes.
var Now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Generate returns a cluster of n claims (n pods using
// ResourceClaimTemplate-generated claims, less the pods of two leak kinds):
// about 85% allocated, reserved and Running/Ready; 5% bound but not ready;
// 10% pending and unallocated. It has enough 8-GPU nodes for the allocated
// claims plus 5% spare; the first quarter are H200 nodes, all taken.
func Generate(n int) *Cluster {
	c := &Cluster{Now: Now}
	for i := range n {
		o := OutcomeOf(i, n)
		c.Outcomes[o]++
		if o.Allocated() {
			c.AllocatedDevices++
		}
	}
	full := (c.AllocatedDevices + GPUsPerNode - 1) / GPUsPerNode
	nodes := full + max(1, full/20)
	c.H200Nodes = full / 4

	g := &gen{c: c, now: Now, nodes: nodes}
	c.Classes = []*resourceapi.DeviceClass{
		deviceClass(0, GPUClass, nvidia.GPUClassSelector, nvidia.ExtendedResource),
		deviceClass(1, MIGClass, nvidia.MIGClassSelector, ""),
	}
	c.Nodes = make([]*corev1.Node, 0, nodes)
	c.Slices = make([]*resourceapi.ResourceSlice, 0, nodes)
	for k := range nodes {
		c.Nodes = append(c.Nodes, g.node(k))
		c.Slices = append(c.Slices, g.slice(k))
	}
	c.Claims = make([]*resourceapi.ResourceClaim, 0, n)
	c.Pods = make([]*corev1.Pod, 0, n)
	slot := 0 // the next free GPU, counted over nodes in order
	for i := range n {
		o := OutcomeOf(i, n)
		node, gpu := "", -1
		if o.Allocated() {
			node, gpu = nodeName(slot/GPUsPerNode), slot%GPUsPerNode
			slot++
		}
		g.workload(i, o, node, gpu)
	}
	return c
}
