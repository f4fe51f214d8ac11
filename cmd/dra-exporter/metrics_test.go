package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestMetricsHandlerMatchesPromhttp serves a scenario through /metrics'
// fast path and through promhttp over the same collectors, for the Accept
// headers scrapers send, and wants the same bytes and Content-Type; gzip
// is honoured; protobuf goes the slow path and still carries the families.
func TestMetricsHandlerMatchesPromhttp(t *testing.T) {
	exp := scenarioExporter(t, "../../testdata/shared-claim")
	selfReg := func() *prometheus.Registry {
		reg := prometheus.NewRegistry()
		reg.MustRegister(versioncollector.NewCollector("dra_exporter"))
		return reg
	}
	fastReg := selfReg()
	fast := metricsHandler(fastReg, exp, slog.New(slog.DiscardHandler))
	slowReg := selfReg()
	clusterReg := prometheus.NewRegistry()
	clusterReg.MustRegister(exp)
	slow := promhttp.InstrumentMetricHandler(slowReg, promhttp.HandlerFor(prometheus.Gatherers{slowReg, clusterReg}, promhttp.HandlerOpts{EnableOpenMetrics: true}))

	get := func(h http.Handler, accept, encoding string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if encoding != "" {
			r.Header.Set("Accept-Encoding", encoding)
		}
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, r)
		return rw
	}
	for _, accept := range []string{
		"", // curl
		"text/plain;version=0.0.4;q=1,*/*;q=0.1",
		// Prometheus 3's default scrape_protocols.
		"application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
		"application/openmetrics-text;version=1.0.0",
	} {
		got, want := get(fast, accept, ""), get(slow, accept, "")
		if got.Code != http.StatusOK || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("Accept %q: %d %q, promhttp %q", accept, got.Code, got.Header().Get("Content-Type"), want.Header().Get("Content-Type"))
		}
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("Accept %q: the fast path differs from promhttp:\n%s", accept, firstDiff(got.Body.Bytes(), want.Body.Bytes()))
		}
		if !bytes.Contains(got.Body.Bytes(), []byte("dra_claim_info{")) || !bytes.Contains(got.Body.Bytes(), []byte("dra_exporter_build_info{")) {
			t.Errorf("Accept %q: the cluster or the self families are missing", accept)
		}
	}

	zipped := get(fast, "", "gzip")
	if zipped.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", zipped.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if want := get(slow, "", "").Body.Bytes(); !bytes.Equal(plain, want) {
		t.Errorf("gzip body differs:\n%s", firstDiff(plain, want))
	}

	proto := get(fast, "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "")
	if ct := proto.Header().Get("Content-Type"); !bytes.Contains([]byte(ct), []byte("protobuf")) || !bytes.Contains(proto.Body.Bytes(), []byte("dra_claim_info")) {
		t.Errorf("protobuf: Content-Type %q, %d bytes, want the families", ct, proto.Body.Len())
	}
}
