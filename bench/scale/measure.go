package main

// Measuring one exporter process: time to ready, the API server's CPU while
// it syncs, its memory, and its scrapes.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Target is an exporter command and where to ask it.
type Target struct {
	Name string
	// Command is run by bash (`exec` is prepended, so the process measured
	// is the exporter itself, not a shell).
	Command    string
	ReadyURL   string // answers 200 when the exporter says it is ready
	MetricsURL string // the scraped page
	// SelfURL serves the exporter's own go_memstats; empty: MetricsURL.
	SelfURL string
	// SyncedFamily, when set, is a metric family whose series count must
	// reach SyncedCount before the exporter counts as synced: for an
	// exporter whose /readyz does not wait for its informers
	// (kube-state-metrics' answers as soon as its self-metrics exist).
	SyncedFamily string
	SyncedCount  int
}

// Result is what one target measured.
type Result struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	// SettleSeconds: how long the control plane took to go quiet before
	// the exporter started (settle).
	SettleSeconds float64 `json:"settle_seconds"`
	// ReadySeconds: process start to ready (and synced).
	ReadySeconds float64 `json:"ready_seconds"`
	// SyncCPUSeconds: the exporter's own CPU from start to ready.
	SyncCPUSeconds float64 `json:"sync_cpu_seconds"`
	// APIServerSyncCPUSeconds: kube-apiserver's CPU from the exporter's
	// start to its ready.
	APIServerSyncCPUSeconds float64 `json:"apiserver_sync_cpu_seconds"`
	EtcdSyncCPUSeconds      float64 `json:"etcd_sync_cpu_seconds"`
	RSSAfterSyncBytes       int64   `json:"rss_after_sync_bytes"`
	RSSAfter10ScrapesBytes  int64   `json:"rss_after_10_scrapes_bytes"`
	RSSAfterScrapesBytes    int64   `json:"rss_after_all_scrapes_bytes"`
	// GoHeapInuseBytes: go_memstats_heap_inuse_bytes after the scrapes.
	GoHeapInuseBytes int64 `json:"go_heap_inuse_bytes"`
	GoHeapAllocBytes int64 `json:"go_heap_alloc_bytes"`
	// Scrapes: seconds of each plain-text scrape, in order.
	Scrapes          []float64 `json:"scrape_seconds"`
	ScrapeP50Seconds float64   `json:"scrape_p50_seconds"`
	ScrapeP99Seconds float64   `json:"scrape_p99_seconds"`
	// ScrapeCPUSeconds: the exporter's CPU per plain-text scrape (mean).
	ScrapeCPUSeconds  float64 `json:"scrape_cpu_seconds"`
	GzipScrapeSeconds float64 `json:"gzip_scrape_seconds"`
	GzipBytes         int64   `json:"gzip_bytes"`
	Series            int     `json:"series"`
	Bytes             int64   `json:"bytes"`
	// CPUMicrosPerSeries: ScrapeCPUSeconds per series, in µs.
	CPUMicrosPerSeries float64 `json:"cpu_us_per_series"`

	// With -churn-rate: as many scrapes again while objects change.
	Churn                 *ChurnStats `json:"churn,omitempty"`
	ChurnScrapes          []float64   `json:"churn_scrape_seconds,omitempty"`
	ChurnScrapeP50Seconds float64     `json:"churn_scrape_p50_seconds,omitempty"`
	ChurnScrapeP99Seconds float64     `json:"churn_scrape_p99_seconds,omitempty"`
	ChurnScrapeCPUSeconds float64     `json:"churn_scrape_cpu_seconds,omitempty"`
	// ChurnInconsistent counts the churn scrapes in which a claim was not
	// in exactly one state of dra_claim_status (the first such error in
	// ChurnInconsistency); only for an exporter that has the family.
	ChurnInconsistent  int    `json:"churn_inconsistent_scrapes"`
	ChurnInconsistency string `json:"churn_inconsistency,omitempty"`
	ChurnClaimsChecked int    `json:"churn_claims_checked,omitempty"`
	RSSAfterChurnBytes int64  `json:"rss_after_churn_bytes,omitempty"`

	// Formats: protobuf scrapes and concurrent bursts (formats.go), after
	// the text scrapes and before the churn round.
	Formats *Formats `json:"formats,omitempty"`
}

type measurer struct {
	apiserverPID, etcdPID int
	dir                   string
	scrapes               int
	client                *http.Client
	// churn, when set, changes objects during a second round of scrapes.
	churn *churner
	// concurrent, when set, is the size of the bursts of concurrent
	// scrapes (formats.go).
	concurrent int
}

func newMeasurer(apiserverPID, etcdPID int, dir string, scrapes int) *measurer {
	return &measurer{
		apiserverPID: apiserverPID, etcdPID: etcdPID, dir: dir, scrapes: scrapes,
		// DisableCompression: Go's transport would otherwise ask for gzip
		// and inflate it behind our back.
		client: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DisableCompression: true}},
	}
}

