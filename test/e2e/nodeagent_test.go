package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestNodeAgent runs `dra-exporter node` for gpu-node-2 under its own
// node-agent ClusterRole, against the real control plane: the real
// scheduler allocates a GPU to a pod, the test's pod-resources server (the
// kubelet's real message types over a unix socket) reports that device
// prepared, the recorded source makes the allocated GPU and one GPU nobody
// holds busy, and a fixture /proc maps the GPU process to the pod's UID.
func TestNodeAgent(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	const node = "gpu-node-2"
	ns := namespace(t, "node-agent")
	tmpl := cluster.ClaimTemplate(ns, "one-gpu", cluster.GPUClass)
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two pods, so that the kubelet keeps reporting dynamic resources when
	// it loses llm-0's preparation below (an empty report cannot tell a
	// kubelet without the DRA pod-resources gate from one with nothing).
	var pod *corev1.Pod
	claims, devices := map[string]string{}, map[string]string{}
	for _, name := range []string{"llm-0", "llm-1"} {
		p := cluster.PodWithTemplate(ns, name, "one-gpu")
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		createPod(t, p)
		sp := scheduled(t, ns, name)
		if name == "llm-0" {
			pod = sp
		}
		if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
			t.Fatal(err)
		}
		claims[name] = generatedClaim(t, ns, name)
		devices[name] = allocatedDevice(t, ns, claims[name])
	}
	claimName, device := claims["llm-0"], devices["llm-0"]
	minor, other := deviceMinor(t, device), deviceMinor(t, devices["llm-1"])
	free := 0
	for free == minor || free == other {
		free++
	}
	held, idle := cluster.GPUUUID(node, minor), cluster.GPUUUID(node, free)

	dir := t.TempDir()
	srv, err := podresources.Serve(filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	prepared := func(name string) *podresourcesv1.PodResources {
		return &podresourcesv1.PodResources{Name: name, Namespace: ns,
			Containers: []*podresourcesv1.ContainerResources{{Name: "server", DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: claims[name], ClaimNamespace: ns,
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: cluster.Driver, PoolName: node, DeviceName: devices[name]}},
			}}}}}
	}
	srv.Set(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{prepared("llm-0"), prepared("llm-1")}})
	busy := map[string]float64{"DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 61440, "DCGM_FI_DEV_FB_TOTAL": 81559}
	rec := gpu.Recording{GPUs: []gpu.RecordedGPU{
		{UUID: held, Index: minor, Product: "NVIDIA H100 80GB HBM3", Fields: busy,
			Processes: []gpu.RecordedProcess{{PID: 4242, UsedMemoryBytes: 60 << 30}}},
		{UUID: cluster.GPUUUID(node, other), Index: other, Product: "NVIDIA H100 80GB HBM3", Fields: map[string]float64{"DCGM_FI_DEV_GPU_UTIL": 0}},
		{UUID: idle, Index: free, Product: "NVIDIA H100 80GB HBM3", Fields: busy},
	}}
	raw, _ := json.Marshal(rec)
	recFile := filepath.Join(dir, "gpu.json")
	writeFile(t, recFile, string(raw))
	writeFile(t, filepath.Join(dir, "proc", "1", "cgroup"), "0::/init.scope\n")
	writeFile(t, filepath.Join(dir, "proc", "2", "comm"), "kthreadd\n") // the host's PID namespace
	writeFile(t, filepath.Join(dir, "proc", "4242", "cgroup"), fmt.Sprintf(
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-0a1b.scope\n",
		strings.ReplaceAll(string(pod.UID), "-", "_")))

	kubeconfig, err := cluster.AccountKubeconfig(ctx, env.cp, repoPath("deploy/manifests/node-agent-clusterrole.yaml"), cluster.NodeAgentAccount)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := cluster.StartNodeAgent(ctx, env.exporter, kubeconfig, env.dir, node,
		"--gpu.source=recorded", "--gpu.recorded-file="+recFile,
		"--kubelet.pod-resources-socket="+srv.Socket, "--proc-root="+filepath.Join(dir, "proc"), "--claim.refresh-interval=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()

	want := map[string]string{"node": node, "gpu_uuid": held, "driver": cluster.Driver, "pool": node, "device": device,
		"lane": "dra", "namespace": ns, "pod": "llm-0", "pod_uid": string(pod.UID), "claim": claimName}
	err = cluster.WaitFor(ctx, 30*time.Second, "node agent series", func(context.Context) (bool, error) {
		m, err := agent.Scrape()
		if err != nil {
			return false, nil
		}
		return one(m, "dra_gpu_utilization_ratio", want, 0.87) == nil &&
			one(m, "dra_gpu_utilization_ratio", map[string]string{"gpu_uuid": idle, "lane": "unallocated", "pod": ""}, 0.87) == nil &&
			one(m, "dra_gpu_pod_memory_used_bytes", map[string]string{"gpu_uuid": held, "pod_uid": string(pod.UID), "pod": "llm-0"}, 60<<30) == nil &&
			one(m, "dra_node_podresources_dynamic_resources", nil, 1) == nil &&
			one(m, "dra_gpu_holder_info", map[string]string{"pod": "llm-1", "claim": claims["llm-1"], "lane": "dra"}, 1) == nil &&
			none(m, "dra_node_claim_conflict", nil) == nil &&
			none(m, "dra_gpu_isolation_violation", nil) == nil, nil
	})
	if err != nil {
		m, _ := agent.Scrape()
		for _, name := range []string{"dra_gpu_utilization_ratio", "dra_gpu_holder_info", "dra_node_claim_conflict", "dra_gpu_isolation_violation", "dra_node_podresources_dynamic_resources"} {
			t.Logf("%s: %v", name, m.Find(name, nil))
		}
		t.Fatalf("%v; agent log:\n%s", err, cluster.Tail(agent.Log, 30))
	}

	// The kubelet loses the preparation: the claim is still allocated and
	// reserved for the running pod, so the agent reports not_prepared.
	srv.Set(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Name: "llm-0", Namespace: ns, Containers: []*podresourcesv1.ContainerResources{{Name: "server"}},
	}, prepared("llm-1")}})
	err = cluster.WaitFor(ctx, 30*time.Second, "not_prepared conflict", func(context.Context) (bool, error) {
		m, err := agent.Scrape()
		if err != nil {
			return false, nil
		}
		return one(m, "dra_node_claim_conflict", map[string]string{"reason": "not_prepared", "claim": claimName, "pod_uid": string(pod.UID), "device": device}, 1) == nil &&
			none(m, "dra_node_claim_conflict", map[string]string{"pod": "llm-1"}) == nil, nil
	})
	if err != nil {
		t.Fatalf("%v; agent log:\n%s", err, cluster.Tail(agent.Log, 30))
	}

	// Narrow RBAC: the agent's account cannot list claims cluster-wide.
	if ok, err := cluster.CanIAs(ctx, env.cp.Client, cluster.NodeAgentAccount, "list", "resource.k8s.io", "resourceclaims"); err != nil || ok {
		t.Errorf("node agent may list resourceclaims (err %v): its role must allow get only", err)
	}
}

// allocatedDevice waits for the claim's allocation and returns its device.
func allocatedDevice(t *testing.T, ns, claim string) string {
	t.Helper()
	var device string
	err := cluster.WaitFor(context.Background(), 30*time.Second, "allocation of "+claim, func(ctx context.Context) (bool, error) {
		c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
			return false, nil
		}
		device = c.Status.Allocation.Devices.Results[0].Device
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return device
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
