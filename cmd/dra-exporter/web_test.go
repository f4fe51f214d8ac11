package main

import (
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
)

// The probe listener answers /healthz and /readyz (with why it is not
// ready) in plain HTTP without credentials, and nothing else: not the
// metrics, which stay behind the web config.
func TestProbeListenerServesOnlyTheProbes(t *testing.T) {
	const notSynced = "informer pods has not synced"
	var why atomic.Pointer[string]
	why.Store(new(notSynced))
	addr, stop, err := serveProbes("127.0.0.1:0", func() string { return *why.Load() }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != notSynced+"\n" {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	why.Store(new(""))
	for _, path := range []string{"/readyz", "/healthz"} {
		if code, body := get(path); code != http.StatusOK || body != "ok\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	for _, path := range []string{"/metrics", "/"} {
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("%s on the probe listener: %d, want 404", path, code)
		}
	}
	if _, _, err := serveProbes(addr.String(), func() string { return "" }, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a second listener on a port in use did not fail")
	}
}
