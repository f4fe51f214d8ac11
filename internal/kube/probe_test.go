package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type upRecorder struct {
	mu  sync.Mutex
	ups []bool
}

func (r *upRecorder) APIServerUp(up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ups = append(r.ups, up)
}

func (r *upRecorder) last() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ups) == 0 {
		return false, 0
	}
	return r.ups[len(r.ups)-1], len(r.ups)
}

// startProbe runs Probe against the server every 20 ms until the test
// ends, logging to logs.
func startProbe(t *testing.T, srv *httptest.Server, logs io.Writer, gate *Gate) *upRecorder {
	t.Helper()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rec := &upRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go Probe(ctx, client.Discovery().RESTClient(), rec, 20*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)), gate)
	return rec
}

// The probe follows /readyz: 200 is up, an error status or no answer is down.
func TestProbe(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.Method != http.MethodGet {
			t.Errorf("probe asked %s %s", r.Method, r.URL.Path)
		}
		if !healthy.Load() {
			http.Error(w, "etcd failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	rec := startProbe(t, srv, io.Discard, nil)

	waitFor := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if up, n := rec.last(); n > 0 && up == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("probe never reported up=%v", want)
	}
	waitFor(true)
	healthy.Store(false)
	waitFor(false)
	healthy.Store(true)
	waitFor(true)
	srv.Close() // no answer at all
	waitFor(false)
}

// A token the API server rejects is logged as such, not as an unreachable
// API server, and the gate stays open (the API server answers); no answer
// at all closes it, and the probe then asks every ProbeRetry.
func TestProbeRejectedTokenAndGate(t *testing.T) {
	var mode atomic.Int32 // 0 ok, 1 rejected
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mode.Load() == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	logs := &syncBuffer{}
	gate := NewGate()
	mode.Store(1)
	rec := startProbe(t, srv, logs, gate)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "refuses the exporter's credentials") {
		if time.Now().After(deadline) {
			t.Fatalf("no rejection logged:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(logs.String(), "unreachable") {
		t.Errorf("a rejected token logged as unreachable:\n%s", logs)
	}
	if !gate.IsOpen() {
		t.Error("a 401 closed the gate: it is not about reaching the API server")
	}
	if up, _ := rec.last(); up {
		t.Error("apiserver_up is 1 on a 401")
	}
	srv.Close()
	for gate.IsOpen() {
		if time.Now().After(deadline) {
			t.Fatalf("gate still open with no API server:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "API server unreachable") {
		t.Errorf("no answer not logged as unreachable:\n%s", logs)
	}
}

func TestClassifyProbe(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want probeOutcome
	}{
		{nil, probeReady},
		{apierrors.NewUnauthorized("x"), probeRejected},
		{apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("rbac")), probeRejected},
		{apierrors.NewInternalError(errors.New("etcd failed")), probeNotReady},
		{refused(), probeUnreachable},
	} {
		if got := classifyProbe(tc.err); got != tc.want {
			t.Errorf("classifyProbe(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
