package kube

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Watch error reasons, the values of dra_exporter_watch_errors_total's
// reason label.
const (
	ReasonUnreachable  = "unreachable"  // no answer: refused, reset, timed out
	ReasonExpired      = "expired"      // 410 Gone: the resourceVersion was compacted; a relist follows
	ReasonUnauthorized = "unauthorized" // 401: the token is rejected
	ReasonForbidden    = "forbidden"    // 403: RBAC
	ReasonNotFound     = "not_found"    // 404: the resource is not served
	ReasonThrottled    = "throttled"    // 429
	ReasonServerError  = "server_error" // 5xx
	ReasonOther        = "other"
)

// WatchErrorReasons lists the reasons, for documentation and tests.
var WatchErrorReasons = []string{ReasonUnreachable, ReasonExpired, ReasonUnauthorized, ReasonForbidden,
	ReasonNotFound, ReasonThrottled, ReasonServerError, ReasonOther}

// errorReason classifies an error a list or watch met.
func errorReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch code := status.Status().Code; {
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			return ReasonExpired
		case code == 401:
			return ReasonUnauthorized
		case code == 403:
			return ReasonForbidden
		case code == 404:
			return ReasonNotFound
		case code == 429:
			return ReasonThrottled
		case code >= 500:
			return ReasonServerError
		}
		return ReasonOther
	}
	if unreachable(err) {
		return ReasonUnreachable
	}
	return ReasonOther
}

// unreachable reports an error of reaching the API server rather than of
// what it answered.
func unreachable(err error) bool {
	var netErr net.Error
	var urlErr *url.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		errors.As(err, &netErr) || errors.As(err, &urlErr)
}

// WatchState is how current the exporter's copy of one resource is.
type WatchState struct {
	// Healthy: a watch is open and every list it started from has been
	// applied to the index.
	Healthy bool
	// Since is when Healthy last changed (the start, before the first
	// sync).
	Since time.Time
}

// resourceWatch tracks one resource's list and watch calls, counts and
// logs what they meet, and says whether the index holds the resource as
// the API server has it now.
type resourceWatch struct {
	name   string
	rec    Recorder
	logger *slog.Logger
	gate   *Gate
	now    func() time.Time

	mu sync.Mutex
	// open: a watch stream is delivering events, and has not broken
	// since.
	open bool
	// listPending: a list was started whose objects the index has not
	// all received yet.
	listPending bool
	// lists counts the lists applied (the first is the initial list).
	lists   int
	healthy bool
	since   time.Time
	// failed: the last break was an error (logged), not the API server
	// closing a watch on its timeout.
	failed bool
}

func newResourceWatch(name string, rec Recorder, logger *slog.Logger, gate *Gate, now func() time.Time) *resourceWatch {
	return &resourceWatch{name: name, rec: rec, logger: logger, gate: gate, now: now, since: now(), listPending: true}
}

// State returns the resource's watch state.
func (r *resourceWatch) State() WatchState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return WatchState{Healthy: r.healthy, Since: r.since}
}

// update recomputes health after a change, under r.mu.
func (r *resourceWatch) update() {
	healthy := r.open && !r.listPending
	if healthy == r.healthy {
		return
	}
	now := r.now()
	if healthy && r.failed {
		r.logger.Info("watching again; the resource is current", "resource", r.name, "stale_for", now.Sub(r.since).Round(time.Millisecond))
		r.failed = false
	}
	r.healthy, r.since = healthy, now
}

// listStarted: a list (or a watch that sends the initial objects) begins.
func (r *resourceWatch) listStarted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listPending = true
	r.update()
}

// listApplied: the index received every object of a list.
func (r *resourceWatch) listApplied() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	if r.lists > 1 {
		r.rec.Relisted(r.name)
		r.logger.Info("relisted", "resource", r.name)
	}
	r.listPending = false
	r.update()
}

// streamOpen: a watch delivers events from where the index stands.
func (r *resourceWatch) streamOpen() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = true
	r.update()
}

// streamClosed: the watch ended without an error (the API server closes
// watches after a few minutes; the reflector opens another at once).
func (r *resourceWatch) streamClosed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = false
	r.update()
}