// measure runs one target, measures it, and stops it.
func (m *measurer) measure(ctx context.Context, t Target, logf func(string, ...any)) (*Result, error) {
	r := &Result{Name: t.Name, Command: t.Command}
	waited, err := settle(ctx, m.apiserverPID, m.etcdPID)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	r.SettleSeconds = waited.Seconds()
	logPath := m.dir + "/" + t.Name + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	apiStart, err := cpuSeconds(m.apiserverPID)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver cpu: %w", err)
	}
	etcdStart, _ := cpuSeconds(m.etcdPID)
	cmd := exec.Command("bash", "-c", "exec "+t.Command)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", t.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	fail := func(err error) (*Result, error) {
		return nil, fmt.Errorf("%s: %w; log %s:\n%s", t.Name, err, logPath, tail(logPath, 20))
	}

	if err := m.waitReady(ctx, t, exited); err != nil {
		return fail(err)
	}
	r.ReadySeconds = time.Since(start).Seconds()
	apiEnd, _ := cpuSeconds(m.apiserverPID)
	etcdEnd, _ := cpuSeconds(m.etcdPID)
	r.APIServerSyncCPUSeconds, r.EtcdSyncCPUSeconds = apiEnd-apiStart, etcdEnd-etcdStart
	if r.SyncCPUSeconds, err = cpuSeconds(pid); err != nil {
		return fail(err)
	}
	if r.RSSAfterSyncBytes, err = rssBytes(pid); err != nil {
		return fail(err)
	}
	logf("%s ready in %.1fs (started after %.0fs for a quiet control plane; apiserver %.1f CPU-s, RSS %s); scraping %d times", t.Name, r.ReadySeconds, r.SettleSeconds, r.APIServerSyncCPUSeconds, mib(r.RSSAfterSyncBytes), m.scrapes)

	scrapes, cpuTotal, last, err := m.scrapeN(ctx, t, pid, 0, func(k int, _ []byte) error {
		if k == 9 {
			var err error
			r.RSSAfter10ScrapesBytes, err = rssBytes(pid)
			return err
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	r.Scrapes = scrapes
	if r.RSSAfterScrapesBytes, err = rssBytes(pid); err != nil {
		return fail(err)
	}
	r.ScrapeCPUSeconds = cpuTotal / float64(m.scrapes)
	r.ScrapeP50Seconds, r.ScrapeP99Seconds = quantile(r.Scrapes, 0.5), quantile(r.Scrapes, 0.99)
	r.Series, r.Bytes = countSeries(last), int64(len(last))
	if r.Series > 0 {
		r.CPUMicrosPerSeries = r.ScrapeCPUSeconds / float64(r.Series) * 1e6
	}
	gz, d, err := m.get(ctx, t.MetricsURL, true)
	if err != nil {
		return fail(fmt.Errorf("gzip scrape: %w", err))
	}
	r.GzipScrapeSeconds, r.GzipBytes = d.Seconds(), int64(len(gz))

	if m.concurrent > 0 {
		if r.Formats, err = m.formats(ctx, t, pid, 10, m.concurrent); err != nil {
			return fail(err)
		}
		f := r.Formats
		logf("%s: protobuf scrape p50 %.2fs (%s); %d at once: protobuf p50 %.2fs, RSS %s -> %s (%d failed), text p50 %.2fs, RSS %s -> %s (%d failed)",
			t.Name, f.ProtoP50Seconds, f.ProtoContentType, f.Concurrent, f.ProtoBurst.P50Seconds, mib(f.ProtoBurst.IdleRSSBytes), mib(f.ProtoBurst.PeakRSSBytes), f.ProtoBurst.Failed,
			f.TextBurst.P50Seconds, mib(f.TextBurst.IdleRSSBytes), mib(f.TextBurst.PeakRSSBytes), f.TextBurst.Failed)
	}

	self := last
	if t.SelfURL != "" && t.SelfURL != t.MetricsURL {
		if self, _, err = m.get(ctx, t.SelfURL, false); err != nil {
			return fail(fmt.Errorf("self-metrics: %w", err))
		}
	}
	if m.churn != nil {
		stop := m.churn.start(ctx)
		// Scrapes at least a second apart, so that writes land between
		// any two of them however fast a scrape is.
		scrapes, cpu, _, err := m.scrapeN(ctx, t, pid, time.Second, func(_ int, body []byte) error {
			claims, err := claimStatesConsistent(body)
			if err != nil {
				r.ChurnInconsistent++
				if r.ChurnInconsistency == "" {
					r.ChurnInconsistency = err.Error()
				}
			}
			r.ChurnClaimsChecked = max(r.ChurnClaimsChecked, claims)
			return nil
		})
		stats := stop()
		if err != nil {
			return fail(fmt.Errorf("churn: %w", err))
		}
		r.Churn = &stats
		r.ChurnScrapes = scrapes
		r.ChurnScrapeP50Seconds, r.ChurnScrapeP99Seconds = quantile(scrapes, 0.5), quantile(scrapes, 0.99)
		r.ChurnScrapeCPUSeconds = cpu / float64(len(scrapes))
		if r.RSSAfterChurnBytes, err = rssBytes(pid); err != nil {
			return fail(err)
		}
		logf("%s under churn (%.0f writes/s asked, %v done in %.0fs, %d errors): scrape p50 %.2fs p99 %.2fs, %.2f CPU-s per scrape, RSS %s",
			t.Name, stats.Rate, stats.Writes, stats.Seconds, stats.Errors, r.ChurnScrapeP50Seconds, r.ChurnScrapeP99Seconds, r.ChurnScrapeCPUSeconds, mib(r.RSSAfterChurnBytes))
		if self, _, err = m.get(ctx, t.selfURL(), false); err != nil {
			return fail(fmt.Errorf("self-metrics: %w", err))
		}
	}
	r.GoHeapInuseBytes = int64(sampleValue(self, "go_memstats_heap_inuse_bytes"))
	r.GoHeapAllocBytes = int64(sampleValue(self, "go_memstats_heap_alloc_bytes"))
	logf("%s: scrape p50 %.2fs p99 %.2fs, %.2f CPU-s per scrape, %d series, %s text, RSS after 10 scrapes %s",
		t.Name, r.ScrapeP50Seconds, r.ScrapeP99Seconds, r.ScrapeCPUSeconds, r.Series, mib(r.Bytes), mib(r.RSSAfter10ScrapesBytes))
	return r, nil
}

// selfURL is where the target serves its go_memstats.
func (t Target) selfURL() string {
	if t.SelfURL != "" {
		return t.SelfURL
	}
	return t.MetricsURL
}

// scrapeN scrapes the target m.scrapes times in plain text and returns each
// scrape's seconds, the process's CPU seconds over them, and the last body;
// scrapes start at least pace apart; after(k, body), when set, runs after
// scrape k (from 0), outside its timing.
func (m *measurer) scrapeN(ctx context.Context, t Target, pid int, pace time.Duration, after func(k int, body []byte) error) ([]float64, float64, []byte, error) {
	var cpuTotal float64
	var last []byte
	var out []float64
	var started time.Time
	for k := range m.scrapes {
		if wait := pace - time.Since(started); k > 0 && wait > 0 {
			select {
			case <-ctx.Done():
				return nil, 0, nil, ctx.Err()
			case <-time.After(wait):
			}
		}
		started = time.Now()
		before, err := cpuSeconds(pid)
		if err != nil {
			return nil, 0, nil, err
		}
		body, d, err := m.get(ctx, t.MetricsURL, false)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("scrape %d: %w", k+1, err)
		}
		end, err := cpuSeconds(pid)
		if err != nil {
			return nil, 0, nil, err
		}
		cpuTotal += end - before
		out = append(out, d.Seconds())
		last = body
		if after != nil {
			if err := after(k, body); err != nil {
				return nil, 0, nil, err
			}
		}
	}
	return out, cpuTotal, last, nil
}

// waitReady polls ReadyURL, then (with SyncedFamily) scrapes until the
// family has its series.
func (m *measurer) waitReady(ctx context.Context, t Target, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Minute)
	poll := func(ok func() bool) error {
		for !ok() {
			if time.Now().After(deadline) {
				return fmt.Errorf("not ready after 20 minutes")
			}
			select {
			case err := <-exited:
				return fmt.Errorf("exited before ready: %v", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	short := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	if err := poll(func() bool {
		resp, err := short.Get(t.ReadyURL)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return err
	}
	if t.SyncedFamily == "" {
		return nil
	}
	return poll(func() bool {
		body, _, err := m.get(ctx, t.MetricsURL, false)
		return err == nil && countFamily(body, t.SyncedFamily) >= t.SyncedCount
	})
}

// get fetches a page as Prometheus would in text format, with or without
// gzip, and returns the body as it came over the wire.
func (m *measurer) get(ctx context.Context, url string, gzip bool) ([]byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	start := time.Now()
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body[:min(len(body), 300)]))
	}
	if gzip && resp.Header.Get("Content-Encoding") != "gzip" {
		return nil, 0, fmt.Errorf("%s: asked for gzip, got Content-Encoding %q", url, resp.Header.Get("Content-Encoding"))
	}
	return body, d, nil
}

// quantile returns the nearest-rank quantile: with 20 samples, p50 is the
// 10th and p99 the 20th (the slowest).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
