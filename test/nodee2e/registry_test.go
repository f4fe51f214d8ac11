package nodee2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	helmchart "github.com/dra-exporter/dra-exporter/deploy/helm"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// Environment variables of the registry test (the Makefile exports them).
const (
	// EnvRegistry names the OCI registry binary: the CNCF distribution
	// project's, `make registry` builds it from tools/registry.
	EnvRegistry = "DRA_REGISTRY"
	// EnvReleaseCache is the release's cache (Debian's packages, the cross
	// compiler): the node's network namespace has no network, so the
	// release built inside it needs them there (make release-test fills it).
	EnvReleaseCache = "DRA_RELEASE_CACHE"
	// EnvKrewBin is the directory holding krew (make krew).
	EnvKrewBin = "DRA_KREW_BIN"
)

// The release the test builds and pushes, and the chart it upgrades from.
const (
	releaseVersion = "v0.1.0"
	chartVersion   = "0.1.0"
	// The previous chart: no release was ever published, so the previous
	// version is the chart of main at this commit (the day's last before
	// the chart's GPU-cluster defaults and image.registry), packaged at
	// 0.0.9 (docs/install.md "Upgrading").
	previousChartCommit  = "b690f88"
	previousChartVersion = "0.0.9"
	// The namespace (org path) of the registry the release is pushed to.
	registryNamespace = "dra"
)

// ociRegistry is a running registry on the node's loopback.
type ociRegistry struct {
	host string // 127.0.0.1:port
	log  string
}

// startRegistry starts the real registry (distribution) on the loopback of
// the node's network namespace, storing on disk under the test's folder,
// and tells the node's containerd that it speaks plain HTTP.
func startRegistry(t *testing.T) *ociRegistry {
	t.Helper()
	bin := os.Getenv(EnvRegistry)
	if bin == "" {
		t.Fatalf("%s is not set (make registry builds the registry and the Makefile sets it)", EnvRegistry)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the registry (%s): %v (make registry builds it)", EnvRegistry, err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(env.root, "registry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &ociRegistry{host: fmt.Sprintf("127.0.0.1:%d", port), log: filepath.Join(dir, "registry.log")}
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "storage"), r.host)
	configPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := cluster.StartProcess("registry", bin, r.log, nil, "serve", configPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("registry log:\n%s", cluster.Tail(r.log, 30))
		}
	})
	err = cluster.WaitFor(context.Background(), 30*time.Second, "the registry's /v2/", func(context.Context) (bool, error) {
		if err := proc.Exited(); err != nil {
			return false, fmt.Errorf("the registry exited: %w\n%s", err, cluster.Tail(r.log, 20))
		}
		resp, err := http.Get("http://" + r.host + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.node.TrustPlainHTTPRegistry(r.host); err != nil {
		t.Fatal(err)
	}
	return r
}

// releaseTool builds tools/release, the program behind `make release` and
// `make push`, once.
func releaseTool(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = repoPath("tools/release")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build tools/release: %v\n%s", err, b)
	}
	return bin
}

// buildRelease runs `make release VERSION=releaseVersion`'s program with
// its defaults (the four archives, both images for linux/amd64 and
// linux/arm64, the chart, the krew manifest) into a folder of the test.
func buildRelease(t *testing.T, tool, helm string) string {
	t.Helper()
	root, err := filepath.Abs(repoPath("."))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "release")
	args := []string{"-version", releaseVersion, "-root", root, "-out", out, "-helm", helm}
	if c := os.Getenv(EnvReleaseCache); c != "" {
		args = append(args, "-cache", c)
	}
	start := time.Now()
	if b, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		t.Fatalf("release %s: %v\n%s\n(the node's namespace has no network: the release's Debian packages, apt lists and cross compiler must be in %s first, which make release-test fills)",
			strings.Join(args, " "), err, b, EnvReleaseCache)
	}
	t.Logf("make release VERSION=%s (tools/release) in %s", releaseVersion, time.Since(start).Round(time.Second))
	return out
}

