// Command demo starts a real local control plane with four simulated GPU
// nodes (three DRA, one device plugin), seeds a mix of healthy and failing
// DRA workloads (cluster.SeedDemo), runs dra-exporter
// (under its read-only ClusterRole), one node agent per node (recorded GPU
// source, simulated kubelet pod-resources; cluster.StartNodeAgents) and Prometheus with the rule bundle, and
// keeps a replica churning so that the latency histograms fill. Where the
// machine allows (root, namespaces, `make node-bins`), a real node joins
// them (test/node: a real kubelet, containerd and the dra-example-driver)
// with real pods through each gate: one that runs, a negative control and a
// prepare failure; the demo then runs inside the node's namespaces and the
// machine's loopback forwards its URLs. It prints commands to try, each
// with what it prints and its exit status, among them a `gates` example
// that passes and one that fails on the simulated nodes and on the real
// node (test/e2e's TestDemoPrintedCommands runs them). It runs until
// interrupted. `make demo` builds what is missing and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

const ns = "demo"

func main() {
	keep := flag.Bool("keep", false, "keep the working directory (logs, kubeconfigs) after exit")
	fastAlerts := flag.Bool("fast-alerts", true, "rewrite every `for:` of the rules to 0s so that alerts fire within seconds")
	realNode := flag.Bool("real-node", true, "add a real node (kubelet, containerd, dra-example-driver) where the machine allows it")
	flag.Parse()
	log.SetFlags(log.Ltime)
	noRealNode := "--real-node=false"
	if *realNode {
		// Outside, RunWith re-executes the demo in the node's namespaces;
		// inside, it prepares them and runs the demo there.
		err := realNodeAvailable()
		if err == nil || node.Inside() {
			if !node.Inside() {
				log.Print("starting a real node (kubelet, containerd, dra-example-driver) in its own namespaces")
			}
			os.Exit(node.RunWith(node.RunOptions{Forward: true}, func(root string) int {
				if err := run(*keep, *fastAlerts, root, ""); err != nil {
					log.Print(err)
					return 1
				}
				return 0
			}))
		}
		log.Printf("no real node: %v; the simulated nodes run alone", err)
		noRealNode = err.Error()
	}
	if err := run(*keep, *fastAlerts, "", noRealNode); err != nil {
		log.Fatal(err)
	}
}

func realNodeAvailable() error {
	if err := node.CanRun(); err != nil {
		return err
	}
	_, err := node.BinariesFromEnv()
	return err
}

// dashboardFiles lists the dashboards' JSON files, absolute.
func dashboardFiles() string {
	files, _ := filepath.Glob("dashboards/*.json")
	for i, f := range files {
		if abs, err := filepath.Abs(f); err == nil {
			files[i] = abs
		}
	}
	return strings.Join(files, "\n                    ")
}

