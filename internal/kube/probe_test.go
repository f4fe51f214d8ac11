package kube

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rec := &upRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Probe(ctx, client.Discovery().RESTClient(), rec, 20*time.Millisecond, slog.New(slog.DiscardHandler))

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
