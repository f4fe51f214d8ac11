package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"k8s.io/klog/v2"

	"github.com/dra-exporter/dra-exporter/internal/engine"
)

// webFlags are the HTTP and log flags that serve and node share:
// exporter-toolkit's and promslog's, as every Prometheus exporter has them,
// and two of our own.
type webFlags struct {
	toolkit     *web.FlagConfig
	probeListen string
	metricsPath string
	log         promslog.Config
}

func (w *webFlags) register(app *kingpin.Application, defaultListen string) {
	w.toolkit = kingpinflag.AddFlags(app, defaultListen)
	app.Flag("web.probe-address", "Address of a second listener serving only /healthz and /readyz, in plain HTTP without the web config's TLS and basic auth (for kubelet probes when the web config asks for basic auth); empty: none.").
		PlaceHolder("ADDRESS").StringVar(&w.probeListen)
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&w.metricsPath)
	promslogflag.AddFlags(app, &w.log)
}

// logger returns the process's logger. client-go's own log lines (klog:
// the reflectors' warnings, runtime errors) go through it too, as
// structured lines among the exporter's rather than klog's text format.
func (w *webFlags) logger(stderr io.Writer) *slog.Logger {
	cfg := w.log
	cfg.Writer = stderr
	l := promslog.New(&cfg)
	klog.SetSlogLogger(l)
	return l
}

// listenAndServe serves /metrics from reg (and cluster, when set: see
// metricsHandler), /healthz, /readyz (ready says why it is not, "" when it
// is) and a landing page, until ctx ends.
func (w *webFlags) listenAndServe(ctx context.Context, logger *slog.Logger, reg *prometheus.Registry, cluster *engine.Exporter, name, description string, ready func() string) int {
	mux := http.NewServeMux()
	mux.Handle(w.metricsPath, metricsHandler(reg, cluster, logger))
	probes(mux, ready)
	if w.metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        name,
			Description: description,
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: w.metricsPath, Text: "Metrics"},
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
	logger.Info("starting "+name, "version", version.Info(), "listen", strings.Join(*w.toolkit.WebListenAddresses, ","))
	if w.probeListen != "" {
		_, stop, err := serveProbes(w.probeListen, ready, logger)
		if err != nil {
			logger.Error("probe listener", "err", err)
			return 1
		}
		defer stop()
	}
	if err := web.ListenAndServe(server, w.toolkit, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("serve", "err", err)
		return 1
	}
	return 0
}

// probes adds /healthz (the process serves) and /readyz (ready says why it
// is not, "" when it is).
func probes(mux *http.ServeMux, ready func() string) {
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if why := ready(); why != "" {
			rw.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(rw, why)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
}

// serveProbes serves /healthz and /readyz alone on addr, in plain HTTP with
// no web config: a kubelet probe cannot send basic auth credentials, and
// the probes tell nothing a scrape would. Everything else is 404. It
// returns the address it listens on; stop closes the listener.
func serveProbes(addr string, ready func() string, logger *slog.Logger) (net.Addr, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	probes(mux, ready)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("probe listener", "err", err)
		}
	}()
	logger.Info("serving /healthz and /readyz without TLS or auth", "listen", l.Addr().String())
	return l.Addr(), func() { _ = server.Close() }, nil
}