// run runs the demo; root is the real node's folder when it runs inside
// the node's namespaces, "" without a real node (noRealNode says why).
func run(keep, fastAlerts bool, root, noRealNode string) error {
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
	var cp *cluster.ControlPlane
	if root == "" {
		cp, err = cluster.Start(ctx, binDir, dir)
	} else {
		cp, err = cluster.StartWithRealNode(ctx, binDir, dir, cluster.RealNodeOptions{IP: node.NodeIP, Name: realNodeName, SimulatedNodes: true})
	}
	if err != nil {
		return err
	}
	defer cp.Stop()
	log.Printf("control plane v1.37.2 ready in %s", time.Since(start).Round(time.Millisecond))
	if err := cluster.SeedDemo(ctx, cp.Client, ns); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	kubeconfig, err := cluster.ExporterKubeconfig(ctx, cp, "deploy/manifests/clusterrole.yaml")
	if err != nil {
		return err
	}
	// A short grace period, so that the demo's idle claim shows as a leak soon.
	exp, err := cluster.StartExporter(ctx, exporter, kubeconfig, dir, "--claim.unreserved-grace-period=30s")
	if err != nil {
		return err
	}
	defer exp.Stop()
	// One node agent per simulated node, with the recorded GPU source.
	agents, err := cluster.StartNodeAgents(ctx, cp, exporter, "deploy/manifests/node-agent-clusterrole.yaml", dir, cluster.DemoNodes)
	if err != nil {
		return err
	}
	defer agents.Stop()

	var real *realNode
	if root != "" {
		real, err = startRealNode(ctx, cp, root, exporter)
		if err != nil {
			return fmt.Errorf("real node: %w", err)
		}
		defer real.stop()
	}

	promURL, promBase := "(not started: run `make tools` to build Prometheus)", ""
	var promStarted time.Time
	rules, _ := filepath.Glob("rules/*.yaml")
	if bin := os.Getenv(cluster.EnvPrometheus); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			// The simulated GPUs have no dcgm-exporter: a recorded page of one
			// feeds the GPU recording rules and dashboards, labelled as its
			// DRA mode labels it from the demo's running pods.
			dcgm, err := cluster.ServeFunc(func() ([]byte, error) {
				holders, err := cluster.DRAHolders(ctx, cp.Client)
				if err != nil {
					return nil, err
				}
				return cluster.DCGMWithDRA(cluster.DCGMExposition, holders)
			})
			if err != nil {
				return err
			}
			defer dcgm.Stop()
			jobs := []cluster.ScrapeJob{
				{Name: "dcgm-exporter", Target: dcgm.Addr},
				{Name: "dra-node-agent", Targets: agents.Targets(), HonorLabels: true},
			}
			if real != nil {
				jobs = append(jobs, real.scrapeJobs()...)
			}
			prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
				Binary: bin, Dir: filepath.Join(dir, "prometheus"), Target: exp.URL[len("http://"):],
				Interval: 5 * time.Second, RuleFiles: rules, ZeroFor: fastAlerts, ExtraJobs: jobs,
			})
			if err != nil {
				return err
			}
			defer prom.Stop()
			promURL, promBase = prom.URL+"/api/v1/alerts", prom.URL
			promStarted = time.Now()
		}
	}

	apiServer, adminConfig, exporterConfig := cp.APIServer, cp.Kubeconfig, kubeconfig
	agentTargets := agents.Targets()
	if real != nil {
		// The machine reaches what runs in the node's namespaces through
		// forwarded loopback ports: the same ports, and kubeconfigs that
		// name localhost (the API server's certificate names it).
		agentTargets = append(agentTargets, real.agentTarget())
		ports := []string{apiServer, exp.URL, promURL}
		for _, t := range agentTargets {
			ports = append(ports, "http://"+t)
		}
		for _, u := range ports {
			if err := forwardURL(root, u); err != nil {
				return err
			}
		}
		time.Sleep(node.ForwardDelay) // the URLs printed below answer when pasted
		if apiServer, err = localhostKubeconfig(adminConfig); err != nil {
			return err
		}
		adminConfig = strings.TrimSuffix(adminConfig, ".kubeconfig") + ".localhost.kubeconfig"
		if _, err = localhostKubeconfig(exporterConfig); err != nil {
			return err
		}
		exporterConfig = strings.TrimSuffix(exporterConfig, ".kubeconfig") + ".localhost.kubeconfig"
	}

	cli := relative(exporter)
	kc := "--kubeconfig " + exporterConfig
	fmt.Printf(`
dra-exporter demo is running (Ctrl-C to stop)

  API server        %s   (admin kubeconfig: %s)
  exporter metrics  %s/metrics
  node agents       %s   (one per node, /metrics)
  readiness         %s/readyz
  Prometheus alerts %s
  working dir       %s
  Grafana dashboards %s
                    (import them into a Grafana whose Prometheus data source points at Prometheus; see dashboards/README.md)

`, apiServer, adminConfig, exp.URL, strings.Join(agentTargets, " "), exp.URL, promURL, dir, dashboardFiles())
	examples := []example{
		{fmt.Sprintf("curl -s %s/metrics | grep -E '^dra_pod_blocked|^dra_claim_reservation_leak'", exp.URL), "the blocked pods, by layer and reason (exit 0)"},
		{fmt.Sprintf("curl -s http://%s/metrics | grep -E '^dra_gpu_(holder_info|utilization_ratio)'", agentTargets[0]), "the pods holding gpu-node-1's GPUs, and how busy each is (exit 0)"},
		{fmt.Sprintf("%s explain %s %s/llm-canary", cli, kc, ns), "READY (exit 0)"},
		{fmt.Sprintf("%s explain %s %s/llm-prepare", cli, kc, ns), "BLOCKED node_prepare_failed, owned by the node layer (exit 1)"},
		{fmt.Sprintf("%s explain %s %s/negative-control", cli, kc, ns), "HOLDS: its selector matches no device (exit 0)"},
	}
	gates, from := "", ""
	if promBase != "" {
		gates = fmt.Sprintf("%s gates %s --prometheus.url %s --window %s", cli, kc, promBase, model.Duration(gatesWindow))
		// Every gate must have passed at every evaluation of the window:
		// the first PASS comes a window after Prometheus' first
		// evaluations, plus a scrape and a rule evaluation.
		from = promStarted.Add(gatesWindow + gatesSettle).Format("15:04:05")
		examples = append(examples,
			example{fmt.Sprintf("%s %s -l app=llm-canary", gates, ns), "PASS: its api, node and workload gates for the whole window, the negative control held (exit 0), from " + from},
			example{fmt.Sprintf("%s %s -l app=llm-prepare", gates, ns), "FAIL: gate node, prepare_failed, owned by the node/runtime owner (exit 1), from " + from},
		)
	}
	fmt.Println("Try (each line works when pasted; its comment says what it prints, and its exit status):")
	printExamples(examples)
	if promBase == "" {
		fmt.Println("  (the gates examples need Prometheus: make tools builds it)")
	}
	fmt.Println()
	if real == nil {
		fmt.Printf("No real node (%s): the examples above are the simulated nodes'. As root, make demo adds a real node\n"+
			"(kubelet, containerd, dra-example-driver) with its own passing and failing examples.\n\n", noRealNode)
	}
	if real != nil {
		fmt.Printf("The real node %s (kubelet, containerd, dra-example-driver; logs in %s):\n", realNodeName, real.node.Dir)
		examples := []example{
			{fmt.Sprintf("%s explain %s %s/canary", cli, kc, realNS), "READY: allocated, prepared by the real kubelet and driver, running (exit 0)"},
			{fmt.Sprintf("%s explain %s %s/prepare-failure", cli, kc, realNS), "BLOCKED node_prepare_failed: the driver rejects its config (exit 1)"},
			{fmt.Sprintf("%s explain %s %s/negative-control", cli, kc, realNS), "HOLDS: its selector matches no device, it stays Pending (exit 0)"},
			{fmt.Sprintf("curl -s http://%s/metrics | grep -E '^dra_gpu_(holder_info|pod_memory_used_bytes)'", real.agentTarget()), "the canary on its device, found by its container's cgroup (exit 0)"},
		}
		if gates != "" {
			examples = append(examples,
				example{fmt.Sprintf("%s %s -l app=canary", gates, realNS), "PASS: its three gates for the whole window, the negative control held (exit 0), from " + from},
				example{fmt.Sprintf("%s %s -l app=prepare-failure", gates, realNS), "FAIL: gate node, prepare_failed, owned by the node/runtime owner (exit 1), from " + from},
			)
		}
		printExamples(examples)
		fmt.Printf("  The example driver's devices are not GPUs: the node agent's GPU telemetry is a recording (%s) that puts\n"+
			"  the canary's container process (PID %d) on its device %s, %d%% busy; the rest of the workload gate is real.\n\n",
			real.recording, real.canaryPID, real.canaryDevice, node.Busy)
	}

	fmt.Println(demoRunning)
	churn(ctx, cp)
	log.Print("stopping")
	return nil
}

