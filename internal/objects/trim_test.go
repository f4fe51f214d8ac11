package objects_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

func managed(manager, subresource string, at time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "resource.k8s.io/v1",
		Time: ptr(metav1.NewTime(at)), Subresource: subresource, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(fields),
	}
}

func fullMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: "prod", UID: types.UID("uid-" + name), ResourceVersion: "42",
		CreationTimestamp: metav1.NewTime(t0),
		Labels:            map[string]string{"app": "llm", "pod-template-hash": "abc", "secret-team": "x"},
		Annotations:       map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...big...}"},
		ManagedFields:     []metav1.ManagedFieldsEntry{managed("kubectl", "", t0, `{"f:metadata":{}}`)},
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func gpuPod(name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: fullMeta(name),
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "main", Image: "vllm:latest", Command: []string{"serve"},
				Env: []corev1.EnvVar{{Name: "TOKEN", Value: "secret"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: q("16Gi"), "nvidia.com/gpu": q("1")},
					Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
				},
			}},
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("llm-gpu")}},
			Volumes:        []corev1.Volume{{Name: "model"}},
		},
		Status: corev1.PodStatus{
			Phase:     corev1.PodRunning,
			PodIP:     "10.0.0.7",
			StartTime: ptr(metav1.NewTime(t0)),
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionFalse},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "main", Image: "vllm:latest", ImageID: "sha256:abc", ContainerID: "containerd://x",
				RestartCount: 3, Started: ptr(true),
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}},
			}},
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr("llm-0-gpu-x")}},
		},
	}
}

func TestTrimRelevantPod(t *testing.T) {
	in := gpuPod("llm-0")
	in.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "llm", UID: "rs"}}
	out := objects.Trimmer{PodLabels: []string{"app", "missing"}}.Trim(in).(*corev1.Pod)

	if out.Name != "llm-0" || out.Namespace != "prod" || out.UID != in.UID || !out.CreationTimestamp.Equal(&in.CreationTimestamp) || out.ResourceVersion != "42" {
		t.Errorf("identity lost: %+v", out.ObjectMeta)
	}
	if len(out.Labels) != 1 || out.Labels["app"] != "llm" {
		t.Errorf("labels = %v, want only the allowlisted app", out.Labels)
	}
	if out.Annotations != nil || out.ManagedFields != nil {
		t.Errorf("annotations %v / managedFields %v kept", out.Annotations, out.ManagedFields)
	}
	if len(out.OwnerReferences) != 1 {
		t.Errorf("owner references dropped")
	}
	if out.Spec.NodeName != "node-1" || len(out.Spec.ResourceClaims) != 1 || out.Spec.Volumes != nil {
		t.Errorf("spec = %+v", out.Spec)
	}
	c := out.Spec.Containers[0]
	if c.Image != "" || c.Env != nil || c.Command != nil {
		t.Errorf("container kept image/env/command: %+v", c)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; ok || len(c.Resources.Requests) != 0 {
		t.Errorf("requests = %v, want extended resources only (none)", c.Resources.Requests)
	}
	if len(c.Resources.Limits) != 1 || c.Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 1 {
		t.Errorf("limits = %v, want only nvidia.com/gpu", c.Resources.Limits)
	}
	if len(c.Resources.Claims) != 1 {
		t.Errorf("container claims dropped")
	}
	if len(out.Spec.InitContainers) != 1 || out.Spec.InitContainers[0].Image != "" {
		t.Errorf("init containers = %+v", out.Spec.InitContainers)
	}
	st := out.Status
	if st.Phase != corev1.PodRunning || st.PodIP != "" || len(st.ResourceClaimStatuses) != 1 || st.StartTime == nil {
		t.Errorf("status = %+v", st)
	}
	var conds []corev1.PodConditionType
	for _, c := range st.Conditions {
		conds = append(conds, c.Type)
	}
	if len(conds) != 3 || conds[0] != corev1.PodScheduled || conds[1] != corev1.ContainersReady || conds[2] != corev1.PodReady {
		t.Errorf("conditions = %v, want PodScheduled, ContainersReady, Ready", conds)
	}
	cs := st.ContainerStatuses[0]
	if cs.Image != "" || cs.ContainerID != "" || cs.RestartCount != 3 || cs.State.Running == nil || cs.LastTerminationState.Terminated == nil || cs.Started == nil {
		t.Errorf("container status = %+v", cs)
	}
	// The input is not modified (informer caches share it).
	if in.Annotations == nil || in.ManagedFields == nil || in.Spec.Containers[0].Image == "" || len(in.Labels) != 3 {
		t.Errorf("Trim modified its input")
	}
}

