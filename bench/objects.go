package bench

// The object builders: what the API server would return for each part of the
// plan (plan.go), NVIDIA-shaped through internal/testsupport/nvidia.

import (
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"

	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type gen struct {
	c     *Cluster
	now   time.Time
	nodes int
	// labels are the pod labels of the current ReplicaSet, labelsRS.
	labels   map[string]string
	labelsRS string
}

// uid returns a deterministic UUID-shaped string for object i of a kind.
func uid(kind uint64, i int) types.UID {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], splitmix(kind<<40|uint64(i)))
	binary.BigEndian.PutUint64(raw[8:], splitmix(^(kind<<40 | uint64(i))))
	var out [36]byte
	hex.Encode(out[0:8], raw[0:4])
	hex.Encode(out[9:13], raw[4:6])
	hex.Encode(out[14:18], raw[6:8])
	hex.Encode(out[19:23], raw[8:10])
	hex.Encode(out[24:], raw[10:])
	out[8], out[13], out[18], out[23] = '-', '-', '-', '-'
	return types.UID(out[:])
}

// suffix returns a 5-character generateName suffix.
func suffix(kind uint64, i int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	x := splitmix(kind<<40 | uint64(i) | 1<<63)
	var b [5]byte
	for k := range b {
		b[k] = alphabet[x%uint64(len(alphabet))]
		x /= uint64(len(alphabet))
	}
	return string(b[:])
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

const (
	kindNode uint64 = iota + 1
	kindSlice
	kindGPU
	kindPod
	kindClaim
	kindReplicaSet
	kindEvent
)

var namespaceNames = func() (out [namespaces]string) {
	for k := range out {
		out[k] = fmt.Sprintf("team-%02d", k)
	}
	return out
}()

func nodeName(k int) string { return fmt.Sprintf("gpu-node-%05d", k) }

func ptr[T any](v T) *T { return &v }

func ts(t time.Time) metav1.Time { return metav1.NewTime(t) }

func deviceClass(k int, name, selector, extended string) *resourceapi.DeviceClass {
	dc := &resourceapi.DeviceClass{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uid(0, k), ResourceVersion: "100", Generation: 1,
			CreationTimestamp: ts(Now.Add(-30 * 24 * time.Hour)),
			Labels:            map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations:       map[string]string{"meta.helm.sh/release-name": "nvidia-dra-driver-gpu"},
		},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
		},
	}
	if extended != "" {
		dc.Spec.ExtendedResourceName = ptr(extended)
	}
	return dc
}

func (g *gen) product(k int) string {
	if k < g.c.H200Nodes {
		return productH200
	}
	return productH100
}

func (g *gen) node(k int) *corev1.Node {
	name := nodeName(k)
	q := resource.MustParse
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uid(kindNode, k), ResourceVersion: strconv.Itoa(1000 + k),
			CreationTimestamp: ts(g.now.Add(-7 * 24 * time.Hour)),
			Labels: map[string]string{
				corev1.LabelHostname:       name,
				corev1.LabelOSStable:       "linux",
				corev1.LabelArchStable:     "amd64",
				"nvidia.com/gpu.present":   "true",
				"nvidia.com/gpu.product":   g.product(k),
				"node.kubernetes.io/group": "gpu",
			},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU: q("192"), corev1.ResourceMemory: q("2Ti"),
				corev1.ResourcePods: q("110"), corev1.ResourceEphemeralStorage: q("3Ti"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: q("190"), corev1.ResourceMemory: q("2000Gi"),
				corev1.ResourcePods: q("110"), corev1.ResourceEphemeralStorage: q("2900Gi"),
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
			},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.2.0"},
		},
	}
}

func (g *gen) slice(k int) *resourceapi.ResourceSlice {
	name := nodeName(k)
	product := g.product(k)
	devices := make([]resourceapi.Device, GPUsPerNode)
	for m := range devices {
		devices[m] = nvidia.WithMinor(nvidia.GPUDevice(nvidia.DeviceName(m), "GPU-"+string(uid(kindGPU, k*GPUsPerNode+m)), product), m)
	}
	s := nvidia.Slice(name+"-gpu.nvidia.com-"+suffix(kindSlice, k), name, 1, devices...)
	s.ObjectMeta = metav1.ObjectMeta{
		Name: s.Name, GenerateName: name + "-gpu.nvidia.com-",
		UID: uid(kindSlice, k), ResourceVersion: strconv.Itoa(2000 + k),
		CreationTimestamp: ts(g.now.Add(-7 * 24 * time.Hour)),
		OwnerReferences:   []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: uid(kindNode, k), Controller: ptr(true)}},
	}
	return s
}

