package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// Soak environment: `make soak DURATION=30m` sets DRA_SOAK_DURATION; the
// report goes to DRA_SOAK_OUT (default bin/soak).
const (
	envSoakDuration = "DRA_SOAK_DURATION"
	envSoakOut      = "DRA_SOAK_OUT"
)

// faultEvery is the time between two injected faults; they take turns.
const faultEvery = 2 * time.Minute

// soakReport is what `make soak` writes (soak.json, soak.md).
type soakReport struct {
	Duration         string        `json:"duration"`
	Started          time.Time     `json:"started"`
	Faults           []faultRecord `json:"faults"`
	Scrapes          int           `json:"scrapes"`
	ScrapeErrors     int           `json:"scrape_errors"`
	ScrapeP50        float64       `json:"scrape_p50_seconds"`
	ScrapeP99        float64       `json:"scrape_p99_seconds"`
	ScrapeMax        float64       `json:"scrape_max_seconds"`
	Inconsistent     int           `json:"inconsistent_scrapes"`
	Writes           int           `json:"writes"`
	WriteErrors      int           `json:"write_errors"`
	RSS              []rssSample   `json:"rss"`
	FinalDiff        string        `json:"final_diff"`
	FinalDiffTookS   float64       `json:"final_diff_seconds"`
	ExporterRestarts int           `json:"exporter_restarts"`
	APIRestarts      int           `json:"apiserver_restarts"`
	Compactions      int           `json:"compactions"`
}

type faultRecord struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
	// Down is how long the fault lasted (the API server down, the
	// exporter not serving).
	DownS float64 `json:"down_seconds"`
	// ConvergeS is from the end of the fault to every resource current.
	ConvergeS float64 `json:"converge_seconds"`
	Error     string  `json:"error,omitempty"`
}

type rssSample struct {
	At       time.Time `json:"at"`
	Elapsed  string    `json:"elapsed"`
	Bytes    int64     `json:"bytes"`
	Exporter int       `json:"exporter"` // which process (restarts count up)
}

// soakExporter is the exporter under soak; restarts replace it.
type soakExporter struct {
	mu  sync.Mutex
	exp *cluster.Exporter
	gen int
}

func (s *soakExporter) get() (*cluster.Exporter, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exp, s.gen
}

