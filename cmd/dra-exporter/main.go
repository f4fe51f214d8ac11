// Command dra-exporter makes Kubernetes Dynamic Resource Allocation
// observable: it serves Prometheus metrics that join claims, devices,
// ResourceSlices and pods (serve), renders the same metrics from a file of
// objects (snapshot), and explains why one pod is not Ready (explain).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/common/version"
)

const usage = `Usage: dra-exporter [COMMAND] [FLAGS]

Commands:
  serve      watch the cluster and serve metrics (the default)
  node       the node agent: GPU telemetry joined to pods, claims and devices (one per GPU node)
  gpu-check  read this host's GPUs as the node agent does and compare with nvidia-smi
  snapshot   print the metrics for a file of objects (kubectl get -o yaml)
  explain    walk the decision tree for one pod, live or from files
  gates      the evidence gates and the rollout verdict of a canary, from Prometheus or a bundle
  bundle     save the evidence of a cluster (objects, versions, agents' GPU inventory) to a file
  docs       print the metrics reference (docs/metrics.md)
  version    print the version

Run "dra-exporter COMMAND -h" for a command's flags.
`

// pluginUsage is the help of the binary installed as kubectl-dra.
const pluginUsage = `Usage: kubectl dra COMMAND [FLAGS]

Commands:
  explain NAMESPACE/POD   walk the DRA decision tree for one pod
  gates NAMESPACE         the evidence gates and the rollout verdict of a canary
  bundle -o FILE.tar.gz   save the evidence of the cluster before a change
  version                 print the version

Run "kubectl dra COMMAND -h" for a command's flags.
`

func main() {
	if isPlugin(os.Args[0]) {
		os.Exit(runPlugin(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// isPlugin reports whether the binary was started as the kubectl plugin
// (kubectl runs kubectl-dra for "kubectl dra"; krew installs it so).
func isPlugin(argv0 string) bool {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	return name == "kubectl-dra"
}

// runPlugin serves "kubectl dra": the commands an operator runs by hand,
// not the exporter or the node agent.
func runPlugin(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pluginUsage)
		return 2
	}
	switch args[0] {
	case "explain", "gates", "bundle", "version":
		return run(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, pluginUsage)
		return 0
	}
	fmt.Fprintf(stderr, "kubectl dra: unknown command %q\n\n%s", args[0], pluginUsage)
	return 2
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args, stderr)
	case "node":
		return node(args, stderr)
	case "gpu-check":
		return gpuCheck(args, stdout, stderr)
	case "snapshot":
		return snapshot(args, stdout, stderr)
	case "explain":
		return explain(args, stdout, stderr)
	case "gates":
		return gates(args, stdout, stderr)
	case "bundle":
		return bundleCmd(args, stdout, stderr)
	case "docs":
		return docs(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version.Print("dra-exporter"))
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dra-exporter: unknown command %q\n\n%s", cmd, usage)
	return 2
}
