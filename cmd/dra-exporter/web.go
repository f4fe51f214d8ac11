package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"k8s.io/klog/v2"

	"github.com/dra-exporter/dra-exporter/collector"
)

// webFlags are the HTTP and log flags that serve and node share.
type webFlags struct {
	listen      stringList
	probeListen *string
	configFile  *string
	systemd     *bool
	metricsPath *string
	level       *promslog.Level
	format      *promslog.Format
}

func (w *webFlags) register(fs *flag.FlagSet, defaultListen string) {
	fs.Var(&w.listen, "web.listen-address", "Address to listen on for metrics and probes (repeatable; default "+defaultListen+").")
	w.configFile = fs.String("web.config.file", "", "Path to an exporter-toolkit web config file (TLS, basic auth).")
	w.probeListen = fs.String("web.probe-address", "", "Address of a second listener serving only /healthz and /readyz, in plain HTTP without the web config's TLS and basic auth (for kubelet probes when the web config asks for basic auth); empty: none.")
	w.systemd = fs.Bool("web.systemd-socket", false, "Use systemd socket activation listeners instead of port listeners (Linux only).")
	w.metricsPath = fs.String("web.telemetry-path", "/metrics", "Path under which to expose metrics.")
	w.level = promslog.NewLevel()
	w.format = promslog.NewFormat()
	_ = w.format.Set("logfmt")
	fs.Var(levelFlag{w.level}, "log.level", "Log level: debug, info, warn, error.")
	fs.Var(formatFlag{w.format}, "log.format", "Log format: logfmt or json.")
}

// logger returns the process's logger. client-go's own log lines (klog:
// the reflectors' warnings, runtime errors) go through it too, as
// structured lines among the exporter's rather than klog's text format.
func (w *webFlags) logger(stderr io.Writer) *slog.Logger {
	l := promslog.New(&promslog.Config{Level: w.level, Format: w.format, Writer: stderr})
	klog.SetSlogLogger(l)
	return l
}

// listenAndServe serves /metrics from reg (and cluster, when set: see
// metricsHandler), /healthz, /readyz (ready says why it is not, "" when it
// is) and a landing page, until ctx ends.
func (w *webFlags) listenAndServe(ctx context.Context, logger *slog.Logger, reg *prometheus.Registry, cluster *collector.Exporter, name, description, defaultListen string, ready func() string) int {
	if len(w.listen) == 0 {
		w.listen = stringList{defaultListen}
	}
	mux := http.NewServeMux()
	mux.Handle(*w.metricsPath, metricsHandler(reg, cluster, logger))
	probes(mux, ready)
	if *w.metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        name,
			Description: description,
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: *w.metricsPath, Text: "Metrics"},
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
	logger.Info("starting "+name, "version", version.Info(), "listen", w.listen.String())
	if *w.probeListen != "" {
		_, stop, err := serveProbes(*w.probeListen, ready, logger)
		if err != nil {
			logger.Error("probe listener", "err", err)
			return 1
		}
		defer stop()
	}
	flags := &web.FlagConfig{WebListenAddresses: (*[]string)(&w.listen), WebSystemdSocket: w.systemd, WebConfigFile: w.configFile}
	if err := web.ListenAndServe(server, flags, logger); err != nil && !errors.Is(err, http.ErrServerClosed) {
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

// parseFlags parses a command's flags, which take no positional arguments;
// it reports false (after saying why) when the command should exit 2.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dra-exporter %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	return true
}