// churn creates a DRA and a device-plugin replica every few seconds and
// deletes the previous ones, as a rolling Deployment would, so that
// allocation, startup and release latencies of both lanes flow.
func churn(ctx context.Context, cp *cluster.ControlPlane) {
	for i := 0; ; i++ {
		names := cluster.StartReplica(ctx, cp.Client, ns, i)
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
		for _, n := range names {
			_ = cluster.ForceDelete(ctx, cp.Client, ns, n)
		}
	}
}

// demoRunning ends what the demo prints (its test reads up to it).
const demoRunning = "Ctrl-C stops the demo."

// gatesWindow is the window of the demo's gates examples, and gatesSettle
// what the first evaluations take after Prometheus starts: the exporter's
// and the agents' first scrapes, then the rules' first evaluation (5s
// each).
const (
	gatesWindow = 30 * time.Second
	gatesSettle = 20 * time.Second
)

// example is a command the demo prints, with what it prints and its exit
// status as a shell comment, so that the line works when pasted. The demo's
// test (test/e2e/demo_test.go) runs each line and holds it to the comment's
// first word and "(exit N)".
type example struct {
	command, outcome string
}

func printExamples(examples []example) {
	for _, e := range examples {
		fmt.Printf("  %s\n      # %s\n", e.command, e.outcome)
	}
}

// relative is path relative to the working directory when it lies below it
// (bin/dra-exporter, as make demo builds it), else path.
func relative(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}