// pushRelease pushes the release as `make push VERSION=... REGISTRY=...
// INSECURE=1` does (the same program and flags) and returns each image's
// index digest as images.txt names it.
func pushRelease(t *testing.T, tool, helm, dir string, reg *ociRegistry) map[string]string {
	t.Helper()
	root, _ := filepath.Abs(repoPath("."))
	args := []string{"-push", "-version", releaseVersion, "-root", root, "-out", dir, "-helm", helm,
		"-registry", reg.host + "/" + registryNamespace, "-insecure"}
	start := time.Now()
	b, err := exec.Command(tool, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("make push (release %s): %v\n%s", strings.Join(args, " "), err, b)
	}
	t.Logf("make push REGISTRY=%s/%s INSECURE=1 in %s:\n%s", reg.host, registryNamespace, time.Since(start).Round(100*time.Millisecond), b)
	listed, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, image := range []string{"dra-exporter", "dra-exporter-node-agent"} {
		m := regexp.MustCompile(`/` + regexp.QuoteMeta(image) + `:` + regexp.QuoteMeta(releaseVersion) + `@(sha256:[0-9a-f]{64})\n`).FindSubmatch(listed)
		if m == nil {
			t.Fatalf("images.txt names no %s:%s@sha256:...:\n%s", image, releaseVersion, listed)
		}
		digests[image] = string(m[1])
		// What the push printed is what the registry holds.
		pushed := reg.host + "/" + registryNamespace + "/" + image + ":" + releaseVersion + "@" + digests[image]
		if !strings.Contains(string(b), pushed+"\n") {
			t.Errorf("make push printed no %s:\n%s", pushed, b)
		}
	}
	return digests
}

// helmCmd runs helm against the test control plane.
func helmCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helm := os.Getenv(helmchart.EnvHelm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", env.cp.Kubeconfig)...).CombinedOutput()
	return string(b), err
}

