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
// machine's loopback forwards its URLs. It runs until interrupted. `make
// demo` builds what is missing and runs it.
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
	if *realNode {
		// Outside, RunWith re-executes the demo in the node's namespaces;
		// inside, it prepares them and runs the demo there.
		err := realNodeAvailable()
		if err == nil || node.Inside() {
			if !node.Inside() {
				log.Print("starting a real node (kubelet, containerd, dra-example-driver) in its own namespaces")
			}
			os.Exit(node.RunWith(node.RunOptions{Forward: true}, func(root string) int {
				if err := run(*keep, *fastAlerts, root); err != nil {
					log.Print(err)
					return 1
				}
				return 0
			}))
		}
		log.Printf("no real node: %v; the simulated nodes run alone", err)
	}
	if err := run(*keep, *fastAlerts, ""); err != nil {
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
// the node's namespaces, "" without a real node.
func run(keep, fastAlerts bool, root string) error {
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
	rules, _ := filepath.Glob("rules/*.yaml")
	if bin := os.Getenv(cluster.EnvPrometheus); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			// The simulated GPUs have no dcgm-exporter: a recorded page of one
			// feeds the GPU recording rules and dashboards.
			dcgm, err := cluster.ServeStatic(cluster.DCGMExposition)
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
		if apiServer, err = localhostKubeconfig(adminConfig); err != nil {
			return err
		}
		adminConfig = strings.TrimSuffix(adminConfig, ".kubeconfig") + ".localhost.kubeconfig"
		if _, err = localhostKubeconfig(exporterConfig); err != nil {
			return err
		}
		exporterConfig = strings.TrimSuffix(exporterConfig, ".kubeconfig") + ".localhost.kubeconfig"
	}

	fmt.Printf(`
dra-exporter demo is running (Ctrl-C to stop)

  API server        %s   (admin kubeconfig: %s)
  exporter metrics  %s/metrics
  node agents       %s   (one per simulated node, /metrics)
  readiness         %s/readyz
  Prometheus alerts %s
  working dir       %s
  Grafana dashboards %s
                    (import them into a Grafana whose Prometheus data source points at Prometheus; see dashboards/README.md)

Try:
  curl -s %s/metrics | grep -E '^dra_pod_blocked|^dra_claim_reservation_leak'
  curl -s http://%s/metrics | grep -E '^dra_gpu_(holder_info|utilization_ratio)'
  bin/dra-exporter explain --kubeconfig %s %s/negative-control
  bin/dra-exporter explain --kubeconfig %s %s/llm-canary

`, apiServer, adminConfig, exp.URL, strings.Join(agentTargets, " "), exp.URL, promURL, dir, dashboardFiles(), exp.URL, agentTargets[0], exporterConfig, ns, exporterConfig, ns)
	if real != nil {
		fmt.Printf(`The real node %s (kubelet, containerd, dra-example-driver; logs in %s):
  bin/dra-exporter explain --kubeconfig %s %s/canary           (allocated, prepared, running: READY)
  bin/dra-exporter explain --kubeconfig %s %s/negative-control (its selector matches no device: stays Pending)
  bin/dra-exporter explain --kubeconfig %s %s/prepare-failure  (the driver rejects its config: node_prepare_failed)
  curl -s http://%s/metrics | grep -E '^dra_gpu_holder_info'
`, realNodeName, real.node.Dir, exporterConfig, realNS, exporterConfig, realNS, exporterConfig, realNS, real.agentTarget())
		if promBase != "" {
			fmt.Printf(`  bin/dra-exporter gates --prometheus.url %s --window 1m %s -l app=canary
                                        (the canary's three gates and the negative control: PASS once a minute has passed)
`, promBase, realNS)
		}
		fmt.Println()
	}

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
