package kube

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// ProbeRecorder receives the API server's reachability.
type ProbeRecorder interface {
	APIServerUp(up bool)
}

// probeOutcome is what one /readyz call found.
type probeOutcome int

const (
	probeReady       probeOutcome = iota // 200
	probeNotReady                        // any other answer but 401 and 403
	probeRejected                        // 401 or 403: the credentials
	probeUnreachable                     // no answer
)

// classifyProbe says what a /readyz call's error means.
func classifyProbe(err error) probeOutcome {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return probeReady
	case errors.As(err, &status):
		switch status.Status().Code {
		case http.StatusUnauthorized, http.StatusForbidden:
			return probeRejected
		}
		return probeNotReady
	}
	return probeUnreachable
}

// Probe asks the API server's /readyz every interval until ctx ends (every
// ProbeRetry while it does not answer, and at once when an informer's call
// closes the gate). The informers alone cannot say that the API server is
// gone: the exporter keeps serving its last state. /readyz is readable by
// every identity (system:public-info-viewer), but not with a token the API
// server rejects: a 401 or 403 is logged as such, not as unreachable.
//
// dra_exporter_apiserver_up is 1 only on a 200. The gate closes when there
// is no answer and opens on a 200 only: an API server that restarts
// answers /readyz with 403, then 500, until its RBAC caches are filled and
// its post-start hooks done, and meanwhile refuses requests it will allow
// (informers let go then would meet 403 and client-go's backoff). A gate
// nothing opens lets calls go after maxGateWait anyway.
func Probe(ctx context.Context, client rest.Interface, rec ProbeRecorder, interval time.Duration, logger *slog.Logger, gate *Gate) {
	last := probeReady
	check := func() {
		pctx, cancel := context.WithTimeout(ctx, min(interval, 10*time.Second))
		defer cancel()
		err := client.Get().AbsPath("/readyz").Do(pctx).Error()
		if ctx.Err() != nil {
			return
		}
		outcome := classifyProbe(err)
		rec.APIServerUp(outcome == probeReady)
		if gate != nil {
			switch outcome {
			case probeUnreachable:
				gate.Close()
			case probeReady:
				gate.Open()
			}
		}
		if outcome != last {
			switch outcome {
			case probeReady:
				logger.Info("API server ready again")
			case probeNotReady:
				logger.Warn("API server answers but is not ready; serving the last known state", "err", err)
			case probeRejected:
				logger.Warn("API server refuses the exporter's credentials (a wrong or expired token, RBAC, or an API server still starting); serving the last known state", "err", err)
			case probeUnreachable:
				logger.Warn("API server unreachable; serving the last known state", "err", err)
			}
		}
		last = outcome
	}
	check()
	var kick <-chan struct{}
	if gate != nil {
		kick = gate.kicked()
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		check()
		next := interval
		if last == probeUnreachable || (gate != nil && !gate.IsOpen()) {
			next = min(interval, ProbeRetry)
		}
		t.Reset(next)
	}
}
