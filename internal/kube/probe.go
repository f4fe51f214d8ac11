package kube

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"
)

// ProbeRecorder receives the API server's reachability.
type ProbeRecorder interface {
	APIServerUp(up bool)
}

// Probe asks the API server's /readyz every interval until ctx ends. The
// informers cannot say that the API server is gone: client-go retries a
// refused watch in silence, and the exporter keeps serving its last state.
// /readyz is readable by every identity (system:public-info-viewer).
func Probe(ctx context.Context, client rest.Interface, rec ProbeRecorder, interval time.Duration, logger *slog.Logger) {
	up := true
	check := func() {
		pctx, cancel := context.WithTimeout(ctx, min(interval, 10*time.Second))
		defer cancel()
		err := client.Get().AbsPath("/readyz").Do(pctx).Error()
		if ctx.Err() != nil {
			return
		}
		rec.APIServerUp(err == nil)
		switch {
		case err != nil && up:
			logger.Warn("API server unreachable; serving the last known state", "err", err)
		case err == nil && !up:
			logger.Info("API server reachable again")
		}
		up = err == nil
	}
	check()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			check()
		}
	}
}
