// Package agent joins what one GPU node knows: the GPUs and their
// processes (internal/node/gpu), what the kubelet prepared (internal/node/podresources),
// which pod a process belongs to (internal/node/procmap), and the node's pods,
// ResourceSlices and claims from the API server. Join is a pure function
// over those inputs; Agent gathers them. No Prometheus import here.
package agent

import "github.com/dra-exporter/dra-exporter/internal/node/gpu"

// Lanes of a GPU.
const (
	LaneDRA          = "dra"
	LaneDRAExtended  = "dra-extended" // nvidia.com/gpu served by the DRA driver through the pod's extended-resource claim
	LaneDevicePlugin = "device-plugin"
	LaneUnallocated  = "unallocated"
)

// draLane reports whether a holder's lane goes through a ResourceClaim.
func draLane(lane string) bool { return lane == LaneDRA || lane == LaneDRAExtended }

// Conflict reasons: a closed set.
const (
	// ReasonNotPrepared: a claim allocated and reserved for a running pod
	// of this node, whose device the kubelet does not report for that pod.
	ReasonNotPrepared = "not_prepared"
	// ReasonPreparedWithoutClaim: the kubelet reports a device prepared for
	// a claim that does not exist or does not allocate that device (the
	// force-delete race of kubernetes #141471).
	ReasonPreparedWithoutClaim = "prepared_without_claim"
	// ReasonBothLanes: a GPU held through the device plugin and DRA at once.
	ReasonBothLanes = "both_lanes"
	// ReasonDriverPreparedWithoutClaim: the driver's kubelet plugin holds a
	// device prepared (its checkpoint) for a claim that no longer exists
	// and that the kubelet does not report: a claim deleted while the
	// plugin was down, never unprepared (dra-driver-nvidia-gpu#1278). The
	// plugin refuses the device to every other claim.
	ReasonDriverPreparedWithoutClaim = "driver_prepared_without_claim"
)

// ConflictReasons lists every conflict reason.
var ConflictReasons = []string{ReasonNotPrepared, ReasonPreparedWithoutClaim, ReasonBothLanes, ReasonDriverPreparedWithoutClaim}

// Lanes lists every lane value of the agent's series.
var Lanes = []string{LaneDRA, LaneDRAExtended, LaneDevicePlugin, LaneUnallocated}

// View is the joined state of the node at one scrape.
type View struct {
	Node string
	// GPUs are the entities the GPU source read, attributed; absent
	// while the source is down.
	GPUs []GPU
	// Inventory lists every GPU and MIG instance known from the source or
	// from the node's ResourceSlices (dra_gpu_info).
	Inventory []InventoryEntry
	// Holders lists every pod holding a GPU, in either lane.
	Holders    []Holder
	PodMemory  []PodMemory
	Violations []Violation
	Conflicts  []Conflict

	Source   string
	SourceUp bool
	// Candidates says which library serves and why the others do not.
	Candidates []gpu.CandidateStatus
	// Groups says which field groups the source watches (with the
	// source up).
	Groups         []gpu.GroupStatus
	PodResourcesUp bool
	// Dynamic says whether the kubelet reports DRA resources: nil when it
	// cannot be told (no pod of the node holds an allocated claim).
	Dynamic *bool
	// ProcVisible says whether the host's processes are visible, so that
	// processes map to pods (hostPID).
	ProcVisible bool
}

// DeviceRef names a ResourceSlice device.
type DeviceRef struct {
	Driver, Pool, Device string
}

// GPU is one entity with its attribution.
type GPU struct {
	gpu.Entity
	DeviceRef
	Lane string
	// Holder is set when exactly one pod (and claim) holds the GPU; with
	// several holders the device-level series carry none of them and
	// dra_gpu_holder_info lists each.
	Holder *Holder
}

// InventoryEntry is one row of dra_gpu_info.
type InventoryEntry struct {
	UUID, ParentUUID, Product string
	DeviceRef
}

// Holder is a pod holding a GPU through a lane (and a claim in the DRA lane).
type Holder struct {
	GPUUUID                string
	Lane                   string
	Namespace, Pod, PodUID string
	Claim                  string
}

// PodMemory is the GPU memory the processes of one pod use on one GPU;
// processes of no pod (or when /proc is not visible) have empty labels.
type PodMemory struct {
	GPUUUID                string
	Namespace, Pod, PodUID string
	Bytes                  float64
}

// Violation is a pod with a process on a GPU it holds in neither lane.
type Violation struct {
	GPUUUID                string
	Namespace, Pod, PodUID string
}

// Conflict is a disagreement between the kubelet and the API server, or a
// GPU in both lanes.
type Conflict struct {
	Namespace, Claim, Pod, PodUID string
	DeviceRef
	GPUUUID string
	Reason  string
}
