// Package kube feeds the index from the API server: one informer per
// resource, objects trimmed on arrival, protobuf on the wire. It only ever
// lists and watches.
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// Sink receives objects (the index).
type Sink interface {
	// Upsert adds or replaces an object; live is false for an informer's
	// initial list.
	Upsert(obj any, live bool) error
	// UpsertLate and DeleteLate are the changes a relist found after a
	// watch was down: they happened at some unknown time before now.
	UpsertLate(obj any) error
	Delete(obj any) error
	DeleteLate(obj any) error
	// Rebuild replaces the contents, all at once, with the objects fill
	// hands to add (after a write panicked half-way).
	Rebuild(fill func(add func(obj any) error) error) error
}

// Recorder receives the informers' health (the self-metrics).
type Recorder interface {
	Event(resource, typ string)
	// WatchError counts an error a list or watch met, by reason (the
	// Reason constants).
	WatchError(resource, reason string)
	// Relisted counts a list after the initial one (after a watch could
	// not resume: 410 Gone, or the API server came back without the
	// events).
	Relisted(resource string)
	Rejected(resource string)
	// IndexRebuilt counts a rebuild of the index after a write panicked.
	IndexRebuilt()
	TrackSynced(resource string, synced func() bool)
	// TrackWatch registers the resource's watch state: whether the index
	// holds the resource as the API server has it now, and since when
	// that holds (see WatchState).
	TrackWatch(resource string, state func() (healthy bool, since time.Time))
	// Served records whether the API server serves a resource, as
	// discovery said at startup.
	Served(resource string, served bool)
}

// RESTConfig loads the kubeconfig at path, else $KUBECONFIG, else the
// in-cluster config, else ~/.kube/config, and asks for protobuf. context,
// when set, picks a context of the kubeconfig instead of its current one
// (and rules out the in-cluster config).
func RESTConfig(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	var cfg *rest.Config
	var err error
	if path == "" && context == "" && os.Getenv("KUBECONFIG") == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		}
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "dra-exporter"
	return cfg, nil
}

// Options configure the informers.
type Options struct {
	Trimmer objects.Trimmer
	Logger  *slog.Logger
	// Gate, when set, holds calls while the API server does not answer
	// (see Gate); the probe opens it.
	Gate *Gate
	// Now is the clock of the watch states; nil means time.Now.
	Now func() time.Time
}

// Informers are the running informers.
type Informers struct {
	synced    map[string]cache.InformerSynced
	resources []*resource
	w         *writer
}

// source is one resource the exporter lists and watches.
type source struct {
	name string
	obj  runtime.Object
	lw   cache.ListerWatcher
}

// Start creates the informers, starts them, and returns without waiting for
// their initial lists.
//
// Each informer is client-go's list/watch controller (cache.New: a
// reflector and a RealFIFO that delivers a relist as one item) with a
// process function of ours, rather than a shared informer: the shared
// informer hands events to handlers on a goroutine of its own, so nothing
// could tell when a relist had reached the index, and it drops the relist
// of an object that did not change. Here a relist is applied whole, under
// the writer's lock, before the resource counts as current again.
func Start(ctx context.Context, client kubernetes.Interface, sink Sink, rec Recorder, opts Options) (*Informers, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// What the API server serves, recorded for each watched resource
	// (dra_exporter_resource_served): an informer of a resource that is not
	// served never syncs. After a failed discovery every resource is
	// watched, so that a transient error shows as watch errors rather than
	// a silently missing kind.
	served, err := servedResources(client)
	if err != nil {
		opts.Logger.Warn("discovery of resource.k8s.io/v1 failed: watching every resource, a watch's errors will tell one that is not served", "err", err)
	}
	var sources []source
	for _, r := range Watched {
		switch {
		case r.APIVersion != resourceapi.SchemeGroupVersion.String():
			rec.Served(r.Name, true)
		case served == nil:
		case !served[r.Name] && r.Unserved != "":
			rec.Served(r.Name, false)
			opts.Logger.Info(fmt.Sprintf("the API server does not serve %s %s: %s", r.APIVersion, r.Name, r.Unserved))
			continue
		case !served[r.Name]:
			rec.Served(r.Name, false)
			opts.Logger.Error("the API server does not serve "+r.APIVersion+" "+r.Name+": the exporter needs Kubernetes 1.34 or later", "resource", r.Name)
		default:
			rec.Served(r.Name, true)
		}
		sources = append(sources, source{r.Name, r.object, r.listWatch(client, r.watchOptions)})
	}
	return start(ctx, sources, sink, rec, opts), nil
}

