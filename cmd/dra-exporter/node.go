package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/gpu/gpufake"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/nodeagent"
	"github.com/dra-exporter/dra-exporter/internal/nodecollector"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/podresources"
	"github.com/dra-exporter/dra-exporter/internal/procmap"
)

// gpuFlags choose and configure the GPU source (node and gpu-check).
type gpuFlags struct {
	source       string
	recordedFile string
	fakeFile     string
	hostengine   string
	timeout      time.Duration
	// machine is the simulated node of --gpu.fake-file, once opened.
	machine *gpufake.Machine
}

func (f *gpuFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.source, "gpu.source", gpu.SourceAuto, "GPU telemetry source: auto (DCGM where it starts, else NVML), dcgm (go-dcgm: libdcgm.so.4, profiling), nvml (go-nvml: libnvidia-ml.so.1 from the driver, the basic fields), recorded (--gpu.recorded-file) or none.")
	fs.StringVar(&f.recordedFile, "gpu.recorded-file", "", "JSON recording of a node's GPUs for --gpu.source=recorded (tests, the demo).")
	fs.StringVar(&f.fakeFile, "gpu.fake-file", "", "A simulated GPU node (internal/gpu/gpufake's JSON) in place of libdcgm and libnvidia-ml, for tests and gpu-check --fake.")
	fs.StringVar(&f.hostengine, "dcgm.hostengine-address", "", "Address of a standalone nv-hostengine (host:port, or unix:///path with DCGM 4.5+); empty embeds the host engine in the agent.")
	fs.DurationVar(&f.timeout, "gpu.timeout", 5*time.Second, "Longest a GPU read may take: a hung GPU or library answers the scrape without GPU telemetry instead of blocking it.")
}

// open opens the chosen source. A library that cannot start is not fatal:
// the source reconnects with backoff and the agent serves everything else
// with dra_gpu_source_up 0.
func (f *gpuFlags) open(logger *slog.Logger, raw bool) (gpu.Source, error) {
	opts := gpu.Options{HostEngine: f.hostengine, Timeout: f.timeout, Logger: logger, Raw: raw}
	dcgmLib, nvmlLib := gpu.Libraries()
	if f.fakeFile != "" {
		m, err := gpufake.Open(f.fakeFile)
		if err != nil {
			return nil, err
		}
		dcgmLib, nvmlLib = m.Libraries()
		f.machine = m
		if opts.HostEngine == "" {
			opts.HostEngine = m.Address()
		}
	}
	switch f.source {
	case gpu.SourceAuto:
		return gpu.NewAuto(dcgmLib, nvmlLib, opts), nil
	case gpu.SourceDCGM:
		return gpu.NewDCGM(dcgmLib, nvmlLib, opts), nil
	case gpu.SourceNVML:
		return gpu.NewNVML(nvmlLib, opts), nil
	case gpu.SourceRecorded:
		if f.recordedFile == "" {
			return nil, fmt.Errorf("--gpu.source=recorded needs --gpu.recorded-file")
		}
		return gpu.NewRecorded(f.recordedFile)
	case gpu.SourceNone:
		return gpu.None{}, nil
	}
	return nil, fmt.Errorf("--gpu.source: %q is not auto, dcgm, nvml, recorded or none", f.source)
}

// nodeFlags are the node agent's own flags.
type nodeFlags struct {
	nodeName      string
	socket        string
	socketTimeout time.Duration
	gpu           gpuFlags
	procRoot      string
	claimRefresh  time.Duration
	kubeconfig    string
	probeInterval time.Duration
	devicePlugin  string
}

func (f *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "Name of the node the agent runs on (default $NODE_NAME; the DaemonSet sets it from spec.nodeName).")
	fs.StringVar(&f.socket, "kubelet.pod-resources-socket", podresources.DefaultSocket, "The kubelet's pod-resources socket (hostPath); empty disables it.")
	fs.DurationVar(&f.socketTimeout, "kubelet.pod-resources-timeout", 5*time.Second, "Timeout of one pod-resources List call.")
	f.gpu.register(fs)
	fs.StringVar(&f.procRoot, "proc-root", "/proc", "The host's /proc: GPU processes map to pods through <root>/<pid>/cgroup. The container's own /proc shows the host's processes only with hostPID (checked: dra_node_host_processes_visible). Empty disables the process join.")
	fs.DurationVar(&f.claimRefresh, "claim.refresh-interval", 30*time.Second, "How often the claims of the node's pods are fetched again (also on every pod change).")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config).")
	fs.DurationVar(&f.probeInterval, "kube.probe-interval", 15*time.Second, "How often to probe the API server's /readyz (dra_exporter_apiserver_up).")
	registerDevicePluginResources(fs, &f.devicePlugin)
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
		fmt.Fprintln(stderr, "\nThe node agent (one per GPU node): GPU telemetry (DCGM or NVML) joined to the pods, claims and ResourceSlice")
		fmt.Fprintln(stderr, "devices that hold each GPU, from the kubelet's pod-resources API and node-scoped watches.")
		fmt.Fprintf(stderr, "This build: DCGM and NVML %s.\n", map[bool]string{true: "available (cgo; the libraries load at run time)", false: "unavailable (built without cgo)"}[gpu.CGO])
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
	src, err := nf.gpu.open(logger, false)
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
	self := nodecollector.NewSelf(kube.FetchReasons...)
	// As the exporter's: watches that find the API server unreachable wait
	// for the probe to hear it again instead of client-go's backoff.
	gate := kube.NewGate()
	store, err := kube.StartNode(ctx, client, self, kube.NodeOptions{Node: nf.nodeName, ClaimRefresh: nf.claimRefresh, Trimmer: objects.Trimmer{}, Logger: logger, Gate: gate})
	if err != nil {
		logger.Error("start informers", "err", err)
		return 1
	}
	go kube.Probe(ctx, client.Discovery().RESTClient(), self, nf.probeInterval, logger, gate)
	cfg := nodeagent.Config{Node: nf.nodeName, Store: store, GPU: src, Logger: logger, DevicePluginResources: dra.ParseResources(nf.devicePlugin)}
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
		nodecollector.New(agent, true),
		self,
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