func TestTrimIrrelevantPod(t *testing.T) {
	in := gpuPod("web")
	in.Spec.ResourceClaims = nil
	in.Status.ResourceClaimStatuses = nil
	in.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}
	in.Spec.Containers[0].Resources.Claims = nil
	in.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web"}}
	out := objects.Trimmer{PodLabels: []string{"app"}}.Trim(in).(*corev1.Pod)
	if out.Name != "web" || out.UID != in.UID {
		t.Errorf("identity lost")
	}
	if len(out.Labels) != 1 || out.Labels["app"] != "llm" {
		t.Errorf("labels = %v", out.Labels)
	}
	if len(out.Spec.Containers) != 0 || out.Spec.NodeName != "" || out.Status.Phase != "" || len(out.Status.Conditions) != 0 || out.OwnerReferences != nil {
		t.Errorf("a pod without DRA or extended resources kept more than its identity: spec %+v status %+v", out.Spec, out.Status)
	}
}

func TestTrimPodRelevance(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(*corev1.Pod)
		relevant bool
	}{
		{"resource claims", func(p *corev1.Pod) {}, true},
		{"extended resource request only", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = nil
			p.Spec.Containers[0].Resources.Limits = nil
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"example.com/fpga": q("1")}
		}, true},
		{"extended resource in an init container", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = nil
			p.Spec.Containers[0].Resources.Limits = nil
			p.Spec.InitContainers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q("1")}
		}, true},
		{"extended resource claim status", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = nil
			p.Spec.Containers[0].Resources.Limits = nil
			p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "x"}
		}, true},
		{"cpu, memory and hugepages only", func(p *corev1.Pod) {
			p.Spec.ResourceClaims = nil
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"hugepages-2Mi": q("2Mi"), corev1.ResourceCPU: q("1")}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := gpuPod("p")
			tt.mutate(in)
			out := objects.Trimmer{}.Trim(in).(*corev1.Pod)
			if got := out.Status.Phase != ""; got != tt.relevant {
				t.Errorf("kept the status: %v, want %v", got, tt.relevant)
			}
		})
	}
}

func allocatedClaim() *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: fullMeta("llm-0-gpu-x"),
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}},
			Config:   []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(`{"sharing":"TimeSlicing"}`)}}}}},
		}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}},
				Config:  []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim}},
			}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "llm-0", UID: "uid-llm-0"}},
			Devices: []resourceapi.AllocatedDeviceStatus{{Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0",
				Data: &runtime.RawExtension{Raw: []byte(`{"big":"blob"}`)}, NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: "eth1"}}},
		},
	}
	c.Annotations[resourceapi.PodResourceClaimAnnotation] = "gpu"
	c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] = "true"
	return c
}

func TestTrimClaim(t *testing.T) {
	in := allocatedClaim()
	in.ManagedFields = []metav1.ManagedFieldsEntry{
		managed("kube-controller-manager", "", t0.Add(-10*time.Minute), `{"f:metadata":{},"f:spec":{}}`),
		managed("kube-scheduler", "status", t0.Add(-9*time.Minute), `{"f:status":{"f:allocation":{".":{}}}}`),
		managed("kube-scheduler", "status", t0.Add(-8*time.Minute), `{"f:status":{"f:allocation":{"f:devices":{}},"f:reservedFor":{}}}`),
		managed("kube-controller-manager", "status", t0.Add(-1*time.Minute), `{"f:status":{"f:reservedFor":{}}}`),
		managed("someone", "", t0, `{"f:status":{"f:allocation":{}}}`),
	}
	out := objects.Trimmer{}.Trim(in).(*resourceapi.ResourceClaim)
	a := out.Status.Allocation
	if a == nil || a.AllocationTimestamp == nil {
		t.Fatalf("no allocation timestamp taken from managedFields")
	}
	if want := t0.Add(-8 * time.Minute); !a.AllocationTimestamp.Time.Equal(want) {
		t.Errorf("AllocationTimestamp = %v, want %v (the newest status write of the allocation)", a.AllocationTimestamp.Time, want)
	}
	if out.ManagedFields != nil {
		t.Errorf("managedFields kept")
	}
	if len(out.Annotations) != 2 || out.Annotations[resourceapi.PodResourceClaimAnnotation] != "gpu" || out.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		t.Errorf("annotations = %v, want only the pod-claim-name and extended-resource-claim annotations", out.Annotations)
	}
	if out.Spec.Devices.Config != nil || a.Devices.Config != nil {
		t.Errorf("opaque configuration kept")
	}
	if d := out.Status.Devices[0]; d.Data != nil || d.NetworkData != nil || d.Device != "gpu-0" {
		t.Errorf("device status = %+v", d)
	}
	if len(a.Devices.Results) != 1 || len(out.Status.ReservedFor) != 1 || len(out.Spec.Devices.Requests) != 1 {
		t.Errorf("what the joins read was trimmed: %+v", out.Status)
	}
	if in.Status.Allocation.AllocationTimestamp != nil || in.ManagedFields == nil || in.Spec.Devices.Config == nil {
		t.Errorf("Trim modified its input")
	}
	// Labels and finalizers are read by no join; the controller reference
	// is (the claim's owning pod).
	if out.Labels != nil || out.Finalizers != nil || out.Namespace != "prod" || out.UID != in.UID {
		t.Errorf("metadata trimmed to %+v", out.ObjectMeta)
	}
	// The trimmed claim is a copy: later writes to the input (a test's
	// in-place update, a reused object) do not reach it.
	in.Status.Allocation.Devices.Results[0].Device = "gpu-9"
	in.Status.ReservedFor[0].Name = "other"
	in.Spec.Devices.Requests[0].Name = "other"
	if a.Devices.Results[0].Device == "gpu-9" || out.Status.ReservedFor[0].Name == "other" || out.Spec.Devices.Requests[0].Name == "other" {
		t.Errorf("the trimmed claim shares the input's status or spec")
	}
}

