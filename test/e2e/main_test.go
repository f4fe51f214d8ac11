// Package e2e tests dra-exporter against a real control plane: the real
// kube-apiserver validates resource.k8s.io/v1, the real scheduler's
// DynamicResources plugin allocates devices and writes reservedFor, the real
// resourceclaim controller creates and cleans up claims. The test plays the
// kubelet. The exporter runs as a subprocess under exactly the ClusterRole of
// deploy/manifests.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// env is shared by every test: one control plane and one exporter.
var env struct {
	skip       string // why the suite cannot run
	cp         *cluster.ControlPlane
	exp        *cluster.Exporter
	exporter   string // binary
	kubeconfig string // the exporter's read-only kubeconfig
	kubelet    cluster.Kubelet
	dir        string
}

// The simulated cluster: two DRA nodes with four H100 each, one DRA node
// with two L4 (for capacity tests), and one device-plugin node.
var nodes = []cluster.GPUNode{
	{Name: "gpu-node-1", GPUs: 4},
	{Name: "gpu-node-2", GPUs: 4},
	{Name: "gpu-node-3", GPUs: 2, Product: "NVIDIA L4"},
	{Name: "dp-node-1", DevicePluginGPUs: 8},
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	binDir, err := cluster.BinDir()
	if err == nil {
		env.exporter = os.Getenv(cluster.EnvExporter)
		if env.exporter == "" {
			err = fmt.Errorf("%s is not set (make test builds bin/dra-exporter and sets it)", cluster.EnvExporter)
		} else if _, statErr := os.Stat(env.exporter); statErr != nil {
			err = statErr
		}
	}
	if err != nil {
		env.skip = err.Error()
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "dra-e2e-")
	if err != nil {
		env.skip = err.Error()
		return m.Run()
	}
	env.dir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	env.cp, err = cluster.Start(ctx, binDir, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		return 1
	}
	defer env.cp.Stop()
	fmt.Printf("control plane %s ready in %s (logs in %s)\n", env.cp.Version, time.Since(start).Round(time.Millisecond), dir)
	env.kubelet = cluster.Kubelet{Client: env.cp.Client}
	if err := seed(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		fmt.Fprintln(os.Stderr, env.cp.Logs(20))
		return 1
	}
	env.kubeconfig, err = cluster.ExporterKubeconfig(ctx, env.cp, repoPath("deploy/manifests/clusterrole.yaml"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter credentials:", err)
		return 1
	}
	env.exp, err = cluster.StartExporter(ctx, env.exporter, env.kubeconfig, dir, "--claim.unreserved-grace-period=3s")
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter:", err)
		return 1
	}
	defer env.exp.Stop()
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "----- dra-exporter (%s)\n%s\n", env.exp.Log, cluster.Tail(env.exp.Log, 40))
		fmt.Fprintln(os.Stderr, env.cp.Logs(40))
	} else {
		os.RemoveAll(dir)
	}
	return code
}

func seed(ctx context.Context) error {
	if err := cluster.CreateNVIDIAClasses(ctx, env.cp.Client); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := cluster.AddNode(ctx, env.cp.Client, n); err != nil {
			return err
		}
	}
	return nil
}

func repoPath(rel string) string { return filepath.Join("..", "..", rel) }

// requireCluster skips or fails a test when the control plane cannot run.
// Skipping needs both: binaries absent and DRA_E2E_SKIP=1.
func requireCluster(t *testing.T) {
	t.Helper()
	if env.skip == "" {
		return
	}
	if os.Getenv(cluster.EnvSkip) == "1" {
		t.Skipf("e2e skipped (%s=1): %s", cluster.EnvSkip, env.skip)
	}
	t.Fatalf("e2e cannot run: %s", env.skip)
}

// requireFeature skips a test whose Kubernetes feature the control plane's
// release does not have (make test-compat runs the suite on older
// releases): the test would prove nothing there, and the exporter has
// nothing of the feature to read.
func requireFeature(t *testing.T, features ...cluster.Feature) {
	t.Helper()
	requireCluster(t)
	for _, f := range features {
		if why := env.cp.Version.Missing(f); why != "" {
			t.Skip(why)
		}
	}
}

// namespace creates a namespace for one test and, at its end, force-deletes
// its pods so that their devices return to the pool.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if err := cluster.CreateNamespace(ctx, env.cp.Client, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pods, err := env.cp.Client.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, p := range pods.Items {
				_ = cluster.ForceDelete(ctx, env.cp.Client, name, p.Name)
			}
		}
		_ = env.cp.Client.ResourceV1().ResourceClaims(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return name
}

// eventually scrapes the exporter until check passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func(m cluster.Metrics) error) cluster.Metrics {
	t.Helper()
	return eventuallyOn(t, env.exp, timeout, what, check)
}

// one expects exactly one series matching labels, with value v.
func one(m cluster.Metrics, name string, labels map[string]string, v float64) error {
	return m.One(name, labels, v)
}

func none(m cluster.Metrics, name string, labels map[string]string) error {
	return m.None(name, labels)
}

func createPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := cluster.CreatePod(context.Background(), env.cp.Client, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return created
}

func scheduled(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := cluster.WaitScheduled(context.Background(), env.cp.Client, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// generatedClaim returns the name of the claim generated for the pod's
// claim "gpu", waiting for the controller to record it.
func generatedClaim(t *testing.T, ns, pod string) string {
	t.Helper()
	var name string
	err := cluster.WaitFor(context.Background(), 30*time.Second, "claim of "+ns+"/"+pod, func(ctx context.Context) (bool, error) {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == "gpu" && s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// explain runs `dra-exporter explain` with the exporter's read-only
// credentials and checks that its verdict contains want.
func explain(t *testing.T, target, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := cluster.Explain(ctx, env.exporter, env.kubeconfig, target)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, want) {
		t.Fatalf("explain %s: want %q in:\n%s", target, want, out)
	}
	return out
}

func blockedLabels(ns, pod, layer, reason string) map[string]string {
	return map[string]string{"namespace": ns, "pod": pod, "layer": layer, "reason": reason}
}

var _ = ptr.To[int]

// allocatedPod creates a pod with a template claim "gpu" of the GPU class
// in ns, waits for the real scheduler to allocate and bind it, and returns
// the pod as bound, its generated claim's name and the allocated device.
func allocatedPod(t *testing.T, ns, name string) (*corev1.Pod, string, resourceapi.DeviceRequestAllocationResult) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "gpu", metav1.GetOptions{}); err != nil {
		if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPod(t, cluster.PodWithTemplate(ns, name, "gpu"))
	bound := scheduled(t, ns, name)
	claim := generatedClaim(t, ns, name)
	c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || c.Status.Allocation == nil {
		t.Fatalf("claim %s not allocated: %v", claim, err)
	}
	return bound, claim, c.Status.Allocation.Devices.Results[0]
}
