package main

import (
	"bufio"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/dra-exporter/dra-exporter/internal/engine"
)

// acceptedFormats are what /metrics offers, in client_golang's order of
// preference (the call returns a fresh copy: taken once, not per scrape).
var acceptedFormats = expfmt.DefaultOpenMetricsAcceptedFormats()

// metricsHandler serves reg and, when cluster is set, the cluster families.
// Those go the fast path (engine.Exporter.TextFamilies: the families kept
// from the last scrape, rendered again only where the cluster changed) for
// the text, OpenMetrics and delimited protobuf formats, which Prometheus
// negotiates (protobuf first when native histograms are on); another format
// (protobuf text, for debugging) goes through client_golang with
// everything registered.
func metricsHandler(reg *prometheus.Registry, cluster *engine.Exporter, logger *slog.Logger) http.Handler {
	opts := promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	}
	if cluster == nil {
		return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, opts))
	}
	clusterReg := prometheus.NewRegistry()
	clusterReg.MustRegister(cluster)
	slow := promhttp.HandlerFor(prometheus.Gatherers{reg, clusterReg}, opts)
	fast := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		format := expfmt.NegotiateAccept(r.Header, acceptedFormats...)
		switch format.FormatType() {
		case expfmt.TypeTextPlain, expfmt.TypeOpenMetrics, expfmt.TypeProtoDelim:
		default:
			slow.ServeHTTP(rw, r)
			return
		}
		self, err := reg.Gather()
		if err != nil {
			logger.Error("gathering the exporter's own metrics; serving what was gathered", "err", err)
		}
		families := cluster.TextFamilies(format.FormatType() == expfmt.TypeOpenMetrics)

		rw.Header().Set("Content-Type", string(format))
		var out io.Writer = rw
		if acceptsGzip(r) {
			rw.Header().Set("Content-Encoding", "gzip")
			gz, _ := gzip.NewWriterLevel(rw, gzip.BestSpeed)
			defer gz.Close()
			out = gz
		}
		w := bufio.NewWriterSize(out, 64<<10)
		defer w.Flush()
		if err := writeFamilies(w, self, families, format); err != nil {
			logger.Debug("writing /metrics", "err", err) // the scraper went away
		}
	})
	return promhttp.InstrumentMetricHandler(reg, fast)
}

// writeFamilies writes the gathered and the pre-rendered families merged in
// name order, as Gather sorts them, in the format (text, OpenMetrics with
// its final # EOF, or delimited protobuf).
func writeFamilies(w io.Writer, gathered []*dto.MetricFamily, rendered []engine.Family, format expfmt.Format) error {
	var encode func(*dto.MetricFamily) error
	write := engine.Family.WriteTo
	switch format.FormatType() {
	case expfmt.TypeOpenMetrics:
		encode = func(mf *dto.MetricFamily) error { _, err := expfmt.MetricFamilyToOpenMetrics(w, mf); return err }
	case expfmt.TypeProtoDelim:
		encode = expfmt.NewEncoder(w, format).Encode // with the negotiated name escaping
		write = engine.Family.WriteProtoTo
	default:
		encode = func(mf *dto.MetricFamily) error { _, err := expfmt.MetricFamilyToText(w, mf); return err }
	}
	i, j := 0, 0
	for i < len(gathered) || j < len(rendered) {
		if j == len(rendered) || (i < len(gathered) && gathered[i].GetName() < rendered[j].Name) {
			if err := encode(gathered[i]); err != nil {
				return err
			}
			i++
			continue
		}
		if _, err := write(rendered[j], w); err != nil {
			return err
		}
		j++
	}
	if format.FormatType() == expfmt.TypeOpenMetrics {
		_, err := expfmt.FinalizeOpenMetrics(w)
		return err
	}
	return nil
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}