func TestTrimClaimAllocationTimestamp(t *testing.T) {
	t.Run("a timestamp written by the API server wins", func(t *testing.T) {
		in := allocatedClaim()
		in.Status.Allocation.AllocationTimestamp = ptr(metav1.NewTime(t0.Add(-time.Hour)))
		in.ManagedFields = []metav1.ManagedFieldsEntry{managed("kube-scheduler", "status", t0, `{"f:status":{"f:allocation":{}}}`)}
		out := objects.Trimmer{}.Trim(in).(*resourceapi.ResourceClaim)
		if got := out.Status.Allocation.AllocationTimestamp.Time; !got.Equal(t0.Add(-time.Hour)) {
			t.Errorf("AllocationTimestamp = %v, want the original %v", got, t0.Add(-time.Hour))
		}
	})
	t.Run("no status write of the allocation", func(t *testing.T) {
		in := allocatedClaim()
		in.ManagedFields = []metav1.ManagedFieldsEntry{managed("kube-controller-manager", "status", t0, `{"f:status":{"f:reservedFor":{}}}`)}
		out := objects.Trimmer{}.Trim(in).(*resourceapi.ResourceClaim)
		if out.Status.Allocation.AllocationTimestamp != nil {
			t.Errorf("AllocationTimestamp = %v, want none", out.Status.Allocation.AllocationTimestamp)
		}
	})
	t.Run("unallocated claim", func(t *testing.T) {
		in := allocatedClaim()
		in.Status = resourceapi.ResourceClaimStatus{}
		in.ManagedFields = []metav1.ManagedFieldsEntry{managed("kube-scheduler", "status", t0, `{"f:status":{"f:allocation":{}}}`)}
		out := objects.Trimmer{}.Trim(in).(*resourceapi.ResourceClaim)
		if out.Status.Allocation != nil {
			t.Errorf("an unallocated claim gained an allocation")
		}
	})
}

