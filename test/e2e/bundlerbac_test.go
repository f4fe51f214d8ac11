package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// bundleItem is one entry of a bundle's manifest.json.
type bundleItem struct {
	Path, What, Skipped, Error string
	Count                      int
}

// runBundle runs `dra-exporter bundle` with the kubeconfig and args and
// returns the bundle's members and its manifest's items by what.
func runBundle(t *testing.T, kubeconfig string, args ...string) (map[string][]byte, map[string]bundleItem) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	args = append([]string{"bundle", "-o", path, "--kubeconfig", kubeconfig}, args...)
	out, err := exec.Command(env.exporter, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dra-exporter %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	files := readBundle(t, path)
	var manifest struct{ Items []bundleItem }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	items := map[string]bundleItem{}
	for _, it := range manifest.Items {
		items[it.What] = it
	}
	return files, items
}

// TestBundleReaderRole: deploy/rbac/bundle-reader.yaml is what a person
// needs to run bundle from outside the cluster. Run as a ServiceAccount
// bound to that ClusterRole alone, bundle saves every kind this cluster
// serves, and its request for the node agent pod's /metrics through the API
// server (pods/proxy) passes authorization: the API server then refuses to
// proxy to the simulated pod's loopback address, as it refuses any loopback
// address (there is no pod network here). Under the exporter's own
// ClusterRole, which lacks pods/proxy, the same request is forbidden, so the
// docs' RBAC is the role's and not the chart's. With -n the bundle keeps
// that namespace's pods, claims and events only.
func TestBundleReaderRole(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-bundle-rbac")
	other := namespace(t, "e2e-bundle-rbac-other")
	for _, n := range []string{ns, other} {
		gpuAndB200Templates(t, n)
		createPod(t, cluster.PodWithTemplate(n, "canary", "gpu"))
		scheduled(t, n, "canary")
		if err := env.kubelet.SetRunning(ctx, n, "canary", true); err != nil {
			t.Fatal(err)
		}
	}
	agentPod(t, ns, "agent", map[string]string{"app": "e2e-bundle-rbac-agent"}, 9878)

	reader, err := cluster.AccountKubeconfig(ctx, env.cp, repoPath("deploy/rbac/bundle-reader.yaml"), "e2e-bundle-reader")
	if err != nil {
		t.Fatal(err)
	}
	agentArgs := []string{"--agent.selector", "app=e2e-bundle-rbac-agent", "--agent.access", "proxy"}
	agentItem := "node agent " + ns + "/agent"

	_, items := runBundle(t, reader, agentArgs...)
	for what, it := range items {
		switch {
		case what == agentItem:
		case strings.HasSuffix(what, ".nvidia.com"):
			if !strings.Contains(it.Skipped, "not served") {
				t.Errorf("%s: %+v, want skipped as not served", what, it)
			}
		case it.Error != "" || it.Skipped != "":
			t.Errorf("%s under bundle-reader: %+v", what, it)
		}
	}
	for _, what := range []string{"nodes", "deviceclasses", "resourceslices", "devicetaintrules", "resourceclaims", "pods", "events", "server and kubelet versions", "resource.k8s.io API resources"} {
		if _, ok := items[what]; !ok {
			t.Errorf("the bundle has no item %q: %v", what, items)
		}
	}
	got := items[agentItem].Error
	if got == "" || strings.Contains(strings.ToLower(got), "forbidden") || !strings.Contains(got, "address not allowed") {
		t.Errorf("the agent through pods/proxy under bundle-reader: %q, want the API server's refusal of a loopback address (authorized, not forbidden)", got)
	}

	t.Logf("under bundle-reader, the agent: %s", got)

	_, items = runBundle(t, env.kubeconfig, agentArgs...)
	got = items[agentItem].Error
	if !strings.Contains(got, "forbidden") || !strings.Contains(got, "bundle-reader.yaml") {
		t.Errorf("the agent through pods/proxy under the exporter's ClusterRole: %q, want forbidden, naming deploy/rbac/bundle-reader.yaml (it has no pods/proxy)", got)
	}
	t.Logf("under the exporter's ClusterRole, the agent: %s", got)

	files, items := runBundle(t, reader, append([]string{"-n", ns}, agentArgs...)...)
	for _, kind := range []string{"pods", "resourceclaims", "events"} {
		var list struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := yaml.Unmarshal(files[bundle.ObjectsDir+kind+".yaml"], &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			t.Errorf("-n %s: no %s saved", ns, kind)
		}
		for _, it := range list.Items {
			if it.Metadata.Namespace != ns {
				t.Errorf("-n %s saved %s %s/%s", ns, kind, it.Metadata.Namespace, it.Metadata.Name)
			}
		}
	}
	if items["nodes"].Count == 0 || items["resourceslices"].Count == 0 {
		t.Errorf("-n %s dropped cluster-scoped objects: nodes %+v, slices %+v", ns, items["nodes"], items["resourceslices"])
	}
}