// workload writes claim i and its pod (and the pod's events).
func (g *gen) workload(i int, o Outcome, node string, gpu int) {
	deployment := i / 10 // ten replicas per Deployment, in one namespace
	ns := namespaceNames[splitmix(uint64(deployment))%namespaces]
	rs := fmt.Sprintf("infer-%05d-%s", deployment, suffix(kindReplicaSet, deployment))
	pod := rs + "-" + suffix(kindPod, i)
	podUID := uid(kindPod, i)
	claim := pod + "-gpu-" + suffix(kindClaim, i)
	created := g.now.Add(-time.Duration(2*3600+i%3600) * time.Second)
	switch o {
	case NotReady, PreparePending, PrepareFailed:
		created = g.now.Add(-15 * time.Minute)
	case CapacityExhausted, SelectorMatchesNothing, Unallocated:
		created = g.now.Add(-10 * time.Minute)
	}
	allocatedAt := created.Add(time.Second)

	var selectors []resourceapi.DeviceSelector
	switch {
	case o == CapacityExhausted || (node != "" && g.product(slotNode(node)) == productH200):
		selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: h200Selector}}}
	case o == SelectorMatchesNothing:
		selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: bigMemorySelector}}}
	}
	rc := &resourceapi.ResourceClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: claim, Namespace: ns, GenerateName: pod + "-gpu-", UID: uid(kindClaim, i),
			ResourceVersion: strconv.Itoa(100000 + 2*i), CreationTimestamp: ts(created),
			Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: "gpu"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod, UID: podUID, Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
			Finalizers: []string{"resource.kubernetes.io/delete-protection"},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: GPUClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: selectors,
			},
		}}}},
	}
	if o.Allocated() {
		rc.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: Driver, Pool: node, Device: "gpu-" + strconv.Itoa(gpu),
			}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
			AllocationTimestamp: ptr(ts(allocatedAt)),
		}
		switch o {
		case LeakOwnerMissing, LeakUnreserved:
			// Reserved for nobody since the pod ended, long past the grace.
			rc.Status.Allocation.AllocationTimestamp = ptr(ts(g.now.Add(-time.Hour)))
		default:
			rc.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: podUID}}
		}
	}
	g.c.Claims = append(g.c.Claims, rc)

	if !o.HasPod() {
		return
	}
	p := g.pod(i, o, ns, rs, pod, podUID, claim, node, created)
	g.c.Pods = append(g.c.Pods, p)
	g.events(i, o, p)
}

// slotNode returns the index of a generated node from its name.
func slotNode(name string) int {
	k, _ := strconv.Atoi(name[len("gpu-node-"):])
	return k
}