func start(ctx context.Context, sources []source, sink Sink, rec Recorder, opts Options) *Informers {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	transform := trimTransform(opts.Trimmer)
	w := &writer{sink: sink, rec: rec, logger: opts.Logger}
	inf := &Informers{synced: map[string]cache.InformerSynced{}, w: w}
	var controllers []cache.Controller
	for _, src := range sources {
		res := &resource{
			name:  src.name,
			store: cache.NewStore(cache.DeletionHandlingMetaNamespaceKeyFunc),
			watch: newResourceWatch(src.name, rec, opts.Logger, opts.Gate, opts.Now),
		}
		inf.resources = append(inf.resources, res)
		ctl := cache.New(&cache.Config{
			Queue: cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
				Name:                  src.name,
				Transformer:           transform,
				AtomicEvents:          true,
				UnlockWhileProcessing: true,
			}),
			ListerWatcher:     newGatedLW(src.lw, res.watch, ctx.Done()),
			ObjectType:        src.obj,
			ObjectDescription: src.name,
			Process:           func(obj any, initial bool) error { return w.process(res, obj, initial) },
			// The gated ListerWatcher counts and logs every error.
			WatchErrorHandlerWithContext: func(context.Context, *cache.Reflector, error) {},
		})
		controllers = append(controllers, ctl)
		inf.synced[src.name] = ctl.HasSynced
		rec.TrackSynced(src.name, ctl.HasSynced)
		rec.TrackWatch(src.name, func() (bool, time.Time) {
			st := res.watch.State()
			return st.Healthy, st.Since
		})
	}
	// A rebuild adds the resources in the order of Watched.
	for _, r := range Watched {
		for _, res := range inf.resources {
			if res.name == r.Name {
				w.resources = append(w.resources, res)
			}
		}
	}
	for _, ctl := range controllers {
		go ctl.RunWithContext(ctx)
	}
	return inf
}

// Unsynced returns the resources whose initial list has not completed.
func (i *Informers) Unsynced() []string {
	var out []string
	for name, synced := range i.synced {
		if !synced() {
			out = append(out, name)
		}
	}
	return out
}

// Stale returns the resources whose watch is not current: broken, or
// resumed from a list that the index has not all received.
func (i *Informers) Stale() []string {
	var out []string
	for _, r := range i.resources {
		if !r.watch.State().Healthy {
			out = append(out, r.name)
		}
	}
	return out
}

// Rebuilding reports whether the index is being rebuilt after a write
// panicked.
func (i *Informers) Rebuilding() bool { return i.w.rebuilding.Load() }

// objects returns what the informers keep of a resource (the objects as
// the sink last accepted them).
func (i *Informers) objects(name string) []any {
	for _, r := range i.resources {
		if r.name == name {
			return r.store.List()
		}
	}
	return nil
}

// WaitForSync waits until every informer synced or ctx is done, and
// reports whether they synced.
func (i *Informers) WaitForSync(ctx context.Context) bool {
	fns := make([]cache.InformerSynced, 0, len(i.synced))
	for _, fn := range i.synced {
		fns = append(fns, fn)
	}
	return cache.WaitForCacheSync(ctx.Done(), fns...)
}

// process applies one item of a resource's queue: a relist (whole), or
// one watch event.
func (w *writer) process(r *resource, obj any, initial bool) error {
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return errNotDeltas
	}
	for _, d := range deltas {
		switch d.Type {
		case cache.ReplacedAll:
			info, ok := d.Object.(cache.ReplacedAllInfo)
			if !ok {
				return fmt.Errorf("%s: ReplacedAll without ReplacedAllInfo: %T", r.name, d.Object)
			}
			w.apply(r, w.replacement(r, info.Objects, initial))
			r.watch.listApplied()
		case cache.Added, cache.Updated, cache.Replaced, cache.Sync:
			old, _, _ := r.store.Get(d.Object)
			typ := "update"
			if old == nil {
				typ = "add"
			}
			o := d.Object
			w.apply(r, []change{{typ: typ, obj: o, old: old, write: func() error { return w.sink.Upsert(o, true) }}})
		case cache.Deleted:
			o := d.Object
			old, _, _ := r.store.Get(o)
			w.apply(r, []change{{typ: "delete", obj: o, old: old, write: func() error { return w.sink.Delete(o) }}})
		}
	}
	return nil
}

// replacement returns the changes a list makes to the cached objects:
// deletes of those it lacks, then the objects it has, but for those whose
// resourceVersion did not change. A relist's are late (see Sink).
func (w *writer) replacement(r *resource, objs []any, initial bool) []change {
	w.mu.Lock()
	defer w.mu.Unlock()
	listed := make(map[string]struct{}, len(objs))
	for _, o := range objs {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			listed[k] = struct{}{}
		}
	}
	var out []change
	for _, k := range r.store.ListKeys() {
		if _, ok := listed[k]; ok {
			continue
		}
		old, ok, _ := r.store.GetByKey(k)
		if !ok {
			continue
		}
		tomb := cache.DeletedFinalStateUnknown{Key: k, Obj: old}
		out = append(out, change{typ: "delete", obj: tomb, old: old, write: func() error { return w.sink.DeleteLate(tomb) }})
	}
	for _, o := range objs {
		old, _, _ := r.store.Get(o)
		if old != nil && sameVersion(old, o) {
			continue
		}
		typ := "update"
		if old == nil {
			typ = "add"
		}
		write := func() error { return w.sink.UpsertLate(o) }
		if initial {
			write = func() error { return w.sink.Upsert(o, false) }
		}
		out = append(out, change{typ: typ, obj: o, old: old, write: write})
	}
	return out
}

// sameVersion reports whether two versions of an object have the same
// resourceVersion (a relist of an object that did not change).
func sameVersion(a, b any) bool {
	ma, err1 := meta.Accessor(a)
	mb, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && ma.GetResourceVersion() != "" && ma.GetResourceVersion() == mb.GetResourceVersion()
}

// servedResources asks discovery which resources of resource.k8s.io/v1
// the API server serves (before 1.37 devicetaintrules is not among them;
// before 1.34 the group version is not served at all: an empty set). A
// failed discovery returns nil and the error: the caller then watches
// every resource, so that a transient error shows as watch errors rather
// than a silently missing kind.
func servedResources(client kubernetes.Interface) (map[string]bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", resourceapi.SchemeGroupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	return served, nil
}
