package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Source names, as dra_gpu_source_up{source} reads them.
const (
	SourceAuto     = "auto"
	SourceDCGM     = "dcgm"
	SourceNVML     = "nvml"
	SourceRecorded = "recorded"
	SourceNone     = "none"
)

// Options configure the DCGM and NVML sources.
type Options struct {
	// HostEngine is a standalone nv-hostengine's address; empty embeds
	// the host engine.
	HostEngine string
	// UpdateInterval is DCGM's watch frequency (default 5s): ratios such
	// as the profiling fields average over it.
	UpdateInterval time.Duration
	// Timeout bounds one read, library calls included (default 5s): a
	// hung GPU or library must not hang the scrape.
	Timeout time.Duration
	// Raw keeps every field as the library answered it (gpu-check).
	Raw    bool
	Logger *slog.Logger
	// Now is the clock of the reconnect backoff (tests).
	Now func() time.Time
	// known remembers the GPUs one source's sessions read (set by the
	// constructors).
	known *knownGPUs
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

func (o Options) updateInterval() time.Duration {
	if o.UpdateInterval <= 0 {
		return 5 * time.Second
	}
	return o.UpdateInterval
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 5 * time.Second
	}
	return o.Timeout
}

// session is one opened library: a DCGM connection or NVML.
type session interface {
	name() string
	read() (*Reading, error)
	close()
}

type candidate struct {
	name string
	open func() (session, error)
}

// NewDCGM returns the DCGM source on these libraries (nvml may be nil:
// then MIG instances have no UUID and no process is listed).
func NewDCGM(dcgm DCGMLib, nvml NVMLLib, opts Options) *Supervised {
	opts.known = &knownGPUs{}
	return newSupervised(SourceDCGM, opts, candidate{SourceDCGM, func() (session, error) { return openDCGMSession(dcgm, nvml, opts) }})
}

// NewNVML returns the NVML source: the basic fields from NVML alone.
func NewNVML(nvml NVMLLib, opts Options) *Supervised {
	opts.known = &knownGPUs{}
	return newSupervised(SourceNVML, opts, candidate{SourceNVML, func() (session, error) { return openNVMLSession(nvml, opts) }})
}

// NewAuto returns the source that serves DCGM where it starts (profiling
// needs it) and NVML where it does not; while NVML serves, DCGM is tried
// again from time to time.
func NewAuto(dcgm DCGMLib, nvml NVMLLib, opts Options) *Supervised {
	opts.known = &knownGPUs{}
	return newSupervised(SourceAuto, opts,
		candidate{SourceDCGM, func() (session, error) { return openDCGMSession(dcgm, nvml, opts) }},
		candidate{SourceNVML, func() (session, error) { return openNVMLSession(nvml, opts) }})
}

// Backoff of the reconnects: a source that cannot start, or lost its
// connection (a restarted nv-hostengine, a driver still installing at
// boot), is tried again after backoffMin, doubling up to backoffMax. A
// better candidate than the one serving (DCGM while NVML serves) is tried
// again after preferMin, doubling up to backoffMax.
const (
	backoffMin = 5 * time.Second
	backoffMax = 5 * time.Minute
	preferMin  = time.Minute
	// maxFailures consecutive failed reads close the session: its groups
	// or handles may be what is broken.
	maxFailures = 3
)

// Supervised is a Source over one or more candidate libraries: it opens
// the first candidate that starts, serves it, reopens it with backoff when
// its connection is lost, and bounds every read with a timeout so that a
// hung library call answers the scrape with an error instead of blocking
// it (the call itself goes on in its goroutine; until it returns, reads
// fail at once).
type Supervised struct {
	configured string
	cands      []candidate
	opts       Options

	// token is held by the one goroutine that may call the libraries.
	token chan struct{}

	mu sync.Mutex // guards the fields below
	// hungSince is when a call that has not returned started.
	hungSince time.Time
	serving   string
	// candErr is why each candidate last failed to open (nil: it opened,
	// or was not tried).
	candErr []error

	// Owned by the token holder.
	cur       session
	curIndex  int
	failures  int
	retryAt   time.Time
	delay     time.Duration
	preferAt  time.Time
	prefDelay time.Duration
	lastErr   error
}

