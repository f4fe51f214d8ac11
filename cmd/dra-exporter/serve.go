package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/selfmetrics"
)

func serve(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Watches DeviceClasses, ResourceSlices, ResourceClaims, DeviceTaintRules (where served), Pods, Nodes "+
		"and Warning pod events (list and watch only) and serves the joined DRA metrics. "+
		"Sharded (--total-shards > 1), every shard still watches all of them (verdicts need the whole cluster) but keeps "+
		"only its namespaces' events and, except shard 0, other namespaces' pods without their statuses.", stdout, stderr)
	var cfg config
	cfg.register(app)
	var w webFlags
	w.register(app, ":9877")
	var sf shardFlags
	sf.register(app)
	kubeconfig := registerKubeconfig(app)
	probeInterval := app.Flag("kube.probe-interval", "How often to probe the API server's /readyz (dra_exporter_apiserver_up).").Default("15s").Duration()
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	logger := w.logger(stderr)
	collectorList, err := cfg.collectors()
	if err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}
	if cfg.shard, err = sf.resolve(os.Getenv); err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}
	if cfg.shard.Sharded() {
		logger.Info("sharded by namespace", "shard", cfg.shard.Index, "total_shards", cfg.shard.Total, "cluster_scoped", cfg.shard.OwnsCluster())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	self := selfmetrics.NewSelf()
	self.SetShard(cfg.shard)
	// The latency histograms carry no namespace: shard 0, which sees every
	// claim and pod anyway, observes them for the whole cluster.
	var latency *collector.Latency
	var observer index.Observer
	if cfg.shard.OwnsCluster() {
		latency = collector.NewLatency()
		observer = latency
	}
	ix := index.New(cfg.indexConfig(nil, observer))

	restConfig, err := kube.RESTConfig(*kubeconfig, "")
	if err != nil {
		logger.Error("cannot reach the cluster", "err", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		logger.Error("kubernetes client", "err", err)
		return 1
	}
	// The gate holds the informers' calls while the API server does not
	// answer, and the probe lets them go as soon as it does.
	gate := kube.NewGate()
	informers, err := kube.Start(ctx, client, ix, self, kube.Options{Trimmer: cfg.trimmer(), Logger: logger, Gate: gate})
	if err != nil {
		logger.Error("start informers", "err", err)
		return 1
	}

	go kube.Probe(ctx, client.Discovery().RESTClient(), self, *probeInterval, logger, gate)

	stale := func() bool { return len(informers.Stale()) > 0 }
	self.TrackHeld(stale)
	cluster := engine.NewExporter(ix, nil, true, logger, collectorList...).Shard(cfg.shard).
		RenderOnlyWhen(func() bool { return len(informers.Unsynced()) == 0 }).
		HoldVerdictsWhen(stale)
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		self,
		versioncollector.NewCollector("dra_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if latency != nil {
		reg.MustRegister(latency)
	}

	// Ready once the families are rendered: the first scrape is then
	// written from what is ready, not rendered whole (seconds at 100k
	// claims, past Prometheus' default scrape timeout). The initial lists
	// leave garbage of about the size of the index; it is returned to the
	// system once, rather than kept as headroom the exporter never uses
	// again.
	var rendered atomic.Bool
	go func() {
		if !informers.WaitForSync(ctx) {
			return
		}
		logger.Info("informers synced")
		logger.Info("families rendered for the first scrape", "took", cluster.Prerender().Round(time.Millisecond))
		rendered.Store(true)
		debug.FreeOSMemory()
	}()
	return w.listenAndServe(ctx, logger, reg, cluster, "dra-exporter", "Kubernetes Dynamic Resource Allocation exporter", func() string {
		if unsynced := informers.Unsynced(); len(unsynced) > 0 {
			sort.Strings(unsynced)
			return "informers not synced: " + strings.Join(unsynced, ", ")
		}
		if !rendered.Load() {
			return "informers synced, families not rendered yet"
		}
		if informers.Rebuilding() || !ix.Consistent() {
			return "an index update panicked; rebuilding the index from the informers' caches"
		}
		return ""
	})
}
