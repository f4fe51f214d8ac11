package nodee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	helmchart "github.com/dra-exporter/dra-exporter/deploy/helm"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// EnvImageDir names the folder of `make image`'s tarballs.
const EnvImageDir = "DRA_E2E_IMAGE_DIR"

// TestChart installs the exporter and the node agent as a user does: `make
// image`'s tarballs imported into the node's containerd, the chart installed
// with the pinned helm (no ServiceMonitor or PrometheusRule: no operator
// runs here). The exporter runs as a pod with the chart's security context,
// ServiceAccount and RBAC, reaches the API server through the `kubernetes`
// Service, passes its own probes and serves the verdicts the exporter run as
// a process serves. The agent's DaemonSet runs on the node with the
// pod-resources socket and hostPID as the chart mounts them (no GPU here:
// its GPU source reads unavailable) and serves the holders, conflicts and
// kubelet series the agent run as a process serves.
func TestChart(t *testing.T) {
	ctx := context.Background()
	helm := os.Getenv(helmchart.EnvHelm)
	imageDir := os.Getenv(EnvImageDir)
	if helm == "" || imageDir == "" {
		t.Fatalf("%s and %s must be set (make test builds helm and the image and sets them)", helmchart.EnvHelm, EnvImageDir)
	}
	for _, tarball := range []string{"dra-exporter.tar", "dra-exporter-node-agent.tar"} {
		if out, err := env.node.Ctr(ctx, "images", "import", filepath.Join(imageDir, tarball)); err != nil {
			t.Fatalf("import %s: %v: %s", tarball, err, out)
		}
	}
	repo, tag := importedImage(t, "ghcr.io/dra-exporter/dra-exporter")
	agentRepo, agentTag := importedImage(t, "ghcr.io/dra-exporter/dra-exporter-node-agent")

	// A pod the exporter in the chart must explain: its driver config is
	// rejected at prepare.
	ns := namespace(t, "chart-verdicts")
	template(t, ns, "bogus", bogusSharing())
	create(t, workload(ns, "llm-0", "bogus"))
	// And one that runs, for the agent to attribute.
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "llm-1", "gpu"))
	waitPod(t, ns, "llm-1", "Ready", 90*time.Second, ready)

	// The example driver's node has none of the labels the agent's default
	// affinity knows GPU nodes by: label it as docs/install.md tells users
	// to label such a node.
	labelGPUNode(t)
	const release, chartNS = "dra-exporter-chart", "dra-chart"
	install := exec.CommandContext(ctx, helm, "install", release, repoPath("deploy/helm/dra-exporter"),
		"--kubeconfig", env.cp.Kubeconfig, "--namespace", chartNS, "--create-namespace",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "nodeAgent.image.repository="+agentRepo, "--set", "nodeAgent.image.tag="+agentTag,
		"--set", "nodeAgent.image.pullPolicy=Never", "--set", "serviceMonitor.enabled=false",
		"--set", "prometheusRule.enabled=false", "--set", "dashboards.enabled=false",
		"--wait", "--timeout", "3m")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, podsOf(chartNS))
	}
	t.Cleanup(func() {
		out, err := exec.Command(helm, "uninstall", release, "--kubeconfig", env.cp.Kubeconfig, "--namespace", chartNS, "--wait", "--timeout", "2m").CombinedOutput()
		if err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})

	pods, err := env.cp.Client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=exporter"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the chart's exporter pod: %v %s", err, podsOf(chartNS))
	}
	pod := waitPod(t, chartNS, pods.Items[0].Name, "Ready", 2*time.Minute, ready)
	c := pod.Spec.Containers[0]
	if pod.Spec.ServiceAccountName != release || c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil ||
		!*c.SecurityContext.ReadOnlyRootFilesystem || pod.Spec.SecurityContext.RunAsNonRoot == nil || !*pod.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("the pod does not run as the chart says: account %q, security context %+v / %+v", pod.Spec.ServiceAccountName, pod.Spec.SecurityContext, c.SecurityContext)
	}
	if n := pod.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the exporter restarted %d times:\n%s", n, describe(pod))
	}

	inPod := &cluster.Exporter{URL: fmt.Sprintf("http://%s:9877", pod.Status.PodIP)}
	blocked := map[string]string{"namespace": ns, "pod": "llm-0", "layer": "node", "reason": "node_prepare_failed"}
	eventually(t, inPod, 60*time.Second, "the chart's exporter names the prepare failure", func(m cluster.Metrics) error {
		if err := one(m, "dra_exporter_apiserver_up", nil, 1); err != nil {
			return err
		}
		return one(m, "dra_pod_blocked", blocked, 1)
	})
	// The pod and the process read the same cluster the same way.
	sameSeries(t, inPod, env.exp, "dra_device_info", "dra_device_class_devices", "dra_claim_status", "dra_pod_blocked")

	// The agent's DaemonSet, against the agent run as a process.
	agents, err := env.cp.Client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("the chart's node agent pod: %v %s", err, podsOf(chartNS))
	}
	agentPod := waitPod(t, chartNS, agents.Items[0].Name, "Ready", 2*time.Minute, ready)
	if !agentPod.Spec.HostPID || agentPod.Spec.NodeName != env.node.Name {
		t.Errorf("the agent pod: hostPID %t, node %q", agentPod.Spec.HostPID, agentPod.Spec.NodeName)
	}
	if n := agentPod.Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("the agent restarted %d times:\n%s", n, describe(agentPod))
	}
	agentInPod := &cluster.Exporter{URL: fmt.Sprintf("http://%s:9878", agentPod.Status.PodIP)}
	eventually(t, agentInPod, 60*time.Second, "the chart's agent reads the kubelet and the host's processes", func(m cluster.Metrics) error {
		for _, f := range []string{"dra_node_podresources_up", "dra_node_podresources_dynamic_resources", "dra_node_host_processes_visible"} {
			if err := one(m, f, nil, 1); err != nil {
				return err
			}
		}
		return one(m, "dra_gpu_holder_info", map[string]string{"namespace": ns, "pod": "llm-1", "lane": "dra"}, 1)
	})
	sameSeries(t, agentInPod, env.agent, "dra_gpu_holder_info", "dra_node_claim_conflict", "dra_gpu_isolation_violation",
		"dra_node_podresources_up", "dra_node_podresources_dynamic_resources", "dra_node_host_processes_visible")
}