// failedWith counts and logs an error a list or watch met; the resource is
// stale until a watch is open again.
func (r *resourceWatch) failedWith(op string, err error) string {
	reason := errorReason(err)
	r.rec.WatchError(r.name, reason)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open = false
	r.update()
	r.failed = true
	msg := op + " failed; the resource is stale until its watch resumes"
	if reason == ReasonExpired {
		msg = op + " resourceVersion expired (410 Gone); relisting"
	}
	r.logger.Warn(msg, "resource", r.name, "reason", reason, "err", err)
	return reason
}

// gatedLW wraps a resource's lists and watches: it counts and logs what
// they meet, tracks the resource's watch state, and holds calls that find
// the API server unreachable at the gate instead of handing the error to
// the reflector's backoff.
type gatedLW struct {
	inner cache.ListerWatcherWithContext
	// unsupported: the client cannot do watch lists (fakes).
	unsupported bool
	rw          *resourceWatch
	done        <-chan struct{}
}

func newGatedLW(inner cache.ListerWatcher, rw *resourceWatch, done <-chan struct{}) *gatedLW {
	return &gatedLW{
		inner:       cache.ToListerWatcherWithContext(inner),
		unsupported: watchlist.DoesClientNotSupportWatchListSemantics(inner),
		rw:          rw,
		done:        done,
	}
}

// IsWatchListSemanticsUnSupported tells the reflector whether it may ask
// for a watch list, as the wrapped ListerWatcher does.
func (lw *gatedLW) IsWatchListSemanticsUnSupported() bool { return lw.unsupported }

// retry waits at the gate after an unreachable API server and reports
// whether to try again.
func (lw *gatedLW) retry(ctx context.Context, reason string) bool {
	if reason != ReasonUnreachable || lw.rw.gate == nil {
		return false
	}
	lw.rw.gate.Close()
	return lw.rw.gate.Wait(ctx, lw.done) == nil
}

// ListWithContext implements cache.ListerWatcherWithContext.
func (lw *gatedLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	lw.rw.listStarted()
	for {
		list, err := lw.inner.ListWithContext(ctx, opts)
		if err == nil {
			return list, nil
		}
		if !lw.retry(ctx, lw.rw.failedWith("list", err)) {
			return nil, err
		}
	}
}

// WatchWithContext implements cache.ListerWatcherWithContext.
func (lw *gatedLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if initial {
		lw.rw.listStarted()
	}
	for {
		w, err := lw.inner.WatchWithContext(ctx, opts)
		if err == nil {
			return observe(w, lw.rw, initial, lw.done), nil
		}
		if !lw.retry(ctx, lw.rw.failedWith("watch", err)) {
			return nil, err
		}
	}
}

// List implements cache.Lister.
func (lw *gatedLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch implements cache.Watcher.
func (lw *gatedLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// resumeGrace is how long a watch resumed from a resourceVersion must
// stay open, without an event, before the resource counts as current: an
// API server that no longer has the events since then (410 Gone) opens
// the watch and sends the error as its first event.
const resumeGrace = 500 * time.Millisecond

// observedWatch passes a watch's events on, noting the end of a watch
// list's initial objects, error events (410 Gone) and the end of the
// stream.
type observedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

// observe wraps a watch. A watch list (initial) opens the stream when its
// initial objects are all in; a resumed watch at its first event that is
// not an error, or after resumeGrace without one.
func observe(w watch.Interface, rw *resourceWatch, initial bool, done <-chan struct{}) watch.Interface {
	ow := &observedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go ow.run(rw, initial, done)
	return ow
}

func (w *observedWatch) run(rw *resourceWatch, initial bool, done <-chan struct{}) {
	defer close(w.out)
	in := w.inner.ResultChan()
	var grace <-chan time.Time
	if !initial {
		t := time.NewTimer(resumeGrace)
		defer t.Stop()
		grace = t.C
	}
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-in:
		case <-grace:
			grace = nil
			rw.streamOpen()
			continue
		case <-w.stop:
			rw.streamClosed()
			return
		}
		if !ok {
			rw.streamClosed()
			return
		}
		switch ev.Type {
		case watch.Error:
			grace = nil
			select {
			case <-done:
				// Shutting down: the stream's "context canceled".
			default:
				rw.failedWith("watch", apierrors.FromObject(ev.Object))
			}
		case watch.Bookmark:
			if initial {
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					// The reflector applies the list it received now.
					rw.streamOpen()
				}
			}
		default:
			if grace != nil {
				grace = nil
				rw.streamOpen()
			}
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			rw.streamClosed()
			return
		}
	}
}

func (w *observedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}

func (w *observedWatch) ResultChan() <-chan watch.Event { return w.out }
