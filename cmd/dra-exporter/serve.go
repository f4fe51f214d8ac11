package main

import (
	"context"
	"flag"
	"fmt"
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
	"github.com/prometheus/common/promslog"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/kube"
)

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	cfg.register(fs)
	var w webFlags
	w.register(fs, ":9877")
	var sf shardFlags
	sf.register(fs)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config).")
	probeInterval := fs.Duration("kube.probe-interval", 15*time.Second, "How often to probe the API server's /readyz (dra_exporter_apiserver_up).")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: dra-exporter [serve] [FLAGS]")
		fmt.Fprintln(stderr, "\nWatches DeviceClasses, ResourceSlices, ResourceClaims, DeviceTaintRules (where served), Pods, Nodes")
		fmt.Fprintln(stderr, "and Warning pod events (list and watch only) and serves the joined DRA metrics.")
		fmt.Fprintln(stderr, "Sharded (--total-shards > 1), every shard still watches all of them (verdicts need the whole cluster) but keeps")
		fmt.Fprintln(stderr, "only its namespaces' events and, except shard 0, other namespaces' pods without their statuses.")
		fs.PrintDefaults()
	}
	if !parseFlags(fs, args, stderr) {
		return 2
	}
	logger := w.logger(stderr)
	collectorList, err := cfg.collectors()
	if err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}
	if cfg.shard, err = sf.resolve(fs, os.Getenv); err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}
	if cfg.shard.Sharded() {
		logger.Info("sharded by namespace", "shard", cfg.shard.Index, "total_shards", cfg.shard.Total, "cluster_scoped", cfg.shard.OwnsCluster())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	self := collector.NewSelf()
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

	restConfig, err := kube.RESTConfig(*kubeconfig)
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
	cluster := collector.NewExporter(ix, nil, true, logger, collectorList...).Shard(cfg.shard).
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
	return w.listenAndServe(ctx, logger, reg, cluster, "dra-exporter", "Kubernetes Dynamic Resource Allocation exporter", ":9877", func() string {
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

// levelFlag and formatFlag adapt promslog's values to the flag package,
// which calls String on a zero value when printing defaults.
type levelFlag struct{ l *promslog.Level }

func (f levelFlag) String() string {
	if f.l == nil {
		return "info"
	}
	return f.l.String()
}

func (f levelFlag) Set(s string) error { return f.l.Set(s) }

type formatFlag struct{ f *promslog.Format }

func (f formatFlag) String() string {
	if f.f == nil {
		return "logfmt"
	}
	return f.f.String()
}

func (f formatFlag) Set(s string) error { return f.f.Set(s) }