// sameSeries waits until the chart's pod serves the same series of each
// family as the same program run as a process.
func sameSeries(t *testing.T, pod, process *cluster.Exporter, families ...string) {
	t.Helper()
	for _, family := range families {
		var last string
		err := cluster.WaitFor(context.Background(), 30*time.Second, family+" equal", func(context.Context) (bool, error) {
			a, err1 := pod.Scrape()
			b, err2 := process.Scrape()
			if err1 != nil || err2 != nil {
				return false, nil
			}
			x, y := fmt.Sprint(a.Find(family, nil)), fmt.Sprint(b.Find(family, nil))
			last = "pod:     " + x + "\nprocess: " + y
			return x == y, nil
		})
		if err != nil {
			t.Errorf("%v\n%s", err, last)
		}
	}
}

// importedImage finds the repository and tag of an image imported into the
// node's containerd.
func importedImage(t *testing.T, repo string) (string, string) {
	t.Helper()
	out, err := env.node.Ctr(context.Background(), "images", "ls", "-q")
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, out)
	}
	for _, ref := range strings.Fields(out) {
		if tag, ok := strings.CutPrefix(ref, repo+":"); ok {
			return repo, tag
		}
	}
	t.Fatalf("no image %s in containerd:\n%s", repo, out)
	return "", ""
}

func podsOf(ns string) string {
	pods, err := env.cp.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods.Items {
		b.WriteString(describe(&pods.Items[i]))
	}
	return b.String()
}

// labelGPUNode labels the real node nvidia.com/gpu.present=true, as GPU
// Feature Discovery does and docs/install.md says to where it does not run.
func labelGPUNode(t *testing.T) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"nvidia.com/gpu.present":"true"}}}`)
	if _, err := env.cp.Client.CoreV1().Nodes().Patch(context.Background(), env.node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label node %s: %v", env.node.Name, err)
	}
}