// TestRegistry takes a release through a real OCI registry to the real
// node, as a user without published images does (docs/install.md): the
// release built by `make release`'s program (every archive, both images as
// linux/amd64 + linux/arm64 indexes, the chart, the krew manifest), pushed
// with `make push`'s program to the CNCF distribution registry v3.1.2 on
// the node's loopback (plain HTTP, which the node's containerd is told in
// its own hosts.toml), then
//   - install: `helm install oci://` with the default values but
//     image.registry: the kubelet's containerd pulls both images from the
//     registry, the pods run them by the digests pushed, Ready without a
//     restart, and the exporter names the real node's prepare failure;
//   - krew: the release's plugin installed by krew from its manifest and
//     archive explains that pod against the control plane;
//   - upgrade: the previous chart (main's at previousChartCommit, pushed
//     as 0.0.9) installed from the registry, `helm upgrade` to this one
//     while a client scrapes the exporter's Service every 500ms: at most
//     one scrape missed; then `helm uninstall` leaves none of the chart's
//     objects, namespaced or cluster-scoped (and the check finds a stray
//     object of the release's label: it is not blind).
func TestRegistry(t *testing.T) {
	ctx := context.Background()
	helm := os.Getenv(helmchart.EnvHelm)
	if helm == "" {
		t.Fatalf("%s is not set (make helm builds helm and the Makefile sets it)", helmchart.EnvHelm)
	}
	reg := startRegistry(t)
	tool := releaseTool(t)
	dir := buildRelease(t, tool, helm)
	digests := pushRelease(t, tool, helm, dir, reg)

	// Default values render a ServiceMonitor and a PrometheusRule: their
	// CRDs, as a cluster with prometheus-operator has them.
	a, err := cluster.NewApplier(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := cluster.PromOperatorCRDFiles(ctx, "monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.InstallCRDs(ctx, crds...); err != nil {
		t.Fatal(err)
	}
	// The example driver's node has none of the labels the agent's default
	// affinity knows GPU nodes by: labelled as docs/install.md says.
	labelGPUNode(t)
	// A pod the exporter must explain: its driver config is rejected at
	// prepare by the real driver.
	ns := namespace(t, "registry-verdicts")
	template(t, ns, "bogus", bogusSharing())
	create(t, workload(ns, "llm-0", "bogus"))
	blocked := map[string]string{"namespace": ns, "pod": "llm-0", "layer": "node", "reason": "node_prepare_failed"}

	registryPrefix := reg.host + "/" + registryNamespace
	t.Run("install", func(t *testing.T) {
		begin := time.Now()
		const release, chartNS = "dra-exporter-oci", "dra-oci"
		out, err := helmCmd(t, "install", release, "oci://"+registryPrefix+"/charts/dra-exporter", "--version", chartVersion, "--plain-http",
			"--namespace", chartNS, "--create-namespace",
			// The one value: where make push put the images.
			"--set", "image.registry="+registryPrefix,
			"--wait", "--timeout", "3m")
		if err != nil {
			t.Fatalf("helm install oci://: %v\n%s\n%s", err, out, podsOf(chartNS))
		}
		defer uninstallLeavesNothing(t, a, release, chartNS)
		t.Logf("helm install oci://%s/charts/dra-exporter --version %s: %s", registryPrefix, chartVersion, time.Since(begin).Round(time.Second))

		for _, c := range []struct{ component, image string }{{"exporter", "dra-exporter"}, {"node-agent", "dra-exporter-node-agent"}} {
			pod := componentPod(t, chartNS, release, c.component)
			st := pod.Status.ContainerStatuses[0]
			want := registryPrefix + "/" + c.image
			if st.Image != want+":"+releaseVersion || st.ImageID != want+"@"+digests[c.image] {
				t.Errorf("%s runs image %s (%s), want %s:%s pulled by its pushed digest %s", c.component, st.Image, st.ImageID, want, releaseVersion, digests[c.image])
			}
			if st.RestartCount != 0 {
				t.Errorf("%s restarted %d times:\n%s", c.component, st.RestartCount, describe(pod))
			}
			// The kubelet pulled it (not "already present on machine").
			if e := podEvent(t, pod, "Pulled", "Successfully pulled image \""+want+":"+releaseVersion+"\""); e == "" {
				t.Errorf("no event says the kubelet pulled %s:%s for %s", want, releaseVersion, pod.Name)
			} else {
				t.Logf("%s: %s", pod.Name, e)
			}
			// And containerd fetched its manifest from the registry.
			if line := registryServed(t, reg, c.image, "containerd"); line == "" {
				t.Errorf("the registry's log has no GET of %s's manifest by containerd:\n%s", c.image, cluster.Tail(reg.log, 20))
			} else {
				t.Logf("registry: %s", line)
			}
		}
		pod := componentPod(t, chartNS, release, "exporter")
		inPod := &cluster.Exporter{URL: fmt.Sprintf("http://%s:9877", pod.Status.PodIP)}
		eventually(t, inPod, 60*time.Second, "the exporter pulled from the registry names the prepare failure", func(m cluster.Metrics) error {
			if err := one(m, "dra_exporter_apiserver_up", nil, 1); err != nil {
				return err
			}
			return one(m, "dra_pod_blocked", blocked, 1)
		})
		t.Logf("install checked in %s", time.Since(begin).Round(time.Second))
	})

	t.Run("krew", func(t *testing.T) {
		krewDir := os.Getenv(EnvKrewBin)
		if krewDir == "" {
			t.Fatalf("%s is not set (make krew builds krew and the Makefile sets it)", EnvKrewBin)
		}
		if _, err := os.Stat(filepath.Join(krewDir, "krew")); err != nil {
			t.Fatalf("krew (%s): %v (make krew builds it)", EnvKrewBin, err)
		}
		krewRoot := t.TempDir()
		cmd := exec.Command(filepath.Join(krewDir, "krew"), "install", "--manifest="+filepath.Join(dir, "dra-exporter.yaml"),
			"--archive="+filepath.Join(dir, "dra-exporter_"+releaseVersion+"_linux_amd64.tar.gz"))
		cmd.Env = append(os.Environ(), "KREW_ROOT="+krewRoot)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl krew install --manifest --archive: %v\n%s", err, b)
		}
		// kubectl runs this link for `kubectl dra-exporter`.
		plugin := filepath.Join(krewRoot, "bin", "kubectl-dra_exporter")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := cluster.Explain(ctx, plugin, env.kubeconfig, ns+"/llm-0")
		if err != nil {
			t.Fatalf("kubectl dra-exporter explain (krew's): %v\n%s", err, out)
		}
		for _, want := range []string{"node_prepare_failed", "unknown GPU sharing strategy: Bogus"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl dra-exporter explain %s/llm-0 (installed by krew): want %q in:\n%s", ns, want, out)
			}
		}
		t.Logf("kubectl dra-exporter explain %s/llm-0 (installed by krew):\n%s", ns, out)
	})

	t.Run("upgrade", func(t *testing.T) {
		begin := time.Now()
		const release, chartNS = "dra-exporter-upgrade", "dra-upgrade"
		pushPreviousChart(t, helm, reg)
		// The previous chart has no image.registry: its repositories name
		// the registry, and its appVersion (v0.0.9) no image: the tag is the
		// release's (no image of a previous release exists either).
		out, err := helmCmd(t, "install", release, "oci://"+registryPrefix+"/charts/dra-exporter", "--version", previousChartVersion, "--plain-http",
			"--namespace", chartNS, "--create-namespace",
			"--set", "image.repository="+registryPrefix+"/dra-exporter", "--set", "image.tag="+releaseVersion,
			"--set", "nodeAgent.image.repository="+registryPrefix+"/dra-exporter-node-agent", "--set", "nodeAgent.image.tag="+releaseVersion,
			"--wait", "--timeout", "3m")
		if err != nil {
			t.Fatalf("helm install the previous chart: %v\n%s\n%s", err, out, podsOf(chartNS))
		}
		uninstalled := false
		defer func() {
			if !uninstalled {
				uninstallLeavesNothing(t, a, release, chartNS)
			}
		}()
		before := componentPod(t, chartNS, release, "exporter")
		services, err := env.cp.Client.CoreV1().Services(chartNS).List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=exporter"})
		if err != nil || len(services.Items) != 1 {
			t.Fatalf("the exporter's Service: %v %v", err, services)
		}
		service := services.Items[0].Name
		agentServices, err := env.cp.Client.CoreV1().Services(chartNS).List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=node-agent"})
		if err != nil || len(agentServices.Items) != 1 {
			t.Fatalf("the node agent's Service: %v %v", err, agentServices)
		}

		s := scrapeService(chartNS, service, "dra_exporter_apiserver_up", 500*time.Millisecond)
		// The node agent too, for the record: its DaemonSet cannot surge
		// (one pod per node), so its node's agent is away while it is
		// replaced; docs/install.md says for how long.
		agentScrapes := scrapeService(chartNS, agentServices.Items[0].Name, "dra_node_podresources_up", 500*time.Millisecond)
		upgradeStart := time.Now()
		out, err = helmCmd(t, "upgrade", release, "oci://"+registryPrefix+"/charts/dra-exporter", "--version", chartVersion, "--plain-http",
			"--namespace", chartNS, "--set", "image.registry="+registryPrefix, "--wait", "--timeout", "3m")
		upgraded := time.Since(upgradeStart)
		if err != nil {
			s.stop()
			agentScrapes.stop()
			t.Fatalf("helm upgrade: %v\n%s\n%s", err, out, podsOf(chartNS))
		}
		// The old pod must be gone and the new one serving before the
		// scraping stops: the whole hand-over is watched.
		var after *corev1.Pod
		err = cluster.WaitFor(context.Background(), 90*time.Second, "the previous exporter pod gone", func(ctx context.Context) (bool, error) {
			pods, err := env.cp.Client.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=exporter"})
			if err != nil || len(pods.Items) != 1 || pods.Items[0].UID == before.UID || !ready(&pods.Items[0]) {
				return false, nil
			}
			after = &pods.Items[0]
			return true, nil
		})
		if err == nil {
			// And the new agent Ready.
			componentPod(t, chartNS, release, "node-agent")
		}
		time.Sleep(3 * time.Second)
		r := s.stop()
		t.Logf("the node agent's Service during the upgrade (not a requirement): %s", agentScrapes.stop())
		if err != nil {
			t.Fatalf("%v\n%s", err, podsOf(chartNS))
		}
		t.Logf("helm upgrade %s -> %s in %s; %s", previousChartVersion, chartVersion, upgraded.Round(time.Second), r)
		if r.scrapes < 10 {
			t.Errorf("only %d scrapes during the upgrade: too few to tell", r.scrapes)
		}
		if r.missed > 1 {
			t.Errorf("the exporter missed %d scrapes during the upgrade, want at most 1: %s", r.missed, r)
		}
		if !r.served[before.Status.PodIP] || !r.served[after.Status.PodIP] {
			t.Errorf("the scrapes did not span the hand-over from %s to %s: %s", before.Status.PodIP, after.Status.PodIP, r)
		}
		if after.Labels["helm.sh/chart"] != "dra-exporter-"+chartVersion || after.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the exporter after the upgrade: chart %q, %d restarts", after.Labels["helm.sh/chart"], after.Status.ContainerStatuses[0].RestartCount)
		}
		// The PodDisruptionBudget covers the new pod (evictions, drains).
		pdbs, err := env.cp.Client.PolicyV1().PodDisruptionBudgets(chartNS).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(pdbs.Items) != 1 || pdbs.Items[0].Status.ExpectedPods != 1 || pdbs.Items[0].Status.CurrentHealthy != 1 {
			t.Errorf("the exporter's PodDisruptionBudget after the upgrade: %v %+v", err, pdbs)
		}
		agent := componentPod(t, chartNS, release, "node-agent")
		if agent.Labels["helm.sh/chart"] != "dra-exporter-"+chartVersion || agent.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the node agent after the upgrade: chart %q, %d restarts", agent.Labels["helm.sh/chart"], agent.Status.ContainerStatuses[0].RestartCount)
		}
		inPod := &cluster.Exporter{URL: fmt.Sprintf("http://%s:9877", after.Status.PodIP)}
		eventually(t, inPod, 60*time.Second, "the upgraded exporter names the prepare failure", func(m cluster.Metrics) error {
			return one(m, "dra_pod_blocked", blocked, 1)
		})
		t.Logf("upgrade checked in %s", time.Since(begin).Round(time.Second))

		// helm uninstall, and a check that is not blind: a ConfigMap with
		// the release's label that helm never made (as a hook or an operator
		// could leave) must be all that is found.
		stray := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: chartNS,
			Labels: map[string]string{"app.kubernetes.io/instance": release}}}
		if _, err := env.cp.Client.CoreV1().ConfigMaps(chartNS).Create(context.Background(), stray, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		uninstalled = true
		left := uninstallLeftovers(t, a, release, chartNS)
		if !slices.Equal(left, []string{"configmaps stray"}) {
			t.Errorf("after helm uninstall %s (and a stray ConfigMap of its label), left: %v, want only the stray", release, left)
		}
		_ = env.cp.Client.CoreV1().ConfigMaps(chartNS).Delete(context.Background(), "stray", metav1.DeleteOptions{})
	})
}