// agentPod creates a running pod of a node agent on gpu-node-1 whose metrics
// port (named as the chart names it) is port, at 127.0.0.1 (no pod network
// here).
func agentPod(t *testing.T, ns, name string, labels map[string]string, port int32) {
	t.Helper()
	ctx := context.Background()
	createPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "gpu-node-1", Containers: []corev1.Container{{
			Name: "node-agent", Image: "registry.example.com/dra-exporter-agent:dev",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: port}},
		}}},
	})
	if err := env.kubelet.SetRunning(ctx, ns, name, true); err != nil {
		t.Fatal(err)
	}
	p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.PodIP, p.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	if _, err := env.cp.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestBundleInClusterRecipe: docs/gates.md's in-cluster recipe runs bundle
// in the exporter's pod, under the chart's ClusterRole, with the default
// --agent.access (auto) and agent selector. In a pod (KUBERNETES_SERVICE_HOST
// set, as the kubelet sets it) auto reads the agents by pod IP, which needs
// no pods/proxy: the chart's ClusterRole then saves everything, the agent's
// /metrics and its GPU inventory included. (kubectl exec itself, and the
// in-cluster config's token, are the kubelet's and client-go's: here the
// exporter's token comes from a kubeconfig.)
func TestBundleInClusterRecipe(t *testing.T) {
	requireCluster(t)
	ns := namespace(t, "e2e-bundle-incluster")
	page := "# TYPE dra_gpu_info gauge\n" +
		`dra_gpu_info{node="gpu-node-1",gpu_uuid="GPU-e2e-incluster",product="NVIDIA H100 80GB HBM3",driver="gpu.nvidia.com",pool="gpu-node-1",device="gpu-0"} 1` + "\n"
	agent, err := cluster.ServeStatic([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Stop()
	_, port, _ := strings.Cut(agent.Addr, ":")
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	agentPod(t, ns, "agent", map[string]string{"app.kubernetes.io/name": "dra-exporter", "app.kubernetes.io/component": "node-agent"}, int32(n))

	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	cmd := exec.Command(env.exporter, "bundle", "-o", path, "--kubeconfig", env.kubeconfig)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=10.96.0.1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bundle: %v\n%s", err, out)
	}
	files := readBundle(t, path)
	var manifest struct{ Items []bundleItem }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	saved := false
	for _, it := range manifest.Items {
		switch {
		case it.What == "/metrics of node agent "+ns+"/agent":
			saved = it.Error == "" && it.Count == 1
		case strings.HasPrefix(it.What, "node agent "):
			// other tests' agent pods, if any run: not this test's
		case it.Error != "":
			t.Errorf("%s failed under the chart's ClusterRole: %s", it.What, it.Error)
		}
	}
	if !saved {
		t.Errorf("the agent's /metrics were not saved by pod IP: %+v", manifest.Items)
	}
	if !strings.Contains(string(files[bundle.AgentsDir+"inventory.json"]), "GPU-e2e-incluster") {
		t.Errorf("inventory.json lacks the agent's GPU:\n%s", files[bundle.AgentsDir+"inventory.json"])
	}
}
