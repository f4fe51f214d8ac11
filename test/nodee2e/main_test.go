// Package nodee2e tests dra-exporter and its node agent on a real node
// (test/node): the real scheduler allocates, the real kubelet calls the
// real DRA driver (kubernetes-sigs' dra-example-driver) to prepare and
// unprepare, containerd starts the containers with the devices CDI
// injected, and the kubelet's own pod-resources API and /metrics report it.
// The whole package runs inside the node's mount and network namespace
// (node.Run re-executes the test binary there), with its own control plane,
// exporter, node agent and Prometheus.
package nodee2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// env is shared by every test: one control plane, one real node, and the
// exporter, the node agent and Prometheus watching them.
var env struct {
	root       string
	cp         *cluster.ControlPlane
	node       *node.Node
	exporter   string // binary
	exp        *cluster.Exporter
	kubeconfig string // the exporter's read-only kubeconfig
	agent      *cluster.Exporter
	recording  string // the agent's GPU recording (rewritten by tests)
	prom       *cluster.Prometheus
}

func TestMain(m *testing.M) {
	os.Exit(node.Run(func(root string) int { return run(m, root) }))
}

func run(m *testing.M, root string) int {
	env.root = root
	bins, err := node.BinariesFromEnv()
	if err != nil {
		return fail("the real node's programs", err)
	}
	env.exporter = os.Getenv(cluster.EnvExporter)
	if env.exporter == "" {
		return fail("exporter", fmt.Errorf("%s is not set (make test builds bin/dra-exporter and sets it)", cluster.EnvExporter))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	binDir, _ := cluster.BinDir()
	env.cp, err = cluster.StartWithRealNode(ctx, binDir, filepath.Join(root, "controlplane"), cluster.RealNodeOptions{IP: node.NodeIP, Name: "real-node"})
	if err != nil {
		return fail("control plane", err)
	}
	defer env.cp.Stop()
	env.node, err = node.Start(ctx, env.cp, bins, root, node.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, env.cp.Logs(20))
		return fail("real node", err)
	}
	fmt.Printf("control plane and real node ready in %s (folder %s, %s)\n", time.Since(start).Round(time.Millisecond), root, diskFree(root))
	code := func() int {
		if err := startWatchers(ctx); err != nil {
			return fail("exporter, node agent, Prometheus", err)
		}
		defer stopWatchers()
		code := m.Run()
		if code != 0 {
			fmt.Fprintln(os.Stderr, env.node.Logs(40))
			if env.exp != nil {
				fmt.Fprintf(os.Stderr, "----- dra-exporter\n%s\n", cluster.Tail(env.exp.Log, 40))
			}
			if env.agent != nil {
				fmt.Fprintf(os.Stderr, "----- node agent\n%s\n", cluster.Tail(env.agent.Log, 40))
			}
			fmt.Fprintln(os.Stderr, env.cp.Logs(30))
		}
		return code
	}()
	if err := env.node.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the real node:", err)
		code = 1
	}
	return code
}

func fail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return 1
}

// startWatchers starts the exporter (under the chart's read-only
// ClusterRole), the node agent (under its own, with the real kubelet's
// pod-resources socket, the real /proc and a recorded GPU source listing
// the driver's devices) and Prometheus (scraping both and the kubelet's own
// /metrics, evaluating the rule bundle with every `for:` at 0s).
func startWatchers(ctx context.Context) error {
	var err error
	env.kubeconfig, err = cluster.ExporterKubeconfig(ctx, env.cp, repoPath("deploy/manifests/clusterrole.yaml"))
	if err != nil {
		return err
	}
	env.exp, err = cluster.StartExporter(ctx, env.exporter, env.kubeconfig, env.root)
	if err != nil {
		return err
	}
	agentConfig, err := cluster.AccountKubeconfig(ctx, env.cp, repoPath("deploy/manifests/node-agent-clusterrole.yaml"), cluster.NodeAgentAccount)
	if err != nil {
		return err
	}
	env.recording = filepath.Join(env.root, "gpu.json")
	if err := writeRecording(ctx, nil); err != nil {
		return err
	}
	env.agent, err = cluster.StartNodeAgent(ctx, env.exporter, agentConfig, env.root, env.node.Name,
		"--gpu.source=recorded", "--gpu.recorded-file="+env.recording,
		"--kubelet.pod-resources-socket="+node.PodResourcesSocket, "--proc-root=/proc",
		"--claim.refresh-interval=1s")
	if err != nil {
		return err
	}
	rules, err := filepath.Glob(repoPath("rules/*.yaml"))
	if err != nil || len(rules) == 0 {
		return fmt.Errorf("no rule files in rules/: %v", err)
	}
	prom := os.Getenv(cluster.EnvPrometheus)
	if prom == "" {
		return fmt.Errorf("%s is not set (make test builds Prometheus and sets it)", cluster.EnvPrometheus)
	}
	env.prom, err = cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary:    prom,
		Dir:       filepath.Join(env.root, "prometheus"),
		Target:    strings.TrimPrefix(env.exp.URL, "http://"),
		Interval:  time.Second,
		RuleFiles: rules,
		ZeroFor:   true,
		ExtraJobs: []cluster.ScrapeJob{
			{Name: "dra-node-agent", Target: strings.TrimPrefix(env.agent.URL, "http://"), HonorLabels: true},
			{Name: "kubelet", Target: fmt.Sprintf("%s:%d", env.node.IP, node.KubeletPort),
				BearerToken: cluster.AdminToken, Labels: map[string]string{"node": env.node.Name}},
			// The driver's own metrics (dra_example_driver_*), as a
			// PodMonitor on its kubelet plugin would scrape them.
			{Name: "dra-example-driver", Target: env.node.DriverMetricsTarget(), Labels: map[string]string{"node": env.node.Name}},
		},
	})
	return err
}

func stopWatchers() {
	if env.prom != nil {
		env.prom.Stop()
	}
	if env.agent != nil {
		env.agent.Stop()
	}
	if env.exp != nil {
		env.exp.Stop()
	}
}

func repoPath(rel string) string { return filepath.Join("..", "..", rel) }

// GPUProcess puts a process on the GPU of a device of the node's slice in
// the agent's recording.
type GPUProcess = node.GPUProcess

// writeRecording writes the agent's GPU recording (node.WriteRecording): one
// GPU per device of the driver's ResourceSlice, busy where procs run. The
// recorded source reads the file again on every scrape.
func writeRecording(ctx context.Context, procs []GPUProcess) error {
	return writeRecordingTo(ctx, env.recording, procs)
}

// writeRecordingTo writes such a recording to path.
func writeRecordingTo(ctx context.Context, path string, procs []GPUProcess) error {
	slice, err := env.node.Slice(ctx)
	if err != nil {
		return err
	}
	return node.WriteRecording(path, slice, procs)
}