// pushPreviousChart packages the chart of main at previousChartCommit as
// previousChartVersion (git archive of the chart and the rules and
// dashboards its files/ symlinks point at) and pushes it with helm.
func pushPreviousChart(t *testing.T, helm string, reg *ociRegistry) {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("git", "archive", "--format=tar", previousChartCommit, "deploy/helm/dra-exporter", "rules", "dashboards")
	archive.Dir = repoPath(".")
	tarball, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v", previousChartCommit, err)
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = bytes.NewReader(tarball)
	if b, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, b)
	}
	pkg := t.TempDir()
	if b, err := exec.Command(helm, "package", filepath.Join(src, "deploy/helm/dra-exporter"), "--version", previousChartVersion,
		"--app-version", "v"+previousChartVersion, "--destination", pkg).CombinedOutput(); err != nil {
		t.Fatalf("helm package (%s): %v\n%s", previousChartCommit, err, b)
	}
	if b, err := exec.Command(helm, "push", filepath.Join(pkg, "dra-exporter-"+previousChartVersion+".tgz"),
		"oci://"+reg.host+"/"+registryNamespace+"/charts", "--plain-http").CombinedOutput(); err != nil {
		t.Fatalf("helm push the previous chart: %v\n%s", err, b)
	}
}

// componentPod waits for the one Ready pod of a component of a release.
func componentPod(t *testing.T, ns, release, component string) *corev1.Pod {
	t.Helper()
	pods, err := env.cp.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=" + component})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the %s pod of %s: %v\n%s", component, release, err, podsOf(ns))
	}
	return waitPod(t, ns, pods.Items[0].Name, "Ready", 2*time.Minute, ready)
}

