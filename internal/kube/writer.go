package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"
)

// writer applies every informer's changes to the sink, one at a time, and
// keeps each resource's objects as the sink last accepted them (the
// informer caches), so that a write that panics can be undone: the change
// is rejected (counted, logged), the cache put back as it was, and the
// sink rebuilt from the caches.
type writer struct {
	mu     sync.Mutex
	sink   Sink
	rec    Recorder
	logger *slog.Logger
	// resources in the order a rebuild adds them.
	resources []*resource
	// rebuilding is set from a panic until the sink is rebuilt.
	rebuilding atomic.Bool
}

// resource is one watched kind: its informer cache and watch state.
type resource struct {
	name  string
	store cache.Store
	watch *resourceWatch
}

// change is one write of a resource's object.
type change struct {
	typ string // add, update, delete: dra_exporter_events_total's type
	obj any
	// old is the cached object before the change (nil for an add).
	old any
	// write applies the change to the sink.
	write func() error
}

// apply caches and writes changes, in order, under the writer's lock. A
// write that panics (on data the index did not expect) leaves the sink's
// maps half-updated: the change is undone in the cache and the sink is
// rebuilt from the caches before anything else is written.
func (w *writer) apply(r *resource, changes []change) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range changes {
		w.rec.Event(r.name, c.typ)
		cacheChange(r.store, c.typ, c.obj)
		if err, panicked := call(c.write); panicked {
			w.rebuilding.Store(true)
			w.rec.Rejected(r.name)
			w.logger.Error("index update panicked; the change is rejected and the index rebuilt from the informers' caches",
				"resource", r.name, "type", c.typ, "object", objectKey(c.obj), "panic", err.Error())
			undo(r.store, c)
			w.rebuild()
		} else if err != nil {
			w.rec.Rejected(r.name)
			w.logger.Warn("object rejected", "resource", r.name, "type", c.typ, "object", objectKey(c.obj), "err", err)
		}
	}
}

// cacheChange records a change in the informer cache.
func cacheChange(store cache.Store, typ string, obj any) {
	if typ == "delete" {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		_ = store.Delete(obj)
		return
	}
	_ = store.Update(obj)
}

// undo puts the cache back as it was before a change.
func undo(store cache.Store, c change) {
	switch {
	case c.old != nil:
		_ = store.Update(c.old)
	case c.typ != "delete":
		_ = store.Delete(c.obj)
	}
}

// rebuild replaces the sink's contents with the caches', under w.mu. An
// object that panics again is dropped from its cache (rejected) and the
// rebuild starts over: it ends after at most as many rounds as there are
// objects.
func (w *writer) rebuild() {
	defer w.rebuilding.Store(false)
	for {
		var bad *resource
		var badObj any
		err := w.sink.Rebuild(func(add func(obj any) error) error {
			for _, r := range w.resources {
				for _, obj := range r.store.List() {
					err, panicked := call(func() error { return add(obj) })
					if panicked {
						bad, badObj = r, obj
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			w.rec.IndexRebuilt()
			w.logger.Info("index rebuilt from the informers' caches")
			return
		}
		if bad == nil {
			w.logger.Error("index rebuild failed; the index serves the last snapshot before the panic", "err", err)
			return
		}
		w.rec.Rejected(bad.name)
		w.logger.Error("object panicked again while the index was rebuilt; dropped until it changes", "resource", bad.name, "object", objectKey(badObj), "panic", err.Error())
		_ = bad.store.Delete(badObj)
	}
}

// call runs fn, turning a panic into an error (with its stack) and
// reporting that it panicked.
func call(fn func() error) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err, panicked = fmt.Errorf("%v\n%s", r, debug.Stack()), true
		}
	}()
	return fn(), false
}

func objectKey(obj any) string {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Key
	}
	k, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return k
}

var errNotDeltas = errors.New("informer queue item is not Deltas")
