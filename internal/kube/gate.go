package kube

import (
	"context"
	"sync"
	"time"
)

// Gate holds the informers' list and watch calls while the API server does
// not answer, and lets them go the moment the probe hears it again.
//
// Without it, client-go's reflector meets each refused call with its own
// backoff (0.8 s doubling to 30 s, with up to as much again of jitter), in
// silence: after a 30 s outage the informers resumed 20-65 s after the API
// server was ready again, each at its own time, while the exporter served
// its last state as current. Calls that meet an unreachable API server
// instead close the gate and wait there (so the reflector's backoff does
// not grow), the probe polls every ProbeRetry while it is closed, and every
// informer retries as soon as the API server answers.
type Gate struct {
	mu     sync.Mutex
	opened chan struct{} // closed while the gate is open
	kick   chan struct{}
}

// ProbeRetry is how often the probe asks the API server while the gate is
// closed.
const ProbeRetry = time.Second

// maxGateWait bounds a wait at the gate, in case nothing opens it (no
// probe, or an API server whose /readyz never says 200): the call is then
// retried anyway, as the reflector would. It is long: a call let go while
// the API server is still starting meets 403 (its RBAC caches are not
// filled yet) and client-go's backoff.
const maxGateWait = 2 * time.Minute

// NewGate returns an open gate.
func NewGate() *Gate {
	g := &Gate{opened: make(chan struct{}), kick: make(chan struct{}, 1)}
	close(g.opened)
	return g
}

// Close holds the next calls: the API server did not answer one. It asks
// the probe to check now.
func (g *Gate) Close() {
	g.mu.Lock()
	select {
	case <-g.opened:
		g.opened = make(chan struct{})
	default:
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Open lets the held calls go: the API server answered.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
	default:
		close(g.opened)
	}
}

// IsOpen reports whether calls go through.
func (g *Gate) IsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
		return true
	default:
		return false
	}
}

// Wait returns when the gate is open, maxGateWait has passed, or ctx or
// done ends (then with an error).
func (g *Gate) Wait(ctx context.Context, done <-chan struct{}) error {
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	t := time.NewTimer(maxGateWait)
	defer t.Stop()
	select {
	case <-opened:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return context.Canceled
	}
}

// kicked delivers a value when a call closed the gate.
func (g *Gate) kicked() <-chan struct{} { return g.kick }
