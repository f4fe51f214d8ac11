// Command dra-exporter makes Kubernetes Dynamic Resource Allocation
// observable: it serves Prometheus metrics that join claims, devices,
// ResourceSlices and pods (serve), renders the same metrics from a file of
// objects (snapshot), and explains why one pod is not Ready (explain).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/prometheus/common/version"
)

const usage = `Usage: dra-exporter [COMMAND] [FLAGS]

Commands:
  serve      watch the cluster and serve metrics (the default)
  node       the node agent: GPU telemetry joined to pods, claims and devices (one per GPU node)
  gpu-check  read this host's GPUs as the node agent does and compare with nvidia-smi
  snapshot   print the metrics for a file of objects (kubectl get -o yaml)
  explain    walk the decision tree for one pod, live or from files
  docs       print the metrics reference (docs/metrics.md)
  version    print the version

Run "dra-exporter COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
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
