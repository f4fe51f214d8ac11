package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
)

// DemoNodes are the simulated nodes of the demo: two DRA nodes with four
// H100 each, one with two L4, and a device-plugin node with eight GPUs.
var DemoNodes = []GPUNode{
	{Name: "gpu-node-1", GPUs: 4},
	{Name: "gpu-node-2", GPUs: 4},
	{Name: "gpu-node-3", GPUs: 2, Product: "NVIDIA L4"},
	{Name: "dp-node-1", DevicePluginGPUs: 8},
}

const devicePluginNode = "dp-node-1"

// SeedDemo creates the NVIDIA DeviceClasses, DemoNodes (both are no-ops
// where they exist) and, in namespace ns, one workload per state the demo
// and the dashboards show: Ready pods of every lane, a pod blocked in each
// layer of the decision tree, a claim shared by two pods, a pod with a
// process on a GPU it does not hold (GPUProcessAnnotation), and an allocated
// claim that reserves nobody (a leak once the exporter's grace period is over).
func SeedDemo(ctx context.Context, c kubernetes.Interface, ns string) error {
	kubelet := Kubelet{Client: c}
	if err := CreateNVIDIAClasses(ctx, c); err != nil {
		return err
	}
	for _, n := range DemoNodes {
		if err := AddNode(ctx, c, n); err != nil {
			return err
		}
	}
	if err := CreateNamespace(ctx, c, ns); err != nil {
		return err
	}
	templates := []*resourceapi.ResourceClaimTemplate{
		// The LLM pods take H100s: the L4 workers below need both L4s.
		ClaimTemplate(ns, "llm-gpu", GPUClass, fmt.Sprintf("device.attributes['gpu.nvidia.com'].productName == %q", nvidia.H100)),
		ClaimTemplate(ns, "b200", GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"),
		ClaimTemplate(ns, "l4", GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'"),
		ClaimTemplate(ns, "typo", "gpu.nvidia.co"),
	}
	for _, t := range templates {
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	steps := []struct {
		pod  *corev1.Pod
		then func(string) error
	}{
		{PodWithTemplate(ns, "llm-canary", "llm-gpu"), func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{PodWithTemplate(ns, "llm-loading", "llm-gpu"), func(n string) error { return kubelet.SetRunning(ctx, ns, n, false) }},
		{PodWithTemplate(ns, "llm-prepare", "llm-gpu"), func(n string) error {
			if err := kubelet.SetContainerCreating(ctx, ns, n); err != nil {
				return err
			}
			p, err := c.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return kubelet.PrepareFailed(ctx, p, "error preparing devices: CDI spec generation failed: nvidia-container-toolkit: failed to get device info")
		}},
		{PodWithTemplate(ns, "l4-worker-0", "l4"), func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{PodWithTemplate(ns, "l4-worker-1", "l4"), func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{PodWithTemplate(ns, "l4-worker-2", "l4"), nil},
		{NegativeControl(PodWithTemplate(ns, "negative-control", "b200")), nil},
		{PodWithTemplate(ns, "typo-class", "typo"), nil},
		// The controller layer: a pod naming a claim that does not exist.
		{PodWithClaim(ns, "claim-missing", "no-such-claim"), nil},
		// A debug pod without claims whose container can open every
		// /dev/nvidia* (privileged): its process on a GPU it does not
		// hold is the node agent's isolation violation.
		{rogue(onNode(basePod(ns, "gpu-debug"), "gpu-node-1")), func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		// The device-plugin lane, on the node that advertises nvidia.com/gpu.
		{onNode(PodWithGPUs(ns, "dp-worker", 1), devicePluginNode), func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
	}
	for _, s := range steps {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, s.pod, metav1.CreateOptions{}); err != nil {
			return err
		}
		if s.then == nil {
			continue
		}
		if _, err := WaitScheduled(ctx, c, ns, s.pod.Name); err != nil {
			return err
		}
		if err := s.then(s.pod.Name); err != nil {
			return err
		}
	}
	// A claim shared by two pods, and a pod served through the extended
	// resource nvidia.com/gpu by the DRA driver (lane dra-extended: kept off
	// the device-plugin node).
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-gpu"}, Spec: ClaimSpec(GPUClass)}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, p := range []*corev1.Pod{PodWithClaim(ns, "reranker-a", "shared-gpu"), PodWithClaim(ns, "reranker-b", "shared-gpu"), offNode(PodWithGPUs(ns, "llm-extended", 1), devicePluginNode)} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := WaitScheduled(ctx, c, ns, p.Name); err != nil {
			return err
		}
		if err := kubelet.SetRunning(ctx, ns, p.Name, true); err != nil {
			return err
		}
	}
	return allocateIdleClaim(ctx, c, ns, "idle-gpu")
}

// StartReplica creates the i-th replica of the churn, as a rolling update
// would: a DRA pod and a device-plugin pod, both Ready once bound, so that
// allocation and startup latencies of both lanes flow. It returns their names.
func StartReplica(ctx context.Context, c kubernetes.Interface, ns string, i int) []string {
	kubelet := Kubelet{Client: c}
	var names []string
	for _, p := range []*corev1.Pod{
		PodWithTemplate(ns, fmt.Sprintf("llm-replica-%d", i), "llm-gpu"),
		onNode(PodWithGPUs(ns, fmt.Sprintf("dp-replica-%d", i), 1), devicePluginNode),
	} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			continue
		}
		names = append(names, p.Name)
		if _, err := WaitScheduled(ctx, c, ns, p.Name); err == nil {
			_ = kubelet.SetRunning(ctx, ns, p.Name, true)
		}
	}
	return names
}

// rogue marks the pod as running a process on GPU 0 of its node.
// NegativeControl marks a pod as a negative control with the exporter's
// default label (--gates.negative-control-label): its selector must match
// no device, and it gets dra_negative_control instead of gates.
func NegativeControl(p *corev1.Pod) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["dra-exporter.io/negative-control"] = "true"
	return p
}

func rogue(p *corev1.Pod) *corev1.Pod {
	p.Annotations = map[string]string{GPUProcessAnnotation: "0"}
	return p
}

func onNode(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return p
}

func offNode(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}},
		}}},
	}}
	return p
}

// allocateIdleClaim creates a claim and writes an allocation of a free H100
// into its status, reserved for nobody: what a claim looks like that was
// allocated and never used. The resourceclaim controller deallocates a claim
// only when its last reservation goes, so this one stays allocated.
func allocateIdleClaim(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	taken := map[string]bool{}
	for _, cl := range claims.Items {
		if a := cl.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				taken[r.Pool+"/"+r.Device] = true
			}
		}
	}
	var pool, device string
	for _, n := range DemoNodes[:2] {
		for i := n.GPUs - 1; i >= 0 && device == ""; i-- {
			if d := fmt.Sprintf("gpu-%d", i); !taken[n.Name+"/"+d] {
				pool, device = n.Name, d
			}
		}
	}
	if device == "" {
		return fmt.Errorf("no free H100 left for claim %s", name)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ClaimSpec(GPUClass)}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: Driver, Pool: pool, Device: device},
			}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{pool}}},
			}}},
		}
		_, err = c.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// OffDevicePluginNode keeps a pod that asks for nvidia.com/gpu off the
// demo's device-plugin node (tests share the control plane, and a test that
// seeded DemoNodes leaves that node behind): the scheduler then serves the
// request through the DeviceClass that maps the extended resource.
func OffDevicePluginNode(p *corev1.Pod) *corev1.Pod { return offNode(p, devicePluginNode) }