func newSupervised(name string, opts Options, cands ...candidate) *Supervised {
	return &Supervised{configured: name, cands: cands, opts: opts, token: make(chan struct{}, 1), candErr: make([]error, len(cands))}
}

// Candidate states of dra_gpu_source_info.
const (
	StateServing     = "serving"
	StateUnavailable = "unavailable" // it failed to open: Reason says why
	StateStandby     = "standby"     // not needed: a preferred source serves
)

// Why a candidate source is unavailable: a closed set.
const (
	// The library is not there (libdcgm.so.4, libnvidia-ml.so.1) or this
	// build has no cgo.
	UnavailableLibraryMissing = "library_missing"
	// The standalone nv-hostengine does not answer
	// (CONNECTION_NOT_VALID).
	UnavailableHostEngine = "hostengine_unreachable"
	// The embedded host engine could not start on a node with a GPU in
	// MIG mode: DCGM then needs root and NVML's privileged GPU-instance
	// calls (DcgmCacheManager.cpp:912-917; "CacheManager Init Failed",
	// dcgm-exporter#34).
	UnavailableEmbeddedMIG = "embedded_mig_unprivileged"
	// Anything else (logged).
	UnavailableFailed = "failed"
)

// UnavailableReasons lists the reasons of an unavailable candidate.
var UnavailableReasons = []string{UnavailableLibraryMissing, UnavailableHostEngine, UnavailableEmbeddedMIG, UnavailableFailed}

// CandidateStatus is one library the source may serve from.
type CandidateStatus struct {
	Source string
	State  string
	Reason string
}

// errEmbeddedMIG marks an embedded host engine that failed to start while
// a GPU has MIG mode on.
var errEmbeddedMIG = errors.New("the embedded DCGM host engine cannot start without privileges while a GPU has MIG mode on (DCGM needs root and NVML's privileged GPU-instance calls); use the GPU Operator's nv-hostengine (--dcgm.hostengine-address) or NVML")

// unavailableReason classifies why a candidate failed to open.
func unavailableReason(err error) string {
	switch {
	case errors.Is(err, errEmbeddedMIG):
		return UnavailableEmbeddedMIG
	case errors.Is(err, ErrUnavailable), errors.Is(err, NVMLLibraryNotFound), strings.HasSuffix(err.Error(), "libdcgm.so.4 not found"):
		// go-dcgm's dlopen failure is plain text (admin.go:66-69).
		return UnavailableLibraryMissing
	case dcgmStatus(err) == StConnectionNotValid:
		return UnavailableHostEngine
	}
	return UnavailableFailed
}

// Candidates says, for each library the source may serve from, whether it
// serves, could not open (and why) or is not needed.
func (s *Supervised) Candidates() []CandidateStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CandidateStatus, len(s.cands))
	for i, c := range s.cands {
		out[i] = CandidateStatus{Source: c.name, State: StateStandby}
		switch {
		case s.serving == c.name:
			out[i].State = StateServing
		case s.candErr[i] != nil:
			out[i].State, out[i].Reason = StateUnavailable, unavailableReason(s.candErr[i])
		}
	}
	return out
}

func (s *Supervised) setCandErr(i int, err error) {
	s.mu.Lock()
	s.candErr[i] = err
	s.mu.Unlock()
}

// Name is the source serving now, or the configured one while none does.
func (s *Supervised) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving != "" {
		return s.serving
	}
	return s.configured
}

// ErrHung says a library call has not returned.
var ErrHung = errors.New("a GPU library call has not returned (hung GPU or library)")

