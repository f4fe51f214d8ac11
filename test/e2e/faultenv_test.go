package e2e

// The harness of the fault-injection tests (zfaults_test.go) and the soak
// (soak_test.go): an API server replica over the control plane's etcd that
// an exporter under test talks to, so that killing it cuts that exporter
// off while the scheduler, the controllers and the test go on writing
// through the first; a scraper that scrapes every second and keeps every
// scrape; and the comparison with a fresh exporter.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

var faults struct {
	once       sync.Once
	api        *cluster.APIServerReplica
	kubeconfig string // the exporter's token, on the replica
	err        error
}

// faultAPI returns the API server replica the fault tests' exporters talk
// to, started the first time (it lives as long as the control plane), and
// a kubeconfig for it with the exporter's read-only token.
func faultAPI(t *testing.T) (*cluster.APIServerReplica, string) {
	t.Helper()
	faults.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		faults.api, faults.err = env.cp.StartAPIServerReplica(ctx, "kube-apiserver-2")
		if faults.err == nil {
			faults.kubeconfig, faults.err = faults.api.Kubeconfig(env.kubeconfig)
		}
	})
	if faults.err != nil {
		t.Fatalf("API server replica: %v", faults.err)
	}
	t.Cleanup(func() {
		// A test that failed with the replica down leaves it up for the next.
		if !faults.api.Running() {
			if err := faults.api.Start(context.Background()); err != nil {
				t.Errorf("restart the API server replica: %v", err)
			}
		}
	})
	return faults.api, faults.kubeconfig
}

// faultExporterArgs are the flags of every exporter the fault tests run,
// fresh ones included (the same grace period as the shared exporter's).
var faultExporterArgs = []string{"--claim.unreserved-grace-period=3s"}

// launchFaultExporter runs an exporter against kubeconfig, logging to
// env.dir/name.log, stopped at the end of the test; it does not wait for
// it to be ready.
func launchFaultExporter(t *testing.T, name, kubeconfig string) *cluster.Exporter {
	t.Helper()
	e, err := cluster.LaunchExporter(env.exporter, kubeconfig, filepath.Join(env.dir, name+".log"), faultExporterArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("----- %s (%s)\n%s", name, e.Log, cluster.Tail(e.Log, 60))
		}
	})
	return e
}

