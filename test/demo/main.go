// Command demo starts a real local control plane with three simulated GPU
// nodes, seeds a mix of healthy and failing DRA workloads, runs dra-exporter
// (under its read-only ClusterRole) and Prometheus with the rule bundle, and
// keeps a replica churning so that the latency histograms fill. It runs
// until interrupted. `make demo` builds what is missing and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

const ns = "demo"

func main() {
	keep := flag.Bool("keep", false, "keep the working directory (logs, kubeconfigs) after exit")
	fastAlerts := flag.Bool("fast-alerts", true, "rewrite every `for:` of the rules to 0s so that alerts fire within seconds")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if err := run(*keep, *fastAlerts); err != nil {
		log.Fatal(err)
	}
}

func run(keep, fastAlerts bool) error {
	binDir, err := cluster.BinDir()
	if err != nil {
		return err
	}
	exporter := os.Getenv(cluster.EnvExporter)
	if exporter == "" {
		exporter = "bin/dra-exporter"
	}
	dir, err := os.MkdirTemp("", "dra-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	cp, err := cluster.Start(ctx, binDir, dir)
	if err != nil {
		return err
	}
	defer cp.Stop()
	log.Printf("control plane v1.37.2 ready in %s", time.Since(start).Round(time.Millisecond))
	if err := seed(ctx, cp); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	kubeconfig, err := cluster.ExporterKubeconfig(ctx, cp, "deploy/manifests/clusterrole.yaml")
	if err != nil {
		return err
	}
	exp, err := cluster.StartExporter(ctx, exporter, kubeconfig, dir)
	if err != nil {
		return err
	}
	defer exp.Stop()

	promURL := "(not started: run `make tools` to build Prometheus)"
	rules, _ := filepath.Glob("rules/*.yaml")
	if bin := os.Getenv(cluster.EnvPrometheus); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
				Binary: bin, Dir: filepath.Join(dir, "prometheus"), Target: exp.URL[len("http://"):],
				Interval: 5 * time.Second, RuleFiles: rules, ZeroFor: fastAlerts,
			})
			if err != nil {
				return err
			}
			defer prom.Stop()
			promURL = prom.URL + "/api/v1/alerts"
		}
	}

	fmt.Printf(`
dra-exporter demo is running (Ctrl-C to stop)

  API server        %s   (admin kubeconfig: %s)
  exporter metrics  %s/metrics
  readiness         %s/readyz
  Prometheus alerts %s
  working dir       %s

Try:
  curl -s %s/metrics | grep -E '^dra_pod_blocked|^dra_claim_reservation_leak'
  bin/dra-exporter explain --kubeconfig %s %s/negative-control
  bin/dra-exporter explain --kubeconfig %s %s/llm-canary

`, cp.APIServer, cp.Kubeconfig, exp.URL, exp.URL, promURL, dir, exp.URL, kubeconfig, ns, kubeconfig, ns)

	churn(ctx, cp)
	log.Print("stopping")
	return nil
}

// seed creates three GPU nodes and one workload per interesting state.
func seed(ctx context.Context, cp *cluster.ControlPlane) error {
	c := cp.Client
	kubelet := cluster.Kubelet{Client: c}
	if err := cluster.CreateNVIDIAClasses(ctx, c); err != nil {
		return err
	}
	for _, n := range []cluster.GPUNode{
		{Name: "gpu-node-1", GPUs: 4},
		{Name: "gpu-node-2", GPUs: 4},
		{Name: "gpu-node-3", GPUs: 2, Product: "NVIDIA L4"},
	} {
		if err := cluster.AddNode(ctx, c, n); err != nil {
			return err
		}
	}
	if err := cluster.CreateNamespace(ctx, c, ns); err != nil {
		return err
	}
	templates := []*resourceapi.ResourceClaimTemplate{
		cluster.ClaimTemplate(ns, "llm-gpu", cluster.GPUClass),
		cluster.ClaimTemplate(ns, "b200", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"),
		cluster.ClaimTemplate(ns, "l4", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'"),
		cluster.ClaimTemplate(ns, "typo", "gpu.nvidia.co"),
	}
	for _, t := range templates {
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	steps := []struct {
		name, template string
		then           func(string) error
	}{
		{"llm-canary", "llm-gpu", func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{"llm-loading", "llm-gpu", func(n string) error { return kubelet.SetRunning(ctx, ns, n, false) }},
		{"llm-prepare", "llm-gpu", func(n string) error {
			if err := kubelet.SetContainerCreating(ctx, ns, n); err != nil {
				return err
			}
			p, err := c.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return kubelet.PrepareFailed(ctx, p, "NodePrepareResources failed: CDI spec generation failed: nvidia-container-toolkit: failed to get device info")
		}},
		{"l4-worker-0", "l4", func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{"l4-worker-1", "l4", func(n string) error { return kubelet.SetRunning(ctx, ns, n, true) }},
		{"l4-worker-2", "l4", nil},
		{"negative-control", "b200", nil},
		{"typo-class", "typo", nil},
	}
	for _, s := range steps {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, cluster.PodWithTemplate(ns, s.name, s.template), metav1.CreateOptions{}); err != nil {
			return err
		}
		if s.then == nil {
			continue
		}
		if _, err := cluster.WaitScheduled(ctx, c, ns, s.name); err != nil {
			return err
		}
		if err := s.then(s.name); err != nil {
			return err
		}
	}
	// A claim shared by two pods, and a pod served through the extended
	// resource nvidia.com/gpu.
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared-gpu"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, n := range []string{"reranker-a", "reranker-b"} {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, cluster.PodWithClaim(ns, n, "shared-gpu"), metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := cluster.WaitScheduled(ctx, c, ns, n); err != nil {
			return err
		}
		if err := kubelet.SetRunning(ctx, ns, n, true); err != nil {
			return err
		}
	}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, cluster.PodWithGPUs(ns, "llm-extended", 1), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cluster.WaitScheduled(ctx, c, ns, "llm-extended"); err != nil {
		return err
	}
	return kubelet.SetRunning(ctx, ns, "llm-extended", true)
}

// churn creates and deletes one replica every few seconds, as a rolling
// Deployment would, so that allocation, startup and release latencies flow.
func churn(ctx context.Context, cp *cluster.ControlPlane) {
	kubelet := cluster.Kubelet{Client: cp.Client}
	for i := 0; ; i++ {
		name := fmt.Sprintf("llm-replica-%d", i)
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, cluster.PodWithTemplate(ns, name, "llm-gpu"), metav1.CreateOptions{}); err == nil {
			if _, err := cluster.WaitScheduled(ctx, cp.Client, ns, name); err == nil {
				_ = kubelet.SetRunning(ctx, ns, name, true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
		_ = cluster.ForceDelete(ctx, cp.Client, ns, name)
	}
}
