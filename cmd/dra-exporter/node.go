package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/nodeagent"
	"github.com/dra-exporter/dra-exporter/internal/podresources"
	"github.com/dra-exporter/dra-exporter/internal/procmap"
)

// nodeFlags are the node agent's own flags.
type nodeFlags struct {
	nodeName      string
	socket        string
	socketTimeout time.Duration
	source        string
	recordedFile  string
	hostengine    string
	procRoot      string
	claimRefresh  time.Duration
	kubeconfig    string
}

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "Name of the node the agent runs on (default $NODE_NAME; the DaemonSet sets it from spec.nodeName).")
	fs.StringVar(&f.socket, "kubelet.pod-resources-socket", podresources.DefaultSocket, "The kubelet's pod-resources socket (hostPath); empty disables it.")
	fs.DurationVar(&f.socketTimeout, "kubelet.pod-resources-timeout", 5*time.Second, "Timeout of one pod-resources List call.")
	fs.StringVar(&f.source, "gpu.source", "dcgm", "GPU telemetry source: dcgm (go-dcgm, needs libdcgm), recorded (--gpu.recorded-file) or none.")
	fs.StringVar(&f.recordedFile, "gpu.recorded-file", "", "JSON recording of a node's GPUs for --gpu.source=recorded (tests, the demo).")
	fs.StringVar(&f.hostengine, "dcgm.hostengine-address", "", "Address of a standalone nv-hostengine (host:port); empty embeds the host engine in the agent.")
	fs.StringVar(&f.procRoot, "proc-root", "/proc", "The host's /proc (e.g. /host/proc): GPU processes map to pods through <root>/<pid>/cgroup; needs hostPID. Empty disables the process join.")
	fs.DurationVar(&f.claimRefresh, "claim.refresh-interval", 30*time.Second, "How often the claims of the node's pods are fetched again (also on every pod change).")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config).")
}

// gpuSource opens the chosen source. A DCGM that fails to start is not
// fatal: the agent serves everything else with dra_gpu_source_up 0.
func (f *nodeFlags) gpuSource() (gpu.Source, error) {
	switch f.source {
	case "dcgm":
		d, err := gpu.NewDCGM(f.hostengine)
		if err != nil {
			return gpu.Unavailable{SourceName: "dcgm", Reason: err}, nil
		}
		return d, nil
	case "recorded":
		if f.recordedFile == "" {
			return nil, fmt.Errorf("--gpu.source=recorded needs --gpu.recorded-file")
		}
		return gpu.NewRecorded(f.recordedFile)
	case "none":
		return gpu.None{}, nil
	}
	return nil, fmt.Errorf("--gpu.source: %q is not dcgm, recorded or none", f.source)
}

func node(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nodeFlags
	nf.register(fs)
	var w webFlags
	w.register(fs, ":9878")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: dra-exporter node [FLAGS]")
		fmt.Fprintln(stderr, "\nThe node agent (one per GPU node): GPU telemetry (DCGM) joined to the pods, claims and ResourceSlice")
		fmt.Fprintln(stderr, "devices that hold each GPU, from the kubelet's pod-resources API and node-scoped watches.")
		fmt.Fprintf(stderr, "This build: DCGM %s.\n", map[bool]string{true: "available (cgo)", false: "unavailable (built without cgo)"}[gpu.DCGMAvailable])
		fs.PrintDefaults()
	}
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	logger := w.logger(stderr)
	if nf.nodeName == "" {
		logger.Error("invalid flags", "err", "--node-name (or $NODE_NAME) is required")
		return 2
	}
	src, err := nf.gpuSource()
	if err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}
	defer src.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	restConfig, err := kube.RESTConfig(nf.kubeconfig)
	if err != nil {
		logger.Error("cannot reach the cluster", "err", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		logger.Error("kubernetes client", "err", err)
		return 1
	}
	store, err := nodeagent.StartKube(ctx, client, nf.nodeName, nf.claimRefresh, logger)
	if err != nil {
		logger.Error("start informers", "err", err)
		return 1
	}
	cfg := nodeagent.Config{Node: nf.nodeName, Store: store, GPU: src, Logger: logger}
	if nf.socket != "" {
		c, err := podresources.NewClient(nf.socket, nf.socketTimeout)
		if err != nil {
			logger.Error("pod-resources client", "err", err)
			return 1
		}
		defer c.Close()
		cfg.Kubelet = c
	}
	if nf.procRoot != "" {
		cfg.Proc = &procmap.Mapper{Root: nf.procRoot}
	}
	agent := nodeagent.New(cfg)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collector.NewNode(agent, true),
		versioncollector.NewCollector("dra_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return w.listenAndServe(ctx, logger, reg, nil, "dra-exporter node", "DRA node agent: GPU telemetry joined to pods and claims", ":9878", func() string {
		if !store.Synced() {
			return "informers not synced: pods, resourceslices, nodes"
		}
		return ""
	})
}