// startFaultExporter is launchFaultExporter, waiting until it is ready.
func startFaultExporter(t *testing.T, name, kubeconfig string) *cluster.Exporter {
	t.Helper()
	e := launchFaultExporter(t, name, kubeconfig)
	if err := e.WaitReady(context.Background(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	return e
}

// scrape is one scrape of an exporter.
type scrape struct {
	at   time.Time
	took time.Duration
	m    cluster.Metrics
	err  error
}

// scraper scrapes an exporter every interval, as Prometheus would, and
// keeps every scrape.
type scraper struct {
	mu       sync.Mutex
	got      []scrape
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func startScraper(e *cluster.Exporter, interval time.Duration) *scraper {
	s := &scraper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			at := time.Now()
			// Prometheus' default scrape timeout.
			text, took, err := e.ScrapeText(10 * time.Second)
			sc := scrape{at: at, took: took, err: err}
			if err == nil {
				var fams map[string]*dto.MetricFamily
				if fams, err = parseExposition(text); err == nil {
					sc.m = cluster.Metrics(fams)
				}
				sc.err = err
			}
			s.mu.Lock()
			s.got = append(s.got, sc)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// scrapes returns the scrapes so far.
func (s *scraper) scrapes() []scrape {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// Stop stops scraping (again: no-op) and returns every scrape.
func (s *scraper) Stop() []scrape {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return s.scrapes()
}

// waitScrape waits until a scrape taken after since passes cond, and
// returns it.
func (s *scraper) waitScrape(t *testing.T, since time.Time, timeout time.Duration, what string, cond func(m cluster.Metrics) error) scrape {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	seen := 0
	for time.Now().Before(deadline) {
		got := s.scrapes()
		for _, sc := range got[seen:] {
			if !sc.at.After(since) {
				continue
			}
			if sc.err != nil {
				last = sc.err
				continue
			}
			if last = cond(sc.m); last == nil {
				return sc
			}
		}
		seen = len(got)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, last)
	return scrape{}
}

// watchHealth returns each resource's dra_exporter_watch_healthy.
func watchHealth(m cluster.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m.Find("dra_exporter_watch_healthy", nil) {
		out[s.Labels["resource"]] = s.Value
	}
	return out
}

// allWatching is a scrape condition: every resource is current.
func allWatching(m cluster.Metrics) error {
	h := watchHealth(m)
	if len(h) == 0 {
		return fmt.Errorf("no dra_exporter_watch_healthy")
	}
	for r, v := range h {
		if v != 1 {
			return fmt.Errorf("%s not current (watch_healthy %v)", r, v)
		}
	}
	return nil
}

// stateSeries returns every state series of a scrape, one sorted line
// each: what `snapshot` serves too (no histograms, self-metrics, runtime).
func stateSeries(m cluster.Metrics) []string {
	var out []string
	for name, mf := range m {
		if liveOnly(name, mf) {
			continue
		}
		for _, s := range seriesOf(mf) {
			out = append(out, name+s)
		}
	}
	sort.Strings(out)
	return out
}

// diffSeries says how two sets of state series differ ("" when equal).
func diffSeries(got, want []string) string {
	a, b := minus(got, want), minus(want, got)
	if len(a) == 0 && len(b) == 0 {
		return ""
	}
	return fmt.Sprintf("only in the exporter under test (%d):\n  %s\nonly in the fresh one (%d):\n  %s",
		len(a), strings.Join(a, "\n  "), len(b), strings.Join(b, "\n  "))
}

// compareWithFresh starts a fresh exporter on the control plane's own API
// server and compares its state series with the exporter's until they
// agree (objects may still be settling) or the timeout; it returns the last
// difference ("" when they agreed) and how long agreeing took.
func compareWithFresh(t *testing.T, e *cluster.Exporter, name string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	fresh := startFaultExporter(t, name+"-fresh", env.kubeconfig)
	defer fresh.Stop()
	start := time.Now()
	var diff string
	for {
		a, errA := e.Scrape()
		b, errB := fresh.Scrape()
		a2, errA2 := e.Scrape()
		switch {
		case errA != nil || errB != nil || errA2 != nil:
			diff = fmt.Sprintf("scrape: %v %v %v", errA, errB, errA2)
		case !slices.Equal(stateSeries(a), stateSeries(a2)):
			diff = "the cluster changed between the scrapes"
		default:
			diff = diffSeries(stateSeries(a), stateSeries(b))
		}
		if diff == "" || time.Since(start) > timeout {
			return diff, time.Since(start)
		}
		time.Sleep(time.Second)
	}
}

// runningPods creates pods with the template claim "gpu" in ns, waits for
// the real scheduler to bind them and has the kubelet run them Ready.
func runningPods(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "gpu", metav1.GetOptions{}); err != nil {
		if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		createPod(t, cluster.PodWithTemplate(ns, n, "gpu"))
	}
	for _, n := range names {
		scheduled(t, ns, n)
		if err := env.kubelet.SetRunning(ctx, ns, n, true); err != nil {
			t.Fatal(err)
		}
	}
}

// deletePods force-deletes pods and waits until their generated claims are
// gone (the controller-manager cleans them up).
func deletePods(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	var claims []string
	for _, n := range names {
		claims = append(claims, generatedClaim(t, ns, n))
		if err := cluster.ForceDelete(ctx, env.cp.Client, ns, n); err != nil {
			t.Fatal(err)
		}
	}
	err := cluster.WaitFor(ctx, 30*time.Second, "claims of deleted pods gone", func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range list.Items {
			if slices.Contains(claims, c.Name) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// histogramCount is the observation count of a histogram's series with
// the labels.
func histogramCount(m cluster.Metrics, name string, labels map[string]string) float64 {
	return m.Sum(name, labels)
}

// histogramAtMost is how many observations of the series with the labels
// were at most le seconds.
func histogramAtMost(m cluster.Metrics, name string, labels map[string]string, le float64) float64 {
	mf := m[name]
	if mf == nil {
		return 0
	}
	var n float64
	for _, metric := range mf.GetMetric() {
		match := true
		got := map[string]string{}
		for _, lp := range metric.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				match = false
			}
		}
		if !match || metric.Histogram == nil {
			continue
		}
		for _, b := range metric.Histogram.GetBucket() {
			if b.GetUpperBound() == le {
				n += float64(b.GetCumulativeCount())
			}
		}
	}
	return n
}

// rssBytes reads a process's resident set size.
func rssBytes(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

// eventuallyOn scrapes an exporter until check passes.
func eventuallyOn(t *testing.T, e *cluster.Exporter, timeout time.Duration, what string, check func(m cluster.Metrics) error) cluster.Metrics {
	t.Helper()
	m, err := e.Await(timeout, 200*time.Millisecond, check)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return m
}