// Read implements Source.
func (s *Supervised) Read(ctx context.Context) (*Reading, error) {
	s.mu.Lock()
	hung := s.hungSince
	s.mu.Unlock()
	if !hung.IsZero() {
		return nil, fmt.Errorf("%s: %w for %s", s.Name(), ErrHung, time.Since(hung).Round(time.Second))
	}
	wait, cancel := context.WithTimeout(ctx, s.opts.timeout())
	defer cancel()
	select {
	case s.token <- struct{}{}:
	case <-wait.Done():
		return nil, fmt.Errorf("%s: another read is still running: %w", s.Name(), wait.Err())
	}
	type result struct {
		r   *Reading
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	// finished is set, under mu, when the call returns: a timeout that
	// races with the return must not mark the source hung for good.
	finished := false
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{nil, fmt.Errorf("GPU source panicked: %v", p)}
			}
			s.mu.Lock()
			finished = true
			s.hungSince = time.Time{}
			s.mu.Unlock()
			<-s.token
		}()
		r, err := s.readHeld()
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-wait.Done():
		s.mu.Lock()
		if !finished {
			s.hungSince = start
		}
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w after %s", s.Name(), ErrHung, s.opts.timeout())
	}
}

// readHeld runs with the token: it may open, read and close sessions.
func (s *Supervised) readHeld() (*Reading, error) {
	now := s.opts.now()
	if s.cur != nil && s.curIndex > 0 && !now.Before(s.preferAt) {
		s.tryBetter(now)
	}
	if s.cur == nil {
		if now.Before(s.retryAt) {
			return nil, fmt.Errorf("%w (next try in %s)", s.lastErr, s.retryAt.Sub(now).Round(time.Second))
		}
		if err := s.open(now, len(s.cands)); err != nil {
			return nil, err
		}
	}
	r, err := s.cur.read()
	if err == nil {
		s.failures = 0
		return r, nil
	}
	s.failures++
	if errors.Is(err, errConnectionLost) || s.failures >= maxFailures {
		s.opts.logger().Warn("GPU source lost; reconnecting", "source", s.cur.name(), "err", err)
		s.setCandErr(s.curIndex, err)
		s.closeCurrent()
		s.lastErr = err
		s.retryAt = now // the next read connects again, then backs off
	}
	return nil, err
}

// open opens the first of the first n candidates that starts.
func (s *Supervised) open(now time.Time, n int) error {
	var errs []error
	for i, c := range s.cands[:n] {
		sess, err := c.open()
		s.setCandErr(i, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			continue
		}
		s.closeCurrent()
		s.cur, s.curIndex, s.failures, s.delay = sess, i, 0, 0
		s.setServing(c.name)
		if i > 0 {
			s.prefDelay = preferMin
			s.preferAt = now.Add(s.prefDelay)
		}
		if len(errs) > 0 {
			s.opts.logger().Info("GPU source started", "source", c.name, "unavailable", errors.Join(errs...).Error())
		} else {
			s.opts.logger().Info("GPU source started", "source", c.name)
		}
		return nil
	}
	s.delay = min(max(2*s.delay, backoffMin), backoffMax)
	s.retryAt = now.Add(s.delay)
	s.lastErr = errors.Join(errs...)
	return s.lastErr
}

// tryBetter tries the candidates before the serving one.
func (s *Supervised) tryBetter(now time.Time) {
	for i, c := range s.cands[:s.curIndex] {
		sess, err := c.open()
		s.setCandErr(i, err)
		if err != nil {
			continue
		}
		s.closeCurrent()
		s.cur, s.curIndex, s.failures = sess, i, 0
		s.setServing(c.name)
		s.opts.logger().Info("GPU source switched", "source", c.name)
		return
	}
	s.prefDelay = min(2*s.prefDelay, backoffMax)
	s.preferAt = now.Add(s.prefDelay)
}

func (s *Supervised) closeCurrent() {
	if s.cur != nil {
		s.cur.close()
		s.cur = nil
	}
	s.setServing("")
}

func (s *Supervised) setServing(name string) {
	s.mu.Lock()
	s.serving = name
	s.mu.Unlock()
}

// Close implements Source; it waits for a running read up to the timeout.
func (s *Supervised) Close() error {
	select {
	case s.token <- struct{}{}:
	case <-time.After(s.opts.timeout()):
		return ErrHung
	}
	defer func() { <-s.token }()
	s.closeCurrent()
	return nil
}