func TestTrimEvents(t *testing.T) {
	core := func(reason, message string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     fullMeta("llm-0.181"),
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "prod", Name: "llm-0", UID: "uid-llm-0", FieldPath: "spec.containers{main}"},
			Reason:         reason, Message: message, Type: corev1.EventTypeWarning, Count: 4,
			LastTimestamp: metav1.NewTime(t0), Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
		}
	}
	t.Run("relevant core event", func(t *testing.T) {
		out := objects.Trimmer{}.Trim(core("FailedPrepareDynamicResources", "prepare failed")).(*corev1.Event)
		if out.Reason != "FailedPrepareDynamicResources" || out.Message != "prepare failed" || out.Count != 4 || !out.LastTimestamp.Time.Equal(t0) {
			t.Errorf("event = %+v", out)
		}
		if out.InvolvedObject.UID != "uid-llm-0" || out.InvolvedObject.FieldPath != "" || out.Source.Component != "kubelet" {
			t.Errorf("involvedObject/source = %+v / %+v", out.InvolvedObject, out.Source)
		}
		if out.ManagedFields != nil || out.Annotations != nil || out.Labels != nil {
			t.Errorf("metadata not trimmed: %+v", out.ObjectMeta)
		}
	})
	t.Run("irrelevant core event keeps only its identity", func(t *testing.T) {
		in := core("Unhealthy", "Readiness probe failed")
		out := objects.Trimmer{}.Trim(in).(*corev1.Event)
		if out.Name != in.Name || out.Namespace != "prod" {
			t.Errorf("identity lost: %+v", out.ObjectMeta)
		}
		if out.Reason != "" || out.Message != "" || out.InvolvedObject.Name != "" || out.Count != 0 {
			t.Errorf("an irrelevant event kept its content: %+v", out)
		}
	})
	v1 := func(reason, note string) *eventsv1.Event {
		return &eventsv1.Event{
			ObjectMeta: fullMeta("llm-0.182"),
			Regarding:  corev1.ObjectReference{Kind: "Pod", Namespace: "prod", Name: "llm-0", UID: "uid-llm-0"},
			Reason:     reason, Note: note, Type: corev1.EventTypeWarning, ReportingController: "default-scheduler",
			EventTime: metav1.NewMicroTime(t0),
		}
	}
	t.Run("relevant events.k8s.io event", func(t *testing.T) {
		out := objects.Trimmer{}.Trim(v1("FailedScheduling", "cannot allocate all claims")).(*eventsv1.Event)
		if out.Reason != "FailedScheduling" || out.Note == "" || out.Regarding.UID != "uid-llm-0" || out.ManagedFields != nil {
			t.Errorf("event = %+v", out)
		}
	})
	t.Run("irrelevant events.k8s.io event keeps only its identity", func(t *testing.T) {
		out := objects.Trimmer{}.Trim(v1("BackOff", "Back-off restarting")).(*eventsv1.Event)
		if out.Name != "llm-0.182" || out.Reason != "" || out.Note != "" || out.Regarding.Name != "" {
			t.Errorf("event = %+v", out)
		}
	})
}

func TestTrimSliceClassNode(t *testing.T) {
	product := "NVIDIA H100 80GB HBM3"
	s := &resourceapi.ResourceSlice{ObjectMeta: fullMeta("s"), Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com",
		Pool: resourceapi.ResourcePool{Name: "node-1", Generation: 1}, Devices: []resourceapi.Device{
			{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: &product}}},
			{Name: "gpu-1"},
		}}}
	out := objects.Trimmer{}.Trim(s).(*objects.Slice)
	if out.ManagedFields != nil || out.Annotations != nil || len(out.Spec.Devices) != 2 || s.ManagedFields == nil {
		t.Errorf("slice trimmed to %+v (input managedFields %v)", out, s.ManagedFields)
	}
	// The attributes move out of the devices, compact, and nothing else
	// of the input is written.
	if out.Spec.Devices[0].Attributes != nil || out.Attributes[0].Len() != 1 || out.Attributes[1].Len() != 0 || len(s.Spec.Devices[0].Attributes) != 1 {
		t.Errorf("attributes: device %v, compact %v, input %v", out.Spec.Devices[0].Attributes, out.Attributes, s.Spec.Devices[0].Attributes)
	}
	if d := out.Device(0); *d.Attributes["productName"].StringValue != product || d.Name != "gpu-0" {
		t.Errorf("device 0 read back as %+v", d)
	}
	// Devices of one product share one capacity map; a device with other
	// capacity has its own.
	memory := func(q string) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
		return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(q)}}
	}
	withCapacity := s.DeepCopy()
	withCapacity.Spec.Devices[0].Capacity = memory("80Gi")
	withCapacity.Spec.Devices[1].Capacity = memory("80Gi")
	others := objects.CompactSlice(&resourceapi.ResourceSlice{ObjectMeta: fullMeta("s2"), Spec: resourceapi.ResourceSliceSpec{
		Devices: []resourceapi.Device{{Name: "gpu-0", Capacity: memory("80Gi")}, {Name: "gpu-1", Capacity: memory("40Gi")}}}})
	shared := objects.CompactSlice(withCapacity)
	same := func(a, b map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if !same(shared.Spec.Devices[0].Capacity, shared.Spec.Devices[1].Capacity) || !same(shared.Spec.Devices[0].Capacity, others.Spec.Devices[0].Capacity) {
		t.Error("devices with the same capacity do not share one map")
	}
	if q := others.Spec.Devices[1].Capacity["memory"].Value; same(others.Spec.Devices[1].Capacity, others.Spec.Devices[0].Capacity) || q.String() != "40Gi" {
		t.Errorf("a device with other capacity got %v", q.String())
	}
	withCapacity.Spec.Devices[0].Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("1Gi")}
	if q := shared.Spec.Devices[1].Capacity["memory"].Value; q.String() != "80Gi" {
		t.Errorf("a write to the input reached the shared map: %v", q.String())
	}

	// A new resourceVersion alone is the same slice; a new attribute value
	// is not.
	again := objects.CompactSlice(s)
	again.ResourceVersion = "2"
	if !out.Equal(again) {
		t.Error("a slice that differs only in its resourceVersion is not Equal")
	}
	other := "NVIDIA A100-SXM4-80GB"
	changed := s.DeepCopy()
	changed.Spec.Devices[0].Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: &other}
	if out.Equal(objects.CompactSlice(changed)) {
		t.Error("a slice with another attribute value is Equal")
	}
	if cp := out.DeepCopyObject().(*objects.Slice); !cp.Equal(out) || cp.ResourceVersion != out.ResourceVersion {
		t.Errorf("DeepCopyObject = %+v", cp)
	}

	c := &resourceapi.DeviceClass{ObjectMeta: fullMeta("gpu.nvidia.com"), Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}},
		Config:    []resourceapi.DeviceClassConfiguration{{}},
	}}
	oc := objects.Trimmer{}.Trim(c).(*resourceapi.DeviceClass)
	if oc.ManagedFields != nil || oc.Annotations != nil || oc.Spec.Config != nil || len(oc.Spec.Selectors) != 1 || c.Spec.Config == nil {
		t.Errorf("class trimmed to %+v", oc)
	}

	n := &corev1.Node{ObjectMeta: fullMeta("node-1"), Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: q("64"), "nvidia.com/gpu": q("8")},
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: q("64"), "nvidia.com/gpu": q("8")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: corev1.NodeMemoryPressure}},
		Images:      []corev1.ContainerImage{{Names: []string{"vllm"}}},
	}}
	on := objects.Trimmer{}.Trim(n).(*corev1.Node)
	if len(on.Status.Allocatable) != 1 || len(on.Status.Capacity) != 1 || len(on.Status.Conditions) != 1 || on.Status.Images != nil || on.Labels != nil {
		t.Errorf("node trimmed to %+v", on.Status)
	}

	cm := &corev1.ConfigMap{ObjectMeta: fullMeta("cm")}
	if got := (objects.Trimmer{}).Trim(cm); got != any(cm) {
		t.Errorf("an unknown kind was not returned as is")
	}
}