// podEvent finds the pod's event of reason whose message starts with
// message ("" if none).
func podEvent(t *testing.T, pod *corev1.Pod, reason, message string) string {
	t.Helper()
	events, err := env.cp.Client.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Message, message) {
			return e.Message
		}
	}
	return ""
}

// registryServed finds the registry's access log line of a GET of the
// image's manifest by a client whose user agent contains agent ("" if
// none).
func registryServed(t *testing.T, reg *ociRegistry, image, agent string) string {
	t.Helper()
	f, err := os.Open(reg.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	path := "/v2/" + registryNamespace + "/" + image + "/manifests/"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "\"GET "+path) && strings.Contains(line, agent) {
			return line
		}
	}
	return ""
}

// serviceScraper scrapes a Service as a client of it would, through its
// ready endpoints (the EndpointSlices' addresses; no kube-proxy routes the
// Service's IP here): every interval, each ready endpoint; the scrape is
// served when one of them answers with family at 1 (the exporter's
// dra_exporter_apiserver_up, the agent's dra_node_podresources_up).
type serviceScraper struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	res  scrapeResult
}

type scrapeResult struct {
	scrapes, missed int
	misses          []string
	served          map[string]bool // pod IPs that served
}

func (r scrapeResult) String() string {
	var ips []string
	for ip := range r.served {
		ips = append(ips, ip)
	}
	slices.Sort(ips)
	return fmt.Sprintf("%d scrapes, %d missed %v, served by %v", r.scrapes, r.missed, r.misses, ips)
}

