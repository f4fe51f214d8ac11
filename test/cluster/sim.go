package cluster

import (
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"

	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// NVIDIA DRA driver names (internal/testsupport/nvidia holds the driver's shape).
const (
	Driver      = nvidia.Driver
	GPUClass    = nvidia.GPUClass
	MIGClass    = nvidia.MIGClass
	GPUResource = nvidia.ExtendedResource
)

// CreateNVIDIAClasses creates the DeviceClasses the NVIDIA DRA driver
// installs: gpu.nvidia.com (serving the extended resource nvidia.com/gpu)
// and mig.nvidia.com.
func CreateNVIDIAClasses(ctx context.Context, c kubernetes.Interface) error {
	for _, dc := range nvidia.Classes() {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create deviceclass %s: %w", dc.Name, err)
		}
	}
	return nil
}

// GPUNode describes a simulated node.
type GPUNode struct {
	Name string
	// GPUs published by the DRA driver as a ResourceSlice.
	GPUs    int
	Product string
	// DevicePluginGPUs advertised as allocatable nvidia.com/gpu (the
	// device-plugin lane); 0 for a DRA node.
	DevicePluginGPUs int
}

// GPUUUID is the deterministic UUID of a simulated GPU.
func GPUUUID(node string, minor int) string {
	sum := sha1.Sum([]byte(fmt.Sprintf("%s/%d", node, minor)))
	h := hex.EncodeToString(sum[:])
	return fmt.Sprintf("GPU-%s-%s-%s-%s-%s", h[:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// AddNode creates a Ready node and, when it has DRA GPUs, the ResourceSlice
// the NVIDIA driver would publish for it.
func AddNode(ctx context.Context, c kubernetes.Interface, n GPUNode) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}}}
	if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	// The TTL controller annotates new nodes at once: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		res := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("512Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		if n.DevicePluginGPUs > 0 {
			res[GPUResource] = *resource.NewQuantity(int64(n.DevicePluginGPUs), resource.DecimalSI)
		}
		cur.Status.Capacity = res
		cur.Status.Allocatable = res
		now := metav1.Now()
		cur.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		_, err = c.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", n.Name, err)
	}
	if n.GPUs == 0 {
		return nil
	}
	_, err = c.ResourceV1().ResourceSlices().Create(ctx, NVIDIASlice(n, 1), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create resourceslice for %s: %w", n.Name, err)
	}
	return nil
}

// NVIDIASlice is the ResourceSlice the NVIDIA DRA driver publishes for a
// node: pool = node name, devices gpu-N.
func NVIDIASlice(n GPUNode, generation int64) *resourceapi.ResourceSlice {
	product := n.Product
	if product == "" {
		product = nvidia.H100
	}
	devices := make([]resourceapi.Device, n.GPUs)
	for i := range devices {
		devices[i] = nvidia.WithMinor(nvidia.GPUDevice(nvidia.DeviceName(i), GPUUUID(n.Name, i), product), i)
	}
	return nvidia.Slice(n.Name+"-"+Driver, n.Name, generation, devices...)
}

// CreateNamespace creates a namespace and waits for its default service
// account (pods are rejected until the controller-manager made it).
func CreateNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// ClaimTemplate returns a ResourceClaimTemplate with one request for a
// device of class, restricted by optional CEL selectors.
func ClaimTemplate(ns, name, class string, selectors ...string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: ClaimSpec(class, selectors...)},
	}
}

// ClaimSpec requests one device of class.
func ClaimSpec(class string, selectors ...string) resourceapi.ResourceClaimSpec {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	for _, s := range selectors {
		req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}
}

// PodWithTemplate is a pod whose claim "gpu" is generated from a template.
func PodWithTemplate(ns, name, template string) *corev1.Pod {
	return podWithClaim(ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
}

// PodWithClaim is a pod that uses the named claim as "gpu".
func PodWithClaim(ns, name, claim string) *corev1.Pod {
	return podWithClaim(ns, name, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)})
}

func podWithClaim(ns, name string, rc corev1.PodResourceClaim) *corev1.Pod {
	p := basePod(ns, name)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{rc}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: rc.Name}}
	return p
}

// PodWithGPUs requests nvidia.com/gpu, the device-plugin way.
func PodWithGPUs(ns, name string, gpus int64) *corev1.Pod {
	p := basePod(ns, name)
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{GPUResource: q}
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{GPUResource: q}
	return p
}

func basePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			Containers:                    []corev1.Container{{Name: "server", Image: "registry.example.com/llm-server:1.4.2"}},
		},
	}
}