// A shard's trimmer cuts the events about other shards' pods to their name,
// so that the informer's store does not hold them.
func TestTrimEventOfAnotherShard(t *testing.T) {
	tr := objects.Trimmer{EventNamespaces: func(ns string) bool { return ns == "mine" }}
	for _, ns := range []string{"mine", "theirs"} {
		in := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "e", ResourceVersion: "7"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"},
			Type:           corev1.EventTypeWarning,
			Reason:         "FailedPrepareDynamicResources",
			Message:        "Failed to prepare dynamic resources",
		}
		out := tr.Trim(in).(*corev1.Event)
		if out.Name != "e" || out.Namespace != ns || out.ResourceVersion != "7" {
			t.Errorf("%s: identity lost: %+v", ns, out.ObjectMeta)
		}
		if kept := out.Reason != ""; kept != (ns == "mine") {
			t.Errorf("%s: reason kept = %v", ns, kept)
		}
	}
}

// A pod of another shard's namespace, on a shard that serves no
// cluster-wide series, keeps only what other pods' verdicts read.
func TestTrimContextPod(t *testing.T) {
	prio := int32(7)
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: "p", UID: "u", Labels: map[string]string{"app": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs"}}},
		Spec: corev1.PodSpec{
			NodeName: "dp-node-1", Priority: &prio,
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}}},
		},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true}},
		},
	}
	tr := objects.Trimmer{PodLabels: []string{"app"}, ContextPods: func(ns string) bool { return ns == "theirs" }}
	out := tr.Trim(in).(*corev1.Pod)
	if out.Spec.NodeName != "dp-node-1" || out.Spec.Priority == nil || *out.Spec.Priority != 7 || out.Status.Phase != corev1.PodRunning ||
		out.Spec.Containers[0].Resources.Requests.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 2 {
		t.Errorf("context pod lost what verdicts read: %+v", out)
	}
	if out.Labels != nil || out.OwnerReferences != nil || out.Status.Conditions != nil || out.Status.ContainerStatuses != nil {
		t.Errorf("context pod kept its labels, owners or statuses: %+v", out)
	}
	in.Namespace = "mine"
	if own := tr.Trim(in).(*corev1.Pod); own.Status.Conditions == nil || own.Labels["app"] != "x" {
		t.Errorf("an own pod was cut down: %+v", own)
	}
}
