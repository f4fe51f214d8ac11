package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/deploy/helm"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestDeployApply applies what users apply, the README's kubectl path
// (deploy/manifests and deploy/prometheus, the chart with default values) and
// a non-default rendering of the chart (three shards, hostPID, a non-root
// agent, a standalone host engine, a web config with TLS and basic auth), to
// the real kube-apiserver with the
// prometheus-operator CRDs installed: server-side apply with strict field
// validation, so an unknown or mistyped field fails. The sharded exporter
// goes into a namespace that enforces the restricted Pod Security level, and
// the StatefulSet controller must create its three pods there (no kubelet
// runs them): the pod template passes PodSecurity admission.
func TestDeployApply(t *testing.T) {
	requireCluster(t)
	helmBin := os.Getenv(helm.EnvHelm)
	if helmBin == "" {
		t.Skipf("%s is not set: `make helm` builds helm and the Makefile exports it", helm.EnvHelm)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := newApplier(t)
	a.installCRDs(ctx, t, "monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")

	// The README's kubectl path: exactly the files of the two kustomizations.
	for _, dir := range []string{"deploy/manifests", "deploy/prometheus"} {
		for _, o := range kustomization(t, repoPath(dir)) {
			a.apply(ctx, t, o)
		}
	}

	// A non-default rendering, in a restricted namespace for the exporter...
	const restricted = "dra-deploy-restricted"
	createLabelledNamespace(ctx, t, restricted, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	objs, err := helm.Template(helmBin, repoPath("."), "dra-sharded", restricted,
		"exporter.shards=3", "nodeAgent.enabled=false", "serviceMonitor.labels.release=kube-prometheus-stack")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		a.apply(ctx, t, o.Obj)
	}
	// ... and the agent's non-default settings in a namespace of its own.
	const agentNS = "dra-deploy-agent"
	createLabelledNamespace(ctx, t, agentNS, map[string]string{"pod-security.kubernetes.io/enforce": "privileged"})
	objs, err = helm.Template(helmBin, repoPath("."), "dra-agent", agentNS,
		"nodeAgent.hostPID=true", "nodeAgent.runAsUser=65534", "nodeAgent.dcgm.hostengineAddress=nvidia-dcgm.gpu-operator.svc:5555",
		"dashboards.enabled=false", "prometheusRule.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		a.apply(ctx, t, o.Obj)
	}

	// ... and the web config (TLS and basic auth): its Secret, the mounts,
	// the probe port and the ServiceMonitors' scheme, tlsConfig and basicAuth
	// pass the real schemas.
	const webNS = "dra-deploy-web"
	createLabelledNamespace(ctx, t, webNS, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	objs, err = helm.Template(helmBin, repoPath("."), "dra-web", webNS,
		"web.config.tls_server_config.cert_file=/etc/dra-exporter/tls/tls.crt", "web.config.tls_server_config.key_file=/etc/dra-exporter/tls/tls.key",
		"web.config.basic_auth_users.prometheus=$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi", "web.tlsSecret=dra-exporter-tls",
		"serviceMonitor.basicAuth.secretName=dra-exporter-scrape", "serviceMonitor.tlsConfig.ca.secret.name=dra-exporter-tls",
		"serviceMonitor.tlsConfig.ca.secret.key=ca.crt", "serviceMonitor.tlsConfig.serverName=dra-web-dra-exporter."+webNS+".svc",
		"nodeAgent.enabled=false", "dashboards.enabled=false", "prometheusRule.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		a.apply(ctx, t, o.Obj)
	}

	err = cluster.WaitFor(ctx, 60*time.Second, "the StatefulSet's 3 pods in the restricted namespace", func(ctx context.Context) (bool, error) {
		pods, err := env.cp.Client.CoreV1().Pods(restricted).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=exporter"})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 3, nil
	})
	if err != nil {
		sts, _ := env.cp.Client.AppsV1().StatefulSets(restricted).Get(ctx, "dra-sharded-dra-exporter", metav1.GetOptions{})
		t.Fatalf("%v; StatefulSet status %+v", err, sts.Status)
	}
	pod, err := env.cp.Client.CoreV1().Pods(restricted).Get(ctx, "dra-sharded-dra-exporter-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pod.Spec.Containers[0].Args, " "); !strings.Contains(got, "--auto-sharding --total-shards=3") {
		t.Errorf("shard pod args %q", got)
	}
	for _, ns := range []string{restricted, agentNS, webNS} {
		_ = env.cp.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}
}

// TestChartAccountsReadOnly is the RBAC proof on the chart's own
// ServiceAccounts (as TestDeployApply applied them): the node agent runs with
// a token of its account and becomes ready (its node-scoped watches and its
// claim gets are allowed); writes with either account's token are forbidden,
// and so are the agent's cluster-wide claim list and the exporter's secrets.
// (The exporter itself runs with a token of its account for the whole suite.)
func TestChartAccountsReadOnly(t *testing.T) {
	requireCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentAccount := readObject(t, repoPath("deploy/manifests/node-agent-serviceaccount.yaml"))
	// The chart's objects, whether or not TestDeployApply ran first.
	a := newApplier(t)
	for _, f := range []string{"serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml",
		"node-agent-serviceaccount.yaml", "node-agent-clusterrole.yaml", "node-agent-clusterrolebinding.yaml"} {
		a.apply(ctx, t, readObject(t, repoPath("deploy/manifests/"+f)))
	}

	_, exporterClient := tokenKubeconfig(ctx, t, cluster.ExporterAccount)
	agentName, _, _ := unstructured.NestedString(agentAccount, "metadata", "name")
	agentKubeconfig, agentClient := tokenKubeconfig(ctx, t, agentName)

	for name, c := range map[string]kubernetes.Interface{"exporter": exporterClient, "node agent": agentClient} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"}}
		if _, err := c.CoreV1().ConfigMaps(cluster.ExporterNamespace).Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: create ConfigMap: %v, want Forbidden", name, err)
		}
		if err := c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: delete pods: %v, want Forbidden", name, err)
		}
		patch := []byte(`{"metadata":{"labels":{"rbac-probe":"x"}}}`)
		if _, err := c.CoreV1().Nodes().Patch(ctx, "gpu-node-1", types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: patch Node: %v, want Forbidden", name, err)
		}
		if err := c.ResourceV1().ResourceClaims("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s: delete ResourceClaims: %v, want Forbidden", name, err)
		}
	}
	if _, err := exporterClient.CoreV1().Secrets(cluster.ExporterNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("exporter: list Secrets: %v, want Forbidden", err)
	}
	if _, err := agentClient.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node agent: list ResourceClaims cluster-wide: %v, want Forbidden (it gets claims by name)", err)
	}
	if _, err := agentClient.CoreV1().Events("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node agent: list Events: %v, want Forbidden", err)
	}

	// The agent itself, under that token, on a simulated node.
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logPath := filepath.Join(t.TempDir(), "node-agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The chart's --gpu.source=auto on a machine without libdcgm or libnvidia-ml (as a node without
	// the NVIDIA runtime): the agent starts, reports the source unavailable and serves the rest.
	cmd := exec.Command(env.exporter, "node", "--node-name=gpu-node-1", "--gpu.source=auto", "--kubelet.pod-resources-socket=",
		"--proc-root=", "--kubeconfig="+agentKubeconfig, "--web.listen-address="+addr, "--log.level=debug")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait(); logFile.Close() })
	err = cluster.WaitFor(ctx, 60*time.Second, "node agent /readyz", func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%v; log:\n%s", err, cluster.Tail(logPath, 30))
	}
	if log := cluster.Tail(logPath, 200); strings.Contains(log, "forbidden") {
		t.Errorf("the node agent hit a forbidden request under its chart role:\n%s", log)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`dra_gpu_source_up{source="auto"} 0`, `dra_exporter_informer_synced{resource="pods"} 1`,
		`dra_exporter_watch_errors_total{reason="forbidden",resource="resourceslices"} 0`, `dra_exporter_watch_healthy{resource="pods"} 1`, `dra_node_claim_fetch_errors_total{reason="forbidden"} 0`, "dra_node_podresources_up 0"} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("the node agent's /metrics lacks %s", want)
		}
	}
}