// Parts of a pod spec the trimmer drops, shared by every generated pod
// (read-only) to keep generation fast. What the trimmer keeps is allocated
// per pod, so that heap figures match a real cluster's.
var (
	podImage     = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
	podArgs      = []string{"--port=8000", "--tensor-parallel-size=1"}
	podPorts     = []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}}
	podEnv       = []corev1.EnvVar{{Name: "NIM_CACHE_PATH", Value: "/opt/nim/.cache"}, {Name: "OMP_NUM_THREADS", Value: "8"}}
	podRequests  = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi")}
	podLimits    = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}
	podProbe     = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/v1/health/ready", Port: intstr.FromInt32(8000)}}}
	podTolerates = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	podVolumes   = []corev1.Volume{{Name: "nim-cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	podMounts    = []corev1.VolumeMount{{Name: "nim-cache", MountPath: "/opt/nim/.cache"}}
)

func (g *gen) pod(i int, o Outcome, ns, rs, name string, podUID types.UID, claim, node string, created time.Time) *corev1.Pod {
	if g.labelsRS != rs {
		g.labelsRS = rs
		g.labels = map[string]string{"app.kubernetes.io/name": rs[:len("infer-00000")], "pod-template-hash": rs[len("infer-00000-"):]}
	}
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, GenerateName: rs + "-", UID: podUID,
			ResourceVersion: strconv.Itoa(100001 + 2*i), CreationTimestamp: ts(created),
			Labels: g.labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: uid(kindReplicaSet, i/10), Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "server", Image: podImage, Args: podArgs, Ports: podPorts, Env: podEnv, VolumeMounts: podMounts,
				Resources: corev1.ResourceRequirements{
					Requests: podRequests, Limits: podLimits,
					Claims: []corev1.ResourceClaim{{Name: "gpu"}},
				},
				ReadinessProbe: podProbe,
			}},
			Volumes:            podVolumes,
			ResourceClaims:     []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("gpu-1")}},
			RestartPolicy:      corev1.RestartPolicyAlways,
			ServiceAccountName: "default",
			SchedulerName:      corev1.DefaultSchedulerName,
			Tolerations:        podTolerates,
		},
		Status: corev1.PodStatus{
			QOSClass:              corev1.PodQOSBurstable,
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr(claim)}},
		},
	}
	st := &p.Status
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus, reason, msg string) {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: ts(created.Add(2 * time.Second))})
	}
	started := ts(created.Add(3 * time.Second))
	container := corev1.ContainerStatus{Name: "server", Image: podImage, ImageID: podImage}

	switch o {
	case CapacityExhausted, SelectorMatchesNothing, Unallocated:
		st.Phase = corev1.PodPending
		msg := fmt.Sprintf("0/%d nodes are available: %d cannot allocate all claims. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.", g.nodes, g.nodes, g.nodes, g.nodes)
		if o == Unallocated {
			msg = fmt.Sprintf("0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.", g.nodes, g.nodes, g.nodes, g.nodes)
		}
		if o == Unallocated {
			p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "zone-c"}
		}
		cond(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, msg)
		return p
	}

	p.Spec.NodeName = node
	st.HostIP, st.PodIP = "10.0.0.1", fmt.Sprintf("10.%d.%d.%d", 64+i>>16&63, i>>8&255, i&255)
	st.StartTime = ptr(ts(created.Add(2 * time.Second)))
	cond(corev1.PodScheduled, corev1.ConditionTrue, "", "")
	switch o {
	case Running:
		st.Phase = corev1.PodRunning
		cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", "")
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", "")
		cond(corev1.ContainersReady, corev1.ConditionTrue, "", "")
		cond(corev1.PodReady, corev1.ConditionTrue, "", "")
		container.Ready, container.Started = true, ptr(true)
		container.State.Running = &corev1.ContainerStateRunning{StartedAt: started}
	case NotReady:
		st.Phase = corev1.PodRunning
		cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", "")
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", "")
		cond(corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [server]")
		cond(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [server]")
		container.Started = ptr(true)
		container.RestartCount = 3
		container.State.Running = &corev1.ContainerStateRunning{StartedAt: started}
	case PreparePending, PrepareFailed:
		st.Phase = corev1.PodPending
		cond(corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "")
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", "")
		cond(corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [server]")
		cond(corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [server]")
		container.Started = ptr(false)
		container.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	case LeakPodFinished, LeakUnreserved:
		st.Phase = corev1.PodSucceeded
		cond(corev1.PodInitialized, corev1.ConditionTrue, "", "")
		cond(corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", "")
		cond(corev1.PodReady, corev1.ConditionFalse, "PodCompleted", "")
		container.Started = ptr(false)
		container.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: ts(g.now.Add(-time.Hour))}
	}
	st.ContainerStatuses = []corev1.ContainerStatus{container}
	return p
}

// events writes the Warning events about a pod: the kubelet's prepare
// failure, the scheduler's FailedScheduling for a quarter of the pending
// pods, and readiness-probe failures (not DRA evidence) for a quarter of the
// not-ready pods.
func (g *gen) events(i int, o Outcome, p *corev1.Pod) {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	first := ts(p.CreationTimestamp.Add(5 * time.Second))
	last := ts(g.now.Add(-time.Minute))
	kubelet := func(reason, msg string, count int32) {
		g.c.Events = append(g.c.Events, &corev1.Event{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s.%016x", p.Name, splitmix(kindEvent<<40|uint64(i))), Namespace: p.Namespace,
				UID: uid(kindEvent, i), ResourceVersion: strconv.Itoa(500000 + i), CreationTimestamp: first,
			},
			InvolvedObject: ref, Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Count: count,
			FirstTimestamp: first, LastTimestamp: last,
			Source: corev1.EventSource{Component: "kubelet", Host: p.Spec.NodeName}, ReportingController: "kubelet",
			ReportingInstance: p.Spec.NodeName,
		})
	}
	switch {
	case o == PrepareFailed:
		kubelet("FailedPrepareDynamicResources",
			"Failed to prepare dynamic resources: NodePrepareResources failed for ResourceClaim "+
				*p.Status.ResourceClaimStatuses[0].ResourceClaimName+": error preparing devices for claim: CDI spec generation failed: nvidia-container-toolkit: failed to get device info", 6)
	case o == NotReady && (i/100)%4 == 0:
		kubelet("Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503", 40)
	case (o == CapacityExhausted || o == SelectorMatchesNothing || o == Unallocated) && (i/100)%4 == 0:
		cond := p.Status.Conditions[0]
		g.c.SchedulerEvents = append(g.c.SchedulerEvents, &eventsv1.Event{
			TypeMeta: metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"},
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s.%016x", p.Name, splitmix(kindEvent<<40|uint64(i))), Namespace: p.Namespace,
				UID: uid(kindEvent, i), ResourceVersion: strconv.Itoa(500000 + i), CreationTimestamp: first,
			},
			EventTime: metav1.NewMicroTime(first.Time), ReportingController: corev1.DefaultSchedulerName,
			ReportingInstance: "default-scheduler-control-plane-1", Action: "Scheduling", Reason: "FailedScheduling",
			Regarding: ref, Note: cond.Message, Type: corev1.EventTypeWarning,
			Series: &eventsv1.EventSeries{Count: 12, LastObservedTime: metav1.NewMicroTime(last.Time)},
		})
	}
}
