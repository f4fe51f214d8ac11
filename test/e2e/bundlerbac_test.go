package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
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
	// A node agent pod, running, its metrics port named as the chart names it.
	agent := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent", Labels: map[string]string{"app": "e2e-bundle-rbac-agent"}},
		Spec: corev1.PodSpec{NodeName: "gpu-node-1", Containers: []corev1.Container{{
			Name: "node-agent", Image: "registry.example.com/dra-exporter-agent:dev",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9878}},
		}}},
	}
	createPod(t, agent)
	if err := env.kubelet.SetRunning(ctx, ns, "agent", true); err != nil {
		t.Fatal(err)
	}
	p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.PodIP, p.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	if _, err := env.cp.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

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