// applier is cluster.Applier failing the test on an error.
type applier struct{ *cluster.Applier }

func newApplier(t *testing.T) *applier {
	t.Helper()
	a, err := cluster.NewApplier(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{a}
}

func (a *applier) apply(ctx context.Context, t *testing.T, obj map[string]any) {
	t.Helper()
	if err := a.Apply(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// installCRDs applies CRDs from the prometheus-operator module and waits
// until they are established.
func (a *applier) installCRDs(ctx context.Context, t *testing.T, files ...string) {
	t.Helper()
	paths, err := cluster.PromOperatorCRDFiles(ctx, files...)
	if err == nil {
		err = a.InstallCRDs(ctx, paths...)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	obj, err := cluster.ReadObject(path)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// kustomization reads the objects of a kustomization's resources (plain
// files only, which is all deploy/ uses).
func kustomization(t *testing.T, dir string) []map[string]any {
	t.Helper()
	k := readObject(t, filepath.Join(dir, "kustomization.yaml"))
	var out []map[string]any
	for _, r := range k["resources"].([]any) {
		data, err := os.ReadFile(filepath.Join(dir, r.(string)))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := helm.Split(data)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		for _, o := range objs {
			out = append(out, o.Obj)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", dir)
	}
	return out
}

func createLabelledNamespace(ctx context.Context, t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := env.cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// tokenKubeconfig mints a token of a ServiceAccount of the exporter's
// namespace and returns a kubeconfig and a client that use only it.
func tokenKubeconfig(ctx context.Context, t *testing.T, account string) (string, kubernetes.Interface) {
	t.Helper()
	tok, err := env.cp.Client.CoreV1().ServiceAccounts(cluster.ExporterNamespace).CreateToken(ctx, account, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", account, err)
	}
	path := filepath.Join(t.TempDir(), account+".kubeconfig")
	if err := cluster.WriteKubeconfig(path, env.cp.APIServer, env.cp.CAFile(), tok.Status.Token); err != nil {
		t.Fatal(err)
	}
	cfg := *env.cp.Admin
	cfg.BearerToken, cfg.BearerTokenFile = tok.Status.Token, ""
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData, cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = nil, nil, "", ""
	cfg.Username, cfg.Password = "", ""
	c, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	return path, c
}
