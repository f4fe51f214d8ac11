package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
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
	var listen stringList
	fs.Var(&listen, "web.listen-address", "Address to listen on for metrics and probes (repeatable; default :9877).")
	configFile := fs.String("web.config.file", "", "Path to an exporter-toolkit web config file (TLS, basic auth).")
	systemd := fs.Bool("web.systemd-socket", false, "Use systemd socket activation listeners instead of port listeners (Linux only).")
	metricsPath := fs.String("web.telemetry-path", "/metrics", "Path under which to expose metrics.")
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config).")
	probeInterval := fs.Duration("kube.probe-interval", 15*time.Second, "How often to probe the API server's /readyz (dra_exporter_apiserver_up).")
	level := promslog.NewLevel()
	format := promslog.NewFormat()
	_ = format.Set("logfmt")
	fs.Var(levelFlag{level}, "log.level", "Log level: debug, info, warn, error.")
	fs.Var(formatFlag{format}, "log.format", "Log format: logfmt or json.")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: dra-exporter [serve] [FLAGS]")
		fmt.Fprintln(stderr, "\nWatches DeviceClasses, ResourceSlices, ResourceClaims, Pods, Nodes and Warning pod events (list and")
		fmt.Fprintln(stderr, "watch only) and serves the joined DRA metrics.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dra-exporter serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if len(listen) == 0 {
		listen = stringList{":9877"}
	}
	logger := promslog.New(&promslog.Config{Level: level, Format: format, Writer: stderr})
	collectorList, err := cfg.collectors()
	if err != nil {
		logger.Error("invalid flags", "err", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	latency := collector.NewLatency()
	self := collector.NewSelf()
	ix := index.New(cfg.indexConfig(nil, latency))

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
	informers, err := kube.Start(ctx, client, ix, self, kube.Options{Trimmer: cfg.trimmer(), Logger: logger})
	if err != nil {
		logger.Error("start informers", "err", err)
		return 1
	}

	go kube.Probe(ctx, client.Discovery().RESTClient(), self, *probeInterval, logger)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collector.NewExporter(ix, nil, true, logger, collectorList...).RenderOnlyWhen(func() bool { return len(informers.Unsynced()) == 0 }),
		latency,
		self,
		versioncollector.NewCollector("dra_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	mux := http.NewServeMux()
	mux.Handle(*metricsPath, promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if unsynced := informers.Unsynced(); len(unsynced) > 0 {
			sort.Strings(unsynced)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "informers not synced: %s\n", strings.Join(unsynced, ", "))
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if *metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "dra-exporter",
			Description: "Kubernetes Dynamic Resource Allocation exporter",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: *metricsPath, Text: "Metrics"},
				{Address: "/healthz", Text: "Health"},
				{Address: "/readyz", Text: "Readiness"},
			},
		})
		if err != nil {
			logger.Error("landing page", "err", err)
			return 1
		}
		mux.Handle("/", landing)
	}

	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	go func() {
		if informers.WaitForSync(ctx, 10*time.Minute) {
			logger.Info("informers synced")
		}
	}()
	logger.Info("starting dra-exporter", "version", version.Info(), "listen", listen.String())
	flags := &web.FlagConfig{WebListenAddresses: (*[]string)(&listen), WebSystemdSocket: systemd, WebConfigFile: configFile}
	if err := web.ListenAndServe(server, flags, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("serve", "err", err)
		return 1
	}
	return 0
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
