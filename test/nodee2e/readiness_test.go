package nodee2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiwatch "k8s.io/apimachinery/pkg/watch"
)

// readiness is the API server's own record of when each pod of a namespace
// was stored not Ready, taken from a watch (every stored state, in order):
// what a verdict read from the API may be held against. The times are when
// the watch delivered each state, so they lag the write by the watch's
// latency, not the exporter's.
type readiness struct {
	mu     sync.Mutex
	spans  map[string][]span // pod -> intervals stored not Ready
	states []string          // every Ready condition stored, for the test's log
	stop   context.CancelFunc
	done   chan struct{}
	err    error
}

type span struct{ from, to time.Time } // to is zero while it lasts

// recordReadiness watches the namespace's pods from now on; pods that are
// not Ready at the start begin with an open span.
func recordReadiness(t *testing.T, ns string) *readiness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	list, err := env.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := env.cp.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &readiness{spans: map[string][]span{}, stop: cancel, done: make(chan struct{})}
	now := time.Now()
	for i := range list.Items {
		r.observe(&list.Items[i], now)
	}
	go func() {
		defer close(r.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			switch ev.Type {
			case apiwatch.Added, apiwatch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					r.observe(p, time.Now())
				}
			case apiwatch.Error:
				if ctx.Err() != nil {
					return // Stop ended the watch
				}
				r.mu.Lock()
				r.err = fmt.Errorf("pod watch: %v", ev.Object)
				r.mu.Unlock()
				return
			}
		}
	}()
	return r
}

func (r *readiness) observe(p *corev1.Pod, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	isReady := ready(p)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			r.states = append(r.states, fmt.Sprintf("%s %s Ready=%s since %s (%s) rv %s",
				at.Format("15:04:05.000"), p.Name, c.Status, c.LastTransitionTime.Format("15:04:05"), c.Reason, p.ResourceVersion))
		}
	}
	spans := r.spans[p.Name]
	open := len(spans) > 0 && spans[len(spans)-1].to.IsZero()
	switch {
	case !isReady && !open:
		r.spans[p.Name] = append(spans, span{from: at})
	case isReady && open:
		spans[len(spans)-1].to = at
	}
}

// notReadyWithin reports whether the API stored the pod not Ready at any
// moment of [from, to].
func (r *readiness) notReadyWithin(pod string, from, to time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans[pod] {
		if s.from.After(to) {
			continue
		}
		if s.to.IsZero() || !s.to.Before(from) {
			return true
		}
	}
	return false
}

// Stop ends the watch and returns the record's states and spans for the
// test's log, failing the test if the watch broke (a gap in the record).
func (r *readiness) Stop(t *testing.T) (states []string, spans map[string][]span) {
	t.Helper()
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	r.stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		t.Errorf("the API's readiness record has a gap: %v", err)
	}
	return r.states, r.spans
}

func (s span) String() string {
	to := "still"
	if !s.to.IsZero() {
		to = s.to.Format("15:04:05.000")
	}
	return s.from.Format("15:04:05.000") + " - " + to
}

func (s span) length(end time.Time) time.Duration {
	if s.to.IsZero() {
		return end.Sub(s.from)
	}
	return s.to.Sub(s.from)
}

// logLines returns the lines of a log file that contain every want.
func logLines(text string, want ...string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		ok := true
		for _, w := range want {
			if !strings.Contains(line, w) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// alertFor returns the `for:` of an alert of the rule bundle, as a user's
// Prometheus evaluates it (this suite's Prometheus runs every `for:` at 0s).
func alertFor(t *testing.T, alert string) time.Duration {
	t.Helper()
	files, err := filepath.Glob(repoPath("rules/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		groups, errs := rulefmt.Parse(raw, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", f, errs)
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert == alert {
					return time.Duration(r.For)
				}
			}
		}
	}
	t.Fatalf("no alert %s in rules/", alert)
	return 0
}
