package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// protoAccept is Prometheus' Accept header with native histograms on
// (scrape_protocols PrometheusProto first).
const protoAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"

// TestMetricsHandlerMatchesPromhttp serves a scenario through /metrics'
// fast path and through promhttp over the same collectors, for the Accept
// headers scrapers send (text, OpenMetrics and delimited protobuf), and
// wants the same bytes and Content-Type; gzip is honoured.
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
		protoAccept,
		"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
	} {
		got, want := get(fast, accept, ""), get(slow, accept, "")
		if got.Code != http.StatusOK || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("Accept %q: %d %q, promhttp %q", accept, got.Code, got.Header().Get("Content-Type"), want.Header().Get("Content-Type"))
		}
		if strings.Contains(got.Header().Get("Content-Type"), "protobuf") {
			// The two registries' request counters were created at
			// different times: compare what the text format shows.
			if g, w := protoText(t, got.Body.Bytes()), protoText(t, want.Body.Bytes()); !bytes.Equal(g, w) {
				t.Errorf("Accept %q: the fast path differs from promhttp:\n%s", accept, firstDiff(g, w))
			}
		} else if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("Accept %q: the fast path differs from promhttp:\n%s", accept, firstDiff(got.Body.Bytes(), want.Body.Bytes()))
		}
		if !bytes.Contains(got.Body.Bytes(), []byte("dra_claim_info")) || !bytes.Contains(got.Body.Bytes(), []byte("dra_exporter_build_info")) {
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

}

// A protobuf scrape is written from the families kept by the last scrape,
// as a text scrape is: it allocates about as often as a text scrape of the
// unchanged cluster, per family and not per series (the slow path,
// client_golang's Gather over every collector, makes several objects for
// each series).
func TestProtobufScrapeUsesTheKeptFamilies(t *testing.T) {
	exp := scenarioExporter(t, "../../testdata/compute-domain")
	h := metricsHandler(prometheus.NewRegistry(), exp, slog.New(slog.DiscardHandler))
	scrape := func(accept string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Accept", accept)
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, r)
		return rw
	}
	const textAccept = "text/plain;version=0.0.4"
	series := 0
	for line := range bytes.Lines(scrape(textAccept).Body.Bytes()) {
		if line[0] != '#' {
			series++
		}
	}
	text := testing.AllocsPerRun(3, func() { scrape(textAccept) })
	proto := testing.AllocsPerRun(3, func() { scrape(protoAccept) })
	t.Logf("%d series; an unchanged cluster's text scrape allocates %.0f times, a protobuf scrape %.0f", series, text, proto)
	if proto > text+float64(series)/4 {
		t.Errorf("a protobuf scrape of an unchanged cluster allocates %.0f times (text: %.0f) for %d series: it renders again instead of writing the kept families", proto, text, series)
	}
}

// protoText decodes a delimited protobuf exposition and renders it as text.
func protoText(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	dec := expfmt.NewDecoder(bytes.NewReader(b), expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if err != io.EOF {
				t.Fatalf("decode protobuf: %v", err)
			}
			return out.Bytes()
		}
		if _, err := expfmt.MetricFamilyToText(&out, &mf); err != nil {
			t.Fatal(err)
		}
	}
}