// TestSoak runs churn (pods created, run, flipped between ready and not,
// deleted), API server restarts, exporter restarts and etcd compactions for
// DRA_SOAK_DURATION, scraping every second, then compares the exporter with
// a fresh one: the difference must be empty. It writes a report of RSS over
// time, scrape latency, the faults and how long each took to converge.
// Not part of make test: `make soak DURATION=30m`.
func TestSoak(t *testing.T) {
	spec := os.Getenv(envSoakDuration)
	if spec == "" {
		t.Skipf("soak runs only with %s set (make soak DURATION=30m)", envSoakDuration)
	}
	duration, err := time.ParseDuration(spec)
	if err != nil {
		t.Fatalf("%s=%q: %v", envSoakDuration, spec, err)
	}
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-soak")
	api, kubeconfig := faultAPI(t)
	rep := &soakReport{Duration: duration.String(), Started: time.Now().UTC()}
	cur := &soakExporter{}
	launch := func() {
		cur.mu.Lock()
		defer cur.mu.Unlock()
		cur.gen++
		e, err := cluster.LaunchExporter(env.exporter, kubeconfig, filepath.Join(env.dir, fmt.Sprintf("soak-%d.log", cur.gen)), faultExporterArgs...)
		if err != nil {
			t.Fatal(err)
		}
		cur.exp = e
	}
	launch()
	t.Cleanup(func() { e, _ := cur.get(); e.Stop() })
	if e, _ := cur.get(); e.WaitReady(ctx, time.Minute) != nil {
		t.Fatal("soak exporter not ready")
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex // guards rep's counters and the durations below
	var durations []float64
	// Scrape every second, whichever exporter is current.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			e, _ := cur.get()
			text, took, err := e.ScrapeText(10 * time.Second)
			mu.Lock()
			rep.Scrapes++
			if err != nil {
				// A restarting exporter does not answer: not an error
				// of the exporter.
				if !strings.Contains(err.Error(), "connection refused") {
					rep.ScrapeErrors++
				}
				mu.Unlock()
				continue
			}
			durations = append(durations, took.Seconds())
			mu.Unlock()
			fams, err := parseExposition(text)
			if err == nil {
				err = consistentClaims(cluster.Metrics(fams))
			}
			if err != nil {
				mu.Lock()
				rep.Inconsistent++
				mu.Unlock()
				t.Logf("inconsistent scrape: %v", err)
			}
		}
	}()
	// RSS every 10 s.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		start := time.Now()
		for {
			e, gen := cur.get()
			if rss := rssBytes(e.PID()); rss > 0 {
				mu.Lock()
				rep.RSS = append(rep.RSS, rssSample{At: time.Now().UTC(), Elapsed: time.Since(start).Round(time.Second).String(), Bytes: rss, Exporter: gen})
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// Churn: keep about eight pods, a write every half second.
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var live []string
		n := 0
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var err error
			switch {
			case len(live) < 8 && i%3 != 2:
				name := fmt.Sprintf("soak-%d", n)
				n++
				_, err = env.cp.Client.CoreV1().Pods(ns).Create(ctx, cluster.PodWithTemplate(ns, name, "gpu"), metav1.CreateOptions{})
				if err == nil {
					live = append(live, name)
				}
			case len(live) > 0 && i%3 == 2:
				name := live[0]
				live = live[1:]
				err = cluster.ForceDelete(ctx, env.cp.Client, ns, name)
			case len(live) > 0:
				name := live[i%len(live)]
				if p, gerr := env.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil && p.Spec.NodeName != "" {
					err = env.kubelet.SetRunning(ctx, ns, name, i%4 != 0)
				}
			}
			mu.Lock()
			rep.Writes++
			if err != nil {
				rep.WriteErrors++
			}
			mu.Unlock()
		}
	}()

	// Faults, in turn, until the duration is over.
	waitCurrent := func(since time.Time) (time.Duration, error) {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			e, _ := cur.get()
			if m, err := e.Scrape(); err == nil && allWatching(m) == nil {
				return time.Since(since), nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return 0, fmt.Errorf("not current within 2m")
	}
	kinds := []string{"apiserver-restart", "exporter-restart", "compaction-and-apiserver-restart"}
	end := time.Now().Add(duration)
	for i := 0; time.Until(end) > faultEvery/2; i++ {
		time.Sleep(min(faultEvery, time.Until(end)))
		kind := kinds[i%len(kinds)]
		f := faultRecord{Kind: kind, At: time.Now().UTC()}
		var back time.Time
		switch kind {
		case "apiserver-restart", "compaction-and-apiserver-restart":
			api.Kill()
			if kind == "compaction-and-apiserver-restart" {
				time.Sleep(5 * time.Second)
				if _, err := env.cp.CompactEtcd(ctx); err != nil {
					f.Error = err.Error()
				}
				rep.Compactions++
			} else {
				time.Sleep(20 * time.Second)
			}
			if err := api.Start(ctx); err != nil {
				t.Fatalf("restart the API server: %v", err)
			}
			rep.APIRestarts++
			back = time.Now()
		case "exporter-restart":
			e, _ := cur.get()
			e.Stop()
			launch()
			e, _ = cur.get()
			if err := e.WaitReady(ctx, 2*time.Minute); err != nil {
				t.Fatalf("restarted exporter: %v", err)
			}
			rep.ExporterRestarts++
			back = time.Now()
		}
		f.DownS = back.Sub(f.At).Seconds()
		took, err := waitCurrent(back)
		if err != nil {
			f.Error = err.Error()
			t.Errorf("%s at %s: %v", kind, f.At.Format(time.RFC3339), err)
		}
		f.ConvergeS = took.Seconds()
		rep.Faults = append(rep.Faults, f)
		t.Logf("%s: down %.1fs, current %.2fs after", kind, f.DownS, f.ConvergeS)
	}
	close(stop)
	wg.Wait()

	// Quiet: the last writes settle, then the diff with a fresh exporter.
	time.Sleep(5 * time.Second)
	e, _ := cur.get()
	diff, took := compareWithFresh(t, e, "soak", time.Minute)
	rep.FinalDiff, rep.FinalDiffTookS = diff, took.Seconds()
	if diff != "" {
		t.Errorf("series differ from a fresh exporter's after the soak:\n%s", diff)
	}
	mu.Lock()
	sort.Float64s(durations)
	if n := len(durations); n > 0 {
		rep.ScrapeP50 = durations[n/2]
		rep.ScrapeP99 = durations[min(n-1, n*99/100)]
		rep.ScrapeMax = durations[n-1]
	}
	mu.Unlock()
	if rep.Inconsistent > 0 || rep.ScrapeErrors > 0 {
		t.Errorf("%d inconsistent scrapes, %d scrape errors of %d", rep.Inconsistent, rep.ScrapeErrors, rep.Scrapes)
	}
	if rep.ScrapeMax > 10 {
		t.Errorf("slowest scrape %.1fs, over Prometheus' default 10s timeout", rep.ScrapeMax)
	}
	if err := writeSoakReport(rep); err != nil {
		t.Error(err)
	}
}

func writeSoakReport(rep *soakReport) error {
	out := os.Getenv(envSoakOut)
	if out == "" {
		out = repoPath("bin/soak")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "soak.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak, %s from %s\n\n", rep.Duration, rep.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "- restarts survived: %d API server, %d exporter, %d etcd compactions (each with an API server restart)\n", rep.APIRestarts, rep.ExporterRestarts, rep.Compactions)
	fmt.Fprintf(&b, "- writes: %d (%d failed)\n", rep.Writes, rep.WriteErrors)
	fmt.Fprintf(&b, "- scrapes: %d, every second; p50 %.3fs, p99 %.3fs, max %.3fs; %d errors, %d inconsistent\n", rep.Scrapes, rep.ScrapeP50, rep.ScrapeP99, rep.ScrapeMax, rep.ScrapeErrors, rep.Inconsistent)
	if rep.FinalDiff == "" {
		fmt.Fprintf(&b, "- final diff against a fresh exporter: empty\n")
	} else {
		fmt.Fprintf(&b, "- final diff against a fresh exporter:\n\n```\n%s\n```\n", rep.FinalDiff)
	}
	b.WriteString("\n| fault | at | down (s) | current after (s) |\n|---|---|---|---|\n")
	for _, f := range rep.Faults {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.2f%s |\n", f.Kind, f.At.Format("15:04:05"), f.DownS, f.ConvergeS, map[bool]string{true: " (" + f.Error + ")", false: ""}[f.Error != ""])
	}
	b.WriteString("\n| elapsed | exporter process | RSS (MiB) |\n|---|---|---|\n")
	var last time.Time
	for i, s := range rep.RSS {
		if i == len(rep.RSS)-1 || s.At.Sub(last) >= time.Minute {
			fmt.Fprintf(&b, "| %s | %d | %.1f |\n", s.Elapsed, s.Exporter, float64(s.Bytes)/(1<<20))
			last = s.At
		}
	}
	return os.WriteFile(filepath.Join(out, "soak.md"), []byte(b.String()), 0o644)
}
