package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	nodecollector "github.com/dra-exporter/dra-exporter/internal/node/collector"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu/gpufake"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/node/procmap"
	"github.com/dra-exporter/dra-exporter/internal/objects"
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

func (f *gpuFlags) register(app *kingpin.Application) {
	app.Flag("gpu.source", "GPU telemetry source: auto (DCGM where it starts, else NVML), dcgm (go-dcgm: libdcgm.so.4, profiling), nvml (go-nvml: libnvidia-ml.so.1 from the driver, the basic fields), recorded (--gpu.recorded-file) or none.").
		Default(gpu.SourceAuto).EnumVar(&f.source, gpu.SourceAuto, gpu.SourceDCGM, gpu.SourceNVML, gpu.SourceRecorded, gpu.SourceNone)
	app.Flag("gpu.recorded-file", "JSON recording of a node's GPUs for --gpu.source=recorded (tests, the demo).").PlaceHolder("FILE").StringVar(&f.recordedFile)
	app.Flag("gpu.fake-file", "A simulated GPU node (internal/node/gpu/gpufake's JSON) in place of libdcgm and libnvidia-ml, for tests and gpu-check --fake.").PlaceHolder("FILE").StringVar(&f.fakeFile)
	app.Flag("dcgm.hostengine-address", "Address of a standalone nv-hostengine (host:port, or unix:///path with DCGM 4.5+); empty embeds the host engine in the agent.").PlaceHolder("ADDRESS").StringVar(&f.hostengine)
	app.Flag("gpu.timeout", "Longest a GPU read may take: a hung GPU or library answers the scrape without GPU telemetry instead of blocking it.").Default("5s").DurationVar(&f.timeout)
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
	// driverCheckpoint is --nvidia.checkpoint-file.
	driverCheckpoint string
}

func (f *nodeFlags) register(app *kingpin.Application) {
	app.Flag("node-name", "Name of the node the agent runs on; the DaemonSet sets it from spec.nodeName.").Envar("NODE_NAME").StringVar(&f.nodeName)
	app.Flag("kubelet.pod-resources-socket", "The kubelet's pod-resources socket (hostPath); empty disables it.").Default(podresources.DefaultSocket).StringVar(&f.socket)
	app.Flag("kubelet.pod-resources-timeout", "Timeout of one pod-resources List call.").Default("5s").DurationVar(&f.socketTimeout)
	f.gpu.register(app)
	app.Flag("proc-root", "The host's /proc: GPU processes map to pods through <root>/<pid>/cgroup. The container's own /proc shows the host's processes only with hostPID (checked: dra_node_host_processes_visible). Empty disables the process join.").
		Default("/proc").StringVar(&f.procRoot)
	app.Flag("claim.refresh-interval", "How often the claims of the node's pods are fetched again (also on every pod change).").Default("30s").DurationVar(&f.claimRefresh)
	kubeconfigFlag(app).StringVar(&f.kubeconfig)
	app.Flag("kube.probe-interval", "How often to probe the API server's /readyz (dra_exporter_apiserver_up).").Default("15s").DurationVar(&f.probeInterval)
	registerDevicePluginResources(app, &f.devicePlugin)
	app.Flag("nvidia.checkpoint-file", "The NVIDIA DRA driver's checkpoint (hostPath /var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json, read-only): the claims its kubelet plugin holds prepared, to find those the API server no longer has (dra_node_claim_conflict reason driver_prepared_without_claim). Empty: not read.").
		PlaceHolder("FILE").StringVar(&f.driverCheckpoint)
}

func node(prog string, args []string, stdout, stderr io.Writer) int {
	cgo := map[bool]string{true: "available (cgo; the libraries load at run time)", false: "unavailable (built without cgo)"}[gpu.CGO]
	app := newApp(prog, "The node agent (one per GPU node): GPU telemetry (DCGM or NVML) joined to the pods, claims and ResourceSlice "+
		"devices that hold each GPU, from the kubelet's pod-resources API and node-scoped watches. This build: DCGM and NVML "+cgo+".", stdout, stderr)
	var nf nodeFlags
	nf.register(app)
	var w webFlags
	w.register(app, ":9878")
	if rc, ok := parse(app, args); !ok {
		return rc
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

	restConfig, err := kube.RESTConfig(nf.kubeconfig, "")
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
	cfg := nodeagent.Config{Node: nf.nodeName, Store: store, GPU: src, Logger: logger, DevicePluginResources: dra.ParseResources(nf.devicePlugin),
		DriverCheckpoint: nf.driverCheckpoint}
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
	return w.listenAndServe(ctx, logger, reg, nil, "dra-exporter node", "DRA node agent: GPU telemetry joined to pods and claims", func() string {
		if !store.Synced() {
			return "informers not synced: pods, resourceslices, nodes"
		}
		return ""
	})
}
