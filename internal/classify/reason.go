// Package classify walks the DRA decision tree for a pod over an index
// snapshot: it names the first failing link between a pod and its GPU and
// the layer (controller, scheduler, node, application) that owns it. It also
// finds leaked reservations. Both are pure functions of the snapshot.
package classify

// Layer owns a failure.
type Layer string

// The layers, in the order a pod meets them.
const (
	LayerController  Layer = "controller"
	LayerScheduler   Layer = "scheduler"
	LayerNode        Layer = "node"
	LayerApplication Layer = "application"
)

// Reason is a failing link of the decision tree. The set is closed: the
// eleven reasons of the design; node_not_ready, which keeps the pods of a
// dead node (marked not Ready by the node lifecycle controller) from
// reading as an application failure; binding_failed, a device's binding
// failure condition (KEP-5007) while the scheduler waits to bind the pod;
// and cdi_spec_missing, a prepared claim whose devices the container
// runtime cannot resolve (kubernetes#141433), which no retry of the
// kubelet's mends.
type Reason string

// The reasons, in tree order: when several links fail, the earliest wins.
const (
	ClaimNotCreated        Reason = "claim_not_created"
	ClaimNotFound          Reason = "claim_not_found"
	DeviceClassNotFound    Reason = "device_class_not_found"
	NoDevicesForClass      Reason = "no_devices_for_class"
	SelectorMatchesNothing Reason = "selector_matches_nothing"
	CapacityExhausted      Reason = "capacity_exhausted"
	Unallocated            Reason = "unallocated"
	NotReserved            Reason = "not_reserved"
	BindingFailed          Reason = "binding_failed"
	NodeNotReady           Reason = "node_not_ready"
	NodePrepareFailed      Reason = "node_prepare_failed"
	CDISpecMissing         Reason = "cdi_spec_missing"
	NodePreparePending     Reason = "node_prepare_pending"
	NotReady               Reason = "not_ready"
)

// Reasons lists every reason in tree order.
var Reasons = []Reason{
	ClaimNotCreated, ClaimNotFound, DeviceClassNotFound, NoDevicesForClass,
	SelectorMatchesNothing, CapacityExhausted, Unallocated, NotReserved, BindingFailed,
	NodeNotReady, NodePrepareFailed, CDISpecMissing, NodePreparePending, NotReady,
}

var reasonLayer = map[Reason]Layer{
	ClaimNotCreated:        LayerController,
	ClaimNotFound:          LayerController,
	DeviceClassNotFound:    LayerScheduler,
	NoDevicesForClass:      LayerScheduler,
	SelectorMatchesNothing: LayerScheduler,
	CapacityExhausted:      LayerScheduler,
	Unallocated:            LayerScheduler,
	NotReserved:            LayerScheduler,
	BindingFailed:          LayerScheduler,
	NodeNotReady:           LayerNode,
	NodePrepareFailed:      LayerNode,
	CDISpecMissing:         LayerNode,
	NodePreparePending:     LayerNode,
	NotReady:               LayerApplication,
}

var reasonMeaning = map[Reason]string{
	ClaimNotCreated:        "the claim for a ResourceClaimTemplate was not generated (resourceclaim controller, admission webhooks)",
	ClaimNotFound:          "the pod names a ResourceClaim that does not exist (or is being deleted)",
	DeviceClassNotFound:    "a request names a DeviceClass that does not exist",
	NoDevicesForClass:      "no ResourceSlice device matches the class selectors (is the driver publishing?)",
	SelectorMatchesNothing: "the claim's own CEL selectors (or capacity requests larger than any device) exclude every device of the class",
	CapacityExhausted:      "matching devices exist, but no node has enough of them free for the request (held, their shared counters drawn by sibling partitions, or too little capacity left on shared devices)",
	Unallocated:            "the claim is still unallocated for another reason (constraints, node affinity, taints, node resources)",
	NotReserved:            "the claim is allocated, but status.reservedFor does not name this pod",
	BindingFailed:          "a device's binding failure condition is True: its controller could not make it ready for the pod (the scheduler releases the allocation and retries)",
	NodeNotReady:           "the pod is bound to a node whose Ready condition is False or Unknown (kubelet down, node unreachable)",
	NodePrepareFailed:      "the pod is bound and the kubelet reported a DRA prepare failure",
	CDISpecMissing:         "the devices are prepared, but no CDI spec the container runtime reads defines the names the claim's driver returned (unresolvable CDI devices): most often the driver's spec file is gone while the claim stays prepared, as after a reboot cleared /var/run/cdi (kubernetes#141433); the kubelet retries the container, never the prepare",
	NodePreparePending:     "the pod is bound and its containers have not started yet (devices being prepared, sandbox or image pending)",
	NotReady:               "containers run, but the pod is not Ready (readiness failing), or a container is stopped by its own image or configuration",
}

// Layer returns the layer that owns the reason.
func (r Reason) Layer() Layer { return reasonLayer[r] }

// Meaning explains the reason in one sentence.
func (r Reason) Meaning() string { return reasonMeaning[r] }

func (r Reason) rank() int {
	for i, x := range Reasons {
		if x == r {
			return i
		}
	}
	return len(Reasons)
}

// Layers lists the layers in order.
var Layers = []Layer{LayerController, LayerScheduler, LayerNode, LayerApplication}