func scrapeService(ns, service, family string, interval time.Duration) *serviceScraper {
	s := &serviceScraper{done: make(chan struct{}), res: scrapeResult{served: map[string]bool{}}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			ip, err := s.scrapeOnce(ns, service, family)
			s.mu.Lock()
			s.res.scrapes++
			if err != nil {
				s.res.missed++
				s.res.misses = append(s.res.misses, time.Now().Format("15:04:05.000")+": "+err.Error())
			} else {
				s.res.served[ip] = true
			}
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *serviceScraper) scrapeOnce(ns, service, family string) (string, error) {
	// The API server's answer is not the exporter's: on a loaded machine a
	// list can take over a second, which is no missed scrape.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps, err := env.cp.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	if err != nil {
		return "", fmt.Errorf("endpoint slices: %w", err)
	}
	var errs []string
	for _, sl := range eps.Items {
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
				continue
			}
			for _, port := range sl.Ports {
				if port.Port == nil {
					continue
				}
				target := &cluster.Exporter{URL: fmt.Sprintf("http://%s:%d", ep.Addresses[0], *port.Port)}
				m, err := target.Scrape()
				if err == nil {
					err = one(m, family, nil, 1)
				}
				if err == nil {
					return ep.Addresses[0], nil
				}
				errs = append(errs, ep.Addresses[0]+": "+err.Error())
			}
		}
	}
	if len(errs) == 0 {
		return "", fmt.Errorf("no ready endpoint of %s/%s", ns, service)
	}
	return "", fmt.Errorf("%s", strings.Join(errs, "; "))
}

func (s *serviceScraper) stop() scrapeResult {
	close(s.done)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res
}

// uninstallLeavesNothing uninstalls a release and fails the test with
// whatever of it is left (uninstallLeftovers).
func uninstallLeavesNothing(t *testing.T, a *cluster.Applier, release, ns string) {
	t.Helper()
	if left := uninstallLeftovers(t, a, release, ns); len(left) > 0 {
		t.Errorf("after helm uninstall %s, left: %v", release, left)
	}
}