// WaitFor polls cond every 100ms until it holds or the timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, cond)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// WaitScheduled waits until the scheduler bound the pod and returns it.
func WaitScheduled(ctx context.Context, c kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := WaitFor(ctx, 60*time.Second, "pod "+ns+"/"+name+" bound", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "", nil
	})
	return pod, err
}

// Kubelet plays the kubelet's part for pods on simulated nodes.
type Kubelet struct {
	Client kubernetes.Interface
}

// SetRunning marks the pod Running with its containers started; ready sets
// the Ready condition.
func (k Kubelet) SetRunning(ctx context.Context, ns, name string, ready bool) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		readyStatus := corev1.ConditionFalse
		if ready {
			readyStatus = corev1.ConditionTrue
		}
		setCondition(p, corev1.PodReadyToStartContainers, corev1.ConditionTrue)
		setCondition(p, corev1.PodReady, readyStatus)
		setCondition(p, corev1.ContainersReady, readyStatus)
		setCondition(p, corev1.PodInitialized, corev1.ConditionTrue)
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, Ready: ready, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			})
		}
	})
}

// SetContainerCreating reports the containers waiting, as while the node
// prepares devices and pulls images: as a real kubelet v1.37 reports a pod
// whose devices are not prepared yet (or failed to prepare), no sandbox,
// initialized, not ready.
func (k Kubelet) SetContainerCreating(ctx context.Context, ns, name string) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodPending
		p.Status.StartTime = &now
		setConditionWhy(p, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "PodSandboxNotReady", "no pod sandbox exists")
		setCondition(p, corev1.PodInitialized, corev1.ConditionTrue)
		notReady := "containers with unready status: [" + p.Spec.Containers[0].Name + "]"
		setConditionWhy(p, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady", notReady)
		setConditionWhy(p, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady", notReady)
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
			})
		}
	})
}

// SetSucceeded marks the pod finished.
func (k Kubelet) SetSucceeded(ctx context.Context, ns, name string) error {
	return k.updateStatus(ctx, ns, name, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		setCondition(p, corev1.PodReady, corev1.ConditionFalse)
		p.Status.ContainerStatuses = nil
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}},
			})
		}
	})
}

// PrepareFailed emits the Warning event a kubelet records when the DRA
// driver's NodePrepareResources fails for the pod's (first) claim, worded
// as a real kubelet v1.37 words it (kuberuntime_manager.go and
// cm/dra/manager.go): "Failed to prepare dynamic resources: prepare dynamic
// resources: NodePrepareResources failed for ResourceClaim <claim>:
// <driverError>".
func (k Kubelet) PrepareFailed(ctx context.Context, pod *corev1.Pod, driverError string) error {
	now := metav1.Now()
	claim := ""
	if p, err := k.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		pod = p
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			claim = *st.ResourceClaimName
			break
		}
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if claim == "" && rc.ResourceClaimName != nil {
			claim = *rc.ResourceClaimName
		}
	}
	message := "prepare dynamic resources: NodePrepareResources failed for ResourceClaim " + claim + ": " + driverError
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, GenerateName: pod.Name + "."},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		},
		Reason:              "FailedPrepareDynamicResources",
		Message:             "Failed to prepare dynamic resources: " + message,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "kubelet", Host: pod.Spec.NodeName},
		ReportingController: "kubelet",
		ReportingInstance:   pod.Spec.NodeName,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	_, err := k.Client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (k Kubelet) updateStatus(ctx context.Context, ns, name string, mutate func(*corev1.Pod)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := k.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(p)
		_, err = k.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus) {
	setConditionWhy(p, t, s, "", "")
}

func setConditionWhy(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, reason, message string) {
	now := metav1.Now()
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == t {
			if c.Status != s {
				c.Status = s
				c.LastTransitionTime = now
			}
			c.Reason, c.Message = reason, message
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now, Reason: reason, Message: message})
}

// ForceDelete deletes a pod with grace period 0, as `kubectl delete
// --force --grace-period=0` does: without a kubelet, a graceful delete of a
// bound pod never completes.
func ForceDelete(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
}

// CreateDeviceClass creates a DeviceClass selecting the devices of a driver.
func CreateDeviceClass(ctx context.Context, c kubernetes.Interface, name, driver string) error {
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}},
		}},
	}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create deviceclass %s: %w", name, err)
	}
	return nil
}

// RemoveNode deletes a simulated node and the ResourceSlice published for it.
func RemoveNode(ctx context.Context, c kubernetes.Interface, name string) error {
	err := c.ResourceV1().ResourceSlices().Delete(ctx, name+"-"+Driver, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
