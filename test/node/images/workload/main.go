// Command workload is the real node's workload image: it prints what the
// container was given (every GPU_DEVICE_* variable the DRA driver's CDI spec
// injected, one per line, then "devices: N"), serves /ready on :8080 (200,
// or 503 when $NOT_READY is set: a readiness failure after the devices were
// prepared) and runs until it is told to stop.
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	var devices []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GPU_DEVICE_") {
			devices = append(devices, kv)
		}
	}
	sort.Strings(devices)
	for _, d := range devices {
		fmt.Println(d)
	}
	fmt.Printf("devices: %d\n", len(devices))

	ready := os.Getenv("NOT_READY") == ""
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !ready {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	_ = srv.Close()
}