// uninstallLeftovers uninstalls a release and lists what of it is left:
// every object helm installed (its manifest: the workloads, Services,
// ServiceAccounts, ClusterRoles and ClusterRoleBindings, the
// PodDisruptionBudget, the ServiceMonitors, the PrometheusRule, the
// dashboards' ConfigMap), every object labelled with the release (what its
// controllers made: pods, ReplicaSets, ControllerRevisions,
// EndpointSlices; and ConfigMaps, Secrets, Services, ServiceAccounts,
// ClusterRoles, ClusterRoleBindings) and helm's own release records. The
// pods and what the controllers made get 90 s to be collected.
func uninstallLeftovers(t *testing.T, a *cluster.Applier, release, ns string) []string {
	t.Helper()
	ctx := context.Background()
	manifest, err := helmCmd(t, "get", "manifest", release, "--namespace", ns)
	if err != nil {
		return []string{fmt.Sprintf("helm get manifest: %v\n%s", err, manifest)}
	}
	var objs []map[string]any
	kinds := map[string]bool{}
	for _, doc := range strings.Split("\n"+manifest, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return []string{fmt.Sprintf("helm get manifest: %v", err)}
		}
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, obj)
		kinds[(&unstructured.Unstructured{Object: obj}).GetKind()] = true
	}
	var left []string
	// The chart's default rendering: a check of fewer kinds would miss some.
	for _, k := range []string{"Deployment", "DaemonSet", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
		"PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "ConfigMap"} {
		if !kinds[k] {
			left = append(left, fmt.Sprintf("(the release installed no %s: %v)", k, kinds))
		}
	}
	if out, err := helmCmd(t, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m"); err != nil {
		return append(left, fmt.Sprintf("helm uninstall: %v\n%s", err, out))
	}
	for _, obj := range objs {
		u := &unstructured.Unstructured{Object: obj}
		if u.GetNamespace() == "" {
			u.SetNamespace(ns) // helm installs namespaced objects into the release's namespace
		}
		res, err := a.Resource(u.Object)
		if err != nil {
			left = append(left, err.Error())
			continue
		}
		if _, err := res.Get(ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("%s %s/%s (%v)", u.GetKind(), u.GetNamespace(), u.GetName(), err))
		}
	}
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	labelled := func(ctx context.Context, gvrs []schema.GroupVersionResource, namespaced bool) []string {
		var found []string
		for _, gvr := range gvrs {
			var list *unstructured.UnstructuredList
			var err error
			if namespaced {
				list, err = a.Dyn.Resource(gvr).Namespace(ns).List(ctx, selector)
			} else {
				list, err = a.Dyn.Resource(gvr).List(ctx, selector)
			}
			if err != nil {
				found = append(found, gvr.Resource+": "+err.Error())
				continue
			}
			for _, i := range list.Items {
				found = append(found, gvr.Resource+" "+i.GetName())
			}
		}
		return found
	}
	// What the controllers made goes with the garbage collector.
	var collected []string
	err = cluster.WaitFor(ctx, 90*time.Second, "the pods and what the controllers made of "+release+" collected", func(ctx context.Context) (bool, error) {
		collected = labelled(ctx, []schema.GroupVersionResource{
			{Version: "v1", Resource: "pods"}, {Group: "apps", Version: "v1", Resource: "replicasets"},
			{Group: "apps", Version: "v1", Resource: "controllerrevisions"}, {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
		}, true)
		return len(collected) == 0, nil
	})
	if err != nil {
		left = append(left, collected...)
	}
	left = append(left, labelled(ctx, []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "services"},
		{Version: "v1", Resource: "serviceaccounts"},
	}, true)...)
	left = append(left, labelled(ctx, []schema.GroupVersionResource{
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	}, false)...)
	records, err := env.cp.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + release})
	if err != nil {
		left = append(left, "helm's records: "+err.Error())
	} else {
		for _, s := range records.Items {
			left = append(left, "helm record "+s.Name)
		}
	}
	return left
}
