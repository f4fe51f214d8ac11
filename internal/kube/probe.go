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
// dra_exporter_apiserver_up is 1 only on a 200. The gate opens on any
// answer (the informers' own calls then meet what the API server says, and
// client-go backs off on errors that are not about reaching it) and closes
// only when there is none.
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
			if outcome == probeUnreachable {
				gate.Close()
			} else {
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
				logger.Error("API server rejects the exporter's credentials (check the token and its RBAC); serving the last known state", "err", err)
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
		if last == probeUnreachable {
			next = min(interval, ProbeRetry)
		}
		t.Reset(next)
	}
}
