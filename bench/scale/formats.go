package main

// Protobuf scrapes, one after another and many at once: a Prometheus with
// native histograms asks for protobuf first, and two Prometheus replicas,
// federation, `bundle` and ad-hoc `curl` scrape one exporter at the same
// time. What a burst of concurrent scrapes costs is the process's memory at
// its peak against its memory before.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Accept headers as Prometheus sends them: with scrape_protocols preferring
// PrometheusProto (native histograms on), and its default (OpenMetrics, then
// text).
const (
	acceptProto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6," +
		"application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
	acceptText = "text/plain;version=0.0.4"
)

// Formats is one target's protobuf scrapes and its concurrent bursts.
type Formats struct {
	// ProtoContentType: what the target answered to acceptProto.
	ProtoContentType string    `json:"proto_content_type"`
	ProtoScrapes     []float64 `json:"proto_scrape_seconds"`
	ProtoP50Seconds  float64   `json:"proto_scrape_p50_seconds"`
	ProtoBytes       int64     `json:"proto_bytes"`
	// Bursts: Concurrent scrapes at once, in protobuf and in text.
	Concurrent int   `json:"concurrent"`
	ProtoBurst Burst `json:"proto_burst"`
	TextBurst  Burst `json:"text_burst"`
}

// Burst is one round of concurrent scrapes, all gzipped as Prometheus asks.
type Burst struct {
	IdleRSSBytes  int64   `json:"idle_rss_bytes"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes"`
	P50Seconds    float64 `json:"p50_seconds"`
	MaxSeconds    float64 `json:"max_seconds"`
	Failed        int     `json:"failed"`
	FirstFailure  string  `json:"first_failure,omitempty"`
	PeakOverIdle  float64 `json:"peak_over_idle"`
	RSSAfterBytes int64   `json:"rss_after_bytes"`
}

// formats runs n protobuf scrapes one after another, then a burst of
// concurrent protobuf scrapes and one of text scrapes.
func (m *measurer) formats(ctx context.Context, t Target, pid, n, concurrent int) (*Formats, error) {
	f := &Formats{Concurrent: concurrent}
	for k := range n {
		body, d, ctype, err := m.fetch(ctx, t.MetricsURL, acceptProto, false)
		if err != nil {
			return nil, fmt.Errorf("protobuf scrape %d: %w", k+1, err)
		}
		f.ProtoScrapes = append(f.ProtoScrapes, d.Seconds())
		f.ProtoContentType, f.ProtoBytes = ctype, int64(len(body))
	}
	f.ProtoP50Seconds = quantile(f.ProtoScrapes, 0.5)
	var err error
	if f.ProtoBurst, err = m.burst(ctx, t, pid, concurrent, acceptProto); err != nil {
		return nil, fmt.Errorf("protobuf burst: %w", err)
	}
	if f.TextBurst, err = m.burst(ctx, t, pid, concurrent, acceptText); err != nil {
		return nil, fmt.Errorf("text burst: %w", err)
	}
	return f, nil
}

// burst starts n scrapes at once and samples the process's RSS every 5 ms
// until the last ends.
func (m *measurer) burst(ctx context.Context, t Target, pid, n int, accept string) (Burst, error) {
	var b Burst
	var err error
	if b.IdleRSSBytes, err = rssBytes(pid); err != nil {
		return b, err
	}
	b.PeakRSSBytes = b.IdleRSSBytes
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if rss, err := rssBytes(pid); err == nil {
					b.PeakRSSBytes = max(b.PeakRSSBytes, rss)
				}
			}
		}
	}()
	seconds := make([]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, d, _, err := m.fetch(ctx, t.MetricsURL, accept, true)
			seconds[i], errs[i] = d.Seconds(), err
		})
	}
	wg.Wait()
	close(done)
	<-sampled
	var ok []float64
	for i, err := range errs {
		if err != nil {
			b.Failed++
			if b.FirstFailure == "" {
				b.FirstFailure = err.Error()
			}
			continue
		}
		ok = append(ok, seconds[i])
	}
	b.P50Seconds, b.MaxSeconds = quantile(ok, 0.5), quantile(ok, 1)
	b.PeakOverIdle = float64(b.PeakRSSBytes) / float64(b.IdleRSSBytes)
	b.RSSAfterBytes, err = rssBytes(pid)
	return b, err
}

// fetch gets a page with an Accept header, gzipped or not, and returns the
// body as it came over the wire and its Content-Type.
func (m *measurer) fetch(ctx context.Context, url, accept string, gzip bool) ([]byte, time.Duration, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, "", err
	}
	req.Header.Set("Accept", accept)
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	start := time.Now()
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil {
		return nil, 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return body, d, resp.Header.Get("Content-Type"), nil
}
