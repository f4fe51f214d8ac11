package e2e

// The fault-injection tests. The file is named to run after the other e2e
// tests (go test runs files in name order): it kills and restarts API
// servers and compacts etcd, after which the control plane's own caches
// take a moment to settle.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// convergeBound is how soon after the API server answers again the
// exporter must hold every resource as the API server has it. Measured
// 1-3 s here (the reflector waits 0.8-1.6 s before relisting after a 410);
// the bound leaves room for a loaded 2-core machine.
const convergeBound = 10 * time.Second

// outage is the length of the API server outage.
const outage = 30 * time.Second

// The API server the exporter talks to is killed (SIGKILL) for 30 s while
// pods and claims change through another replica (two pods deleted and
// their claims released, two created, allocated and started), then more
// change right after it returns. Scraping every second throughout:
//   - while it is down, every resource reads not watching and the verdicts
//     read as held, and DRAExporterWatchStale fires for each resource on a
//     real Prometheus (its `for:` at 0s) and resolves after;
//   - no scrape ever has a leak, or a blocked pod other than those created
//     after the return (which are, briefly, really blocked): the verdicts
//     never mix pods from after the outage with claims from before it;
//   - every resource is current within convergeBound of the return, and
//     the state series then equal a fresh exporter's.
//
// On the code before this test, the informers resumed 20-65 s after the
// API server, in a random order, with dra_exporter_apiserver_up 1 and no
// error counted: deleted pods' claims read as pod_missing leaks and the new
// pods as claim_not_found until the claims caught up.
func TestFaultAPIServerOutage(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-outage")
	api, kubeconfig := faultAPI(t)
	exp := startFaultExporter(t, "outage", kubeconfig)
	prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary: os.Getenv(cluster.EnvPrometheus), Dir: filepath.Join(env.dir, "prometheus-outage"),
		Target: strings.TrimPrefix(exp.URL, "http://"), Interval: time.Second,
		RuleFiles: []string{repoPath("rules/exporter.yaml")}, ZeroFor: true,
	})
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	defer prom.Stop()

	runningPods(t, ns, "keep-0", "keep-1", "doomed-0", "doomed-1")
	sc := startScraper(exp, time.Second)
	defer sc.Stop()
	// The pods were just set running through the API: the first scrapes
	// may come before the exporter saw it (a pod briefly, and rightly,
	// node_prepare_pending). The sequence is checked from the first scrape
	// that shows them running.
	before := sc.waitScrape(t, time.Now(), time.Minute, "the namespace's pods running and current", func(m cluster.Metrics) error {
		if err := reservedIn(m, ns, 4); err != nil {
			return err
		}
		if err := none(m, "dra_pod_blocked", map[string]string{"namespace": ns}); err != nil {
			return err
		}
		return allWatching(m)
	})

	killed := time.Now()
	api.Kill()
	t.Logf("API server replica killed")
	// The cluster changes meanwhile, through the other API server.
	deletePods(t, ns, "doomed-0", "doomed-1")
	runningPods(t, ns, "during-0", "during-1")
	changed := time.Since(killed)
	time.Sleep(time.Until(killed.Add(outage)))
	restarting := time.Now()
	if err := api.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	t.Logf("API server replica ready again after %s (changes made in the first %s)", ready.Sub(killed).Round(time.Millisecond), changed.Round(time.Millisecond))
	after := []string{"after-0", "after-1"}
	runningPods(t, ns, after...)
	settled := sc.waitScrape(t, ready, 90*time.Second, "the cluster's state after the return", func(m cluster.Metrics) error {
		if err := reservedIn(m, ns, 6); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
	t.Logf("the namespace's series settled %s after the API server answered", settled.at.Sub(ready).Round(time.Millisecond))
	sc.waitScrape(t, ready, time.Minute, "every resource current", allWatching)
	var current *scrape
	for _, s := range sc.scrapes() {
		if s.at.After(ready) && s.err == nil && allWatching(s.m) == nil {
			current = &s
			break
		}
	}
	switch {
	case current == nil:
		t.Errorf("no scrape after the return says every resource is current")
	case current.at.Sub(ready) > convergeBound:
		t.Errorf("current %s after the API server answered, want within %s", current.at.Sub(ready).Round(time.Millisecond), convergeBound)
	default:
		t.Logf("every resource current %s after the API server answered (bound %s)", current.at.Sub(ready).Round(time.Millisecond), convergeBound)
	}
	end := time.Now()
	scrapes := sc.Stop()

	// Every scrape: no leak, no blocked pod but the ones created after
	// the return; while the API server was down, every resource stale and
	// the verdicts held.
	var down, held int
	for _, s := range scrapes {
		if s.at.Before(before.at) {
			continue
		}
		if s.err != nil {
			t.Errorf("scrape at %s: %v", s.at.Format(time.RFC3339Nano), s.err)
			continue
		}
		if leaks := s.m.Find("dra_claim_reservation_leak", map[string]string{"namespace": ns}); len(leaks) > 0 {
			t.Errorf("scrape at +%s: leak %v", s.at.Sub(killed).Round(time.Millisecond), leaks)
		}
		for _, b := range s.m.Find("dra_pod_blocked", map[string]string{"namespace": ns}) {
			if !slices.Contains(after, b.Labels["pod"]) {
				t.Errorf("scrape at +%s: blocked %v", s.at.Sub(killed).Round(time.Millisecond), b)
			}
		}
		if s.at.After(killed.Add(3*time.Second)) && s.at.Before(restarting) {
			down++
			for r, v := range watchHealth(s.m) {
				if v != 0 {
					t.Errorf("scrape at +%s, API server down: %s watch_healthy %v", s.at.Sub(killed).Round(time.Millisecond), r, v)
				}
			}
			if s.m.Sum("dra_exporter_verdicts_held", nil) == 1 {
				held++
			}
			if stale := s.m.Find("dra_exporter_watch_stale_seconds", map[string]string{"resource": "pods"}); len(stale) != 1 || stale[0].Value < 1 {
				t.Errorf("scrape at +%s: pods stale seconds %v", s.at.Sub(killed).Round(time.Millisecond), stale)
			}
		}
	}
	if down < 20 || held != down {
		t.Errorf("%d scrapes while the API server was down, %d with the verdicts held: want at least 20, all held", down, held)
	}
	final := scrapes[len(scrapes)-1].m
	for _, r := range []string{"pods", "resourceclaims"} {
		if n := final.Sum("dra_exporter_watch_errors_total", map[string]string{"resource": r, "reason": "unreachable"}); n == 0 {
			t.Errorf("%s: no unreachable error counted", r)
		}
	}
	t.Logf("watch errors: %v; relists: %v", final.Find("dra_exporter_watch_errors_total", map[string]string{"resource": "pods"}),
		final.Find("dra_exporter_relists_total", nil))

	// The alert said which resources were stale, while they were.
	firing, err := prom.QueryRange(ctx, `ALERTS{alertname="DRAExporterWatchStale",alertstate="firing"}`, killed, end, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stale := map[string]bool{}
	for _, s := range firing {
		stale[s.Labels["resource"]] = true
	}
	for _, r := range []string{"deviceclasses", "resourceslices", "resourceclaims", "pods", "nodes", "events", "devicetaintrules"} {
		if !stale[r] {
			t.Errorf("DRAExporterWatchStale never fired for %s during the outage (fired for %v)", r, stale)
		}
	}
	waitAlert(t, prom, "DRAExporterWatchStale", nil, false)

	equalsFresh(t, exp, "outage")
}

// etcd is compacted while the exporter's API server is down, and the API
// server comes back: the watches resume from a resourceVersion that no
// longer exists (410 Gone) and relist. Pods created, allocated, started
// and readied during the gap are observed once, from their timestamps
// (never with the gap's length); a second relist observes nothing again;
// the exporter converges to a fresh one's series.
func TestFaultCompactionRelist(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-compact")
	api, kubeconfig := faultAPI(t)
	exp := startFaultExporter(t, "compact", kubeconfig)
	// Timestamps have second resolution: a transition in the second the
	// exporter started is not recovered (it may have been before it).
	time.Sleep(1100 * time.Millisecond)

	runningPods(t, ns, "live-0", "live-1")
	allocated := map[string]string{"device_class": cluster.GPUClass}
	eventuallyOn(t, exp, waitMetric, "the live pods observed", func(m cluster.Metrics) error {
		if err := reservedIn(m, ns, 2); err != nil {
			return err
		}
		return allWatching(m)
	})

	api.Kill()
	gapStart := time.Now()
	runningPods(t, ns, "gap-0", "gap-1")
	rev, err := env.cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd compacted at revision %d", rev)
	time.Sleep(time.Until(gapStart.Add(20 * time.Second)))
	before, err := exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	m := eventuallyOn(t, exp, 30*time.Second, "current after the relist", func(m cluster.Metrics) error {
		if err := allWatching(m); err != nil {
			return err
		}
		if err := reservedIn(m, ns, 4); err != nil {
			return err
		}
		return nil
	})
	t.Logf("current %s after the API server answered", time.Since(ready).Round(time.Millisecond))
	for _, r := range []string{"pods", "resourceclaims"} {
		if m.Sum("dra_exporter_relists_total", map[string]string{"resource": r}) < 1 {
			t.Errorf("%s: no relist counted", r)
		}
		if m.Sum("dra_exporter_watch_errors_total", map[string]string{"resource": r, "reason": "expired"}) < 1 {
			t.Errorf("%s: 410 Gone not counted", r)
		}
	}
	// The gap's two pods are observed once each, from their timestamps:
	// made ready within seconds of creation, not the 20 s of the gap.
	cases := []struct {
		name   string
		family string
		labels map[string]string
	}{{"allocation", "dra_claim_allocation_duration_seconds", allocated}}
	for _, stage := range []string{"claim_created", "allocated", "bound", "started", "ready"} {
		cases = append(cases, struct {
			name   string
			family string
			labels map[string]string
		}{"startup " + stage, "dra_pod_startup_duration_seconds", map[string]string{"lane": "dra", "stage": stage}})
	}
	for _, tc := range cases {
		was := histogramCount(before, tc.family, tc.labels)
		now := histogramCount(m, tc.family, tc.labels)
		if now-was != 2 {
			t.Errorf("%s: %v observations during the relist, want the gap's 2 pods once each", tc.name, now-was)
		}
		fast := histogramAtMost(m, tc.family, tc.labels, 10) - histogramAtMost(before, tc.family, tc.labels, 10)
		if fast != now-was {
			t.Errorf("%s: %v of %v recovered observations within 10s: timed by the relist, not the timestamps", tc.name, fast, now-was)
		}
	}

	// A second relist (the API server restarted again) observes nothing.
	api.Kill()
	time.Sleep(2 * time.Second)
	if err := api.Start(ctx); err != nil {
		t.Fatal(err)
	}
	again := eventuallyOn(t, exp, 30*time.Second, "current after the second restart", allWatching)
	for _, f := range []string{"dra_claim_allocation_duration_seconds", "dra_pod_startup_duration_seconds", "dra_claim_release_duration_seconds"} {
		if a, b := histogramCount(m, f, nil), histogramCount(again, f, nil); a != b {
			t.Errorf("%s: %v observations, %v after another relist: observed twice", f, a, b)
		}
	}
	equalsFresh(t, exp, "compact")
}

// The exporter restarts mid-scenario, and its API server is down while it
// starts: pods created and started after the process started, before it
// could list, are recovered from their timestamps; those from before the
// restart are not observed again; the state series are a fresh exporter's
// and the old one's.
func TestFaultExporterRestart(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-restart")
	api, kubeconfig := faultAPI(t)
	old := startFaultExporter(t, "restart-old", kubeconfig)
	runningPods(t, ns, "old-0", "old-1")
	oldScrape := eventuallyOn(t, old, waitMetric, "the old pods running", func(m cluster.Metrics) error {
		if err := reservedIn(m, ns, 2); err != nil {
			return err
		}
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
	oldSeries := stateSeries(oldScrape)
	old.Stop()

	api.Kill()
	restarted := launchFaultExporter(t, "restart-new", kubeconfig)
	// Timestamps have second resolution: what follows is more than a
	// second after the exporter took its start time (before it serves
	// HTTP; a loaded machine can take over a second to get there).
	if err := restarted.WaitServing(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	runningPods(t, ns, "new-0", "new-1")
	if err := api.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := restarted.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	m := eventuallyOn(t, restarted, waitMetric, "current, the new pods in", func(m cluster.Metrics) error {
		if err := reservedIn(m, ns, 4); err != nil {
			return err
		}
		return allWatching(m)
	})
	// Histograms: the two pods started after the restart, every stage
	// recovered; nothing of the pods from before.
	for _, stage := range []string{"claim_created", "allocated", "bound", "started", "ready"} {
		if n := histogramCount(m, "dra_pod_startup_duration_seconds", map[string]string{"lane": "dra", "stage": stage}); n != 2 {
			t.Errorf("startup stage %s: %v observations, want the 2 pods started after the restart", stage, n)
		}
	}
	if n := histogramCount(m, "dra_claim_allocation_duration_seconds", nil); n != 2 {
		t.Errorf("allocations: %v observations, want 2", n)
	}
	if n := histogramCount(m, "dra_claim_release_duration_seconds", nil); n != 0 {
		t.Errorf("releases: %v observations, want none", n)
	}
	// The old pods' series are as the old exporter served them.
	var newSeries []string
	for _, s := range stateSeries(m) {
		if !strings.Contains(s, "new-") {
			newSeries = append(newSeries, s)
		}
	}
	var oldOnly []string
	for _, s := range oldSeries {
		if strings.Contains(s, ns) {
			oldOnly = append(oldOnly, s)
		}
	}
	if missing := minus(oldOnly, newSeries); len(missing) > 0 {
		t.Errorf("series of the old pods the restarted exporter lacks:\n  %s", strings.Join(missing, "\n  "))
	}
	equalsFresh(t, restarted, "restart")
}

// A burst of writes while the exporter is scraped every 100 ms: pods and
// their claims created, run, flipped between ready and not, deleted, by
// eight writers at once. Every scrape is consistent (each claim in exactly
// one state of dra_claim_status, every reservation of a claim that exists)
// and answered within Prometheus' default 10 s scrape timeout. The same
// check at the benchmark's 100k claims is `make bench-scale N=100000
// CHURN=...` (bench/README.md): too slow for make test.
func TestFaultWriteBurstScrapes(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-burst")
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc := startScraper(env.exp, 100*time.Millisecond)
	const writers, perWriter = 8, 6
	start := time.Now()
	// Each phase by eight writers at once: create the pods (the scheduler
	// allocates the free GPUs, the others wait), run the bound ones
	// (every other one Ready), force-delete every third.
	phase := func(what func(name string, i int) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					if err := what(fmt.Sprintf("burst-%d-%d", w, i), i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	phase(func(name string, _ int) error {
		_, err := env.cp.Client.CoreV1().Pods(ns).Create(ctx, cluster.PodWithTemplate(ns, name, "gpu"), metav1.CreateOptions{})
		return err
	})
	time.Sleep(time.Second)
	phase(func(name string, i int) error {
		if p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && p.Spec.NodeName != "" {
			return env.kubelet.SetRunning(ctx, ns, name, i%2 == 0)
		}
		return nil
	})
	phase(func(name string, i int) error {
		if i%3 == 2 {
			return cluster.ForceDelete(ctx, env.cp.Client, ns, name)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // the controllers' aftermath
	scrapes := sc.Stop()
	t.Logf("%d pods written by %d writers in %s; %d scrapes", writers*perWriter, writers, time.Since(start).Round(time.Millisecond), len(scrapes))
	var slowest time.Duration
	for _, s := range scrapes {
		if s.err != nil {
			t.Errorf("scrape at %s: %v", s.at.Format(time.RFC3339Nano), s.err)
			continue
		}
		slowest = max(slowest, s.took)
		if err := consistentClaims(s.m); err != nil {
			t.Errorf("scrape at +%s: %v", s.at.Sub(start).Round(time.Millisecond), err)
		}
	}
	t.Logf("slowest scrape %s", slowest.Round(time.Millisecond))
	if slowest > 10*time.Second {
		t.Errorf("slowest scrape %s, over Prometheus' default 10s timeout", slowest)
	}
}

// consistentClaims checks one scrape: every claim is in exactly one state,
// and the reservations and allocations name claims the scrape has.
func consistentClaims(m cluster.Metrics) error {
	states := map[string][]string{}
	for _, s := range m.Find("dra_claim_status", nil) {
		if s.Value == 1 {
			k := s.Labels["namespace"] + "/" + s.Labels["claim"]
			states[k] = append(states[k], s.Labels["state"])
		}
	}
	for _, s := range m.Find("dra_claim_info", nil) {
		k := s.Labels["namespace"] + "/" + s.Labels["claim"]
		if len(states[k]) != 1 {
			return fmt.Errorf("claim %s in states %v", k, states[k])
		}
	}
	for _, f := range []string{"dra_claim_reserved_for_info", "dra_claim_allocation_info"} {
		for _, s := range m.Find(f, nil) {
			k := s.Labels["namespace"] + "/" + s.Labels["claim"]
			if len(states[k]) != 1 {
				return fmt.Errorf("%s names claim %s, in states %v", f, k, states[k])
			}
		}
	}
	return nil
}

// reservedIn checks that a scrape has n reservations in the namespace.
func reservedIn(m cluster.Metrics, ns string, n int) error {
	if got := len(m.Find("dra_claim_reserved_for_info", map[string]string{"namespace": ns})); got != n {
		return fmt.Errorf("%d reservations in %s, want %d", got, ns, n)
	}
	return nil
}

// equalsFresh fails the test unless the exporter's state series equal a
// fresh exporter's within 30 s (objects settling).
func equalsFresh(t *testing.T, e *cluster.Exporter, name string) {
	t.Helper()
	diff, took := compareWithFresh(t, e, name, 30*time.Second)
	if diff != "" {
		t.Errorf("series differ from a fresh exporter's after %s:\n%s", took.Round(time.Millisecond), diff)
		return
	}
	t.Logf("series equal a fresh exporter's (%s after the last change settled)", took.Round(time.Millisecond))
}
