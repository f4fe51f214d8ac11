// Package kube feeds the index from the API server: one informer per
// resource, objects trimmed on arrival, protobuf on the wire. It only ever
// lists and watches.
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// Sink receives objects (the index).
type Sink interface {
	Upsert(obj any, live bool) error
	Delete(obj any) error
}

// Recorder receives the informers' health (the self-metrics).
type Recorder interface {
	Event(resource, typ string)
	WatchError(resource string)
	Rejected(resource string)
	TrackSynced(resource string, synced func() bool)
}

// Resources the exporter watches, as named in self-metrics.
const (
	ResDeviceClasses  = "deviceclasses"
	ResResourceSlices = "resourceslices"
	ResResourceClaims = "resourceclaims"
	ResPods           = "pods"
	ResNodes          = "nodes"
	ResEvents         = "events"
	// ResDeviceTaintRules is watched only where the API server serves
	// resource.k8s.io/v1 devicetaintrules (GA in 1.37).
	ResDeviceTaintRules = "devicetaintrules"
)

// RESTConfig loads a kubeconfig file, or the in-cluster config when path is
// empty and KUBECONFIG is unset, and asks for protobuf.
func RESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	var cfg *rest.Config
	var err error
	if path == "" && os.Getenv("KUBECONFIG") == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		}
	} else {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
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
}

// Informers are the running informers.
type Informers struct {
	synced map[string]cache.InformerSynced
}

// Start creates the informers, starts them, and returns without waiting for
// their initial lists.
func Start(ctx context.Context, client kubernetes.Interface, sink Sink, rec Recorder, opts Options) (*Informers, error) {
	transform := trimTransform(opts.Trimmer)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(transform))
	// Only Warning events about pods carry DRA evidence.
	eventFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(transform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.AndSelectors(
				fields.OneTermEqualSelector("type", "Warning"),
				fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
			).String()
		}))

	sources := []struct {
		name     string
		informer cache.SharedIndexInformer
	}{
		{ResDeviceClasses, factory.Resource().V1().DeviceClasses().Informer()},
		{ResResourceSlices, factory.Resource().V1().ResourceSlices().Informer()},
		{ResResourceClaims, factory.Resource().V1().ResourceClaims().Informer()},
		{ResPods, factory.Core().V1().Pods().Informer()},
		{ResNodes, factory.Core().V1().Nodes().Informer()},
		{ResEvents, eventFactory.Core().V1().Events().Informer()},
	}
	if servesDeviceTaintRules(client) {
		sources = append(sources, struct {
			name     string
			informer cache.SharedIndexInformer
		}{ResDeviceTaintRules, factory.Resource().V1().DeviceTaintRules().Informer()})
	} else if opts.Logger != nil {
		opts.Logger.Info("the API server does not serve resource.k8s.io/v1 devicetaintrules: device taints come from ResourceSlices only")
	}
	inf := &Informers{synced: map[string]cache.InformerSynced{}}
	for _, src := range sources {
		h := handler{resource: src.name, sink: sink, rec: rec, logger: opts.Logger}
		if err := src.informer.SetWatchErrorHandlerWithContext(h.watchError); err != nil {
			return nil, fmt.Errorf("%s informer: %w", src.name, err)
		}
		reg, err := src.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    h.add,
			UpdateFunc: h.update,
			DeleteFunc: h.delete,
		})
		if err != nil {
			return nil, fmt.Errorf("%s informer: %w", src.name, err)
		}
		inf.synced[src.name] = reg.HasSynced
		rec.TrackSynced(src.name, reg.HasSynced)
	}
	factory.Start(ctx.Done())
	eventFactory.Start(ctx.Done())
	return inf, nil
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

// WaitForSync waits until every informer synced or ctx is done, and
// reports whether they synced.
func (i *Informers) WaitForSync(ctx context.Context) bool {
	fns := make([]cache.InformerSynced, 0, len(i.synced))
	for _, fn := range i.synced {
		fns = append(fns, fn)
	}
	return cache.WaitForCacheSync(ctx.Done(), fns...)
}

type handler struct {
	resource string
	sink     Sink
	rec      Recorder
	logger   *slog.Logger
}

func (h handler) add(obj any, initial bool) {
	h.apply("add", func() error { return h.sink.Upsert(obj, !initial) })
}

func (h handler) update(_, obj any) {
	h.apply("update", func() error { return h.sink.Upsert(obj, true) })
}

func (h handler) delete(obj any) {
	h.apply("delete", func() error { return h.sink.Delete(obj) })
}

// apply runs one index change; a failure or a panic on unexpected data is
// logged and counted, never fatal.
func (h handler) apply(typ string, fn func() error) {
	h.rec.Event(h.resource, typ)
	defer func() {
		if r := recover(); r != nil {
			h.rec.Rejected(h.resource)
			h.logger.Error("index update panicked", "resource", h.resource, "type", typ, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	if err := fn(); err != nil {
		h.rec.Rejected(h.resource)
		h.logger.Warn("object rejected", "resource", h.resource, "type", typ, "err", err)
	}
}

func (h handler) watchError(ctx context.Context, r *cache.Reflector, err error) {
	h.rec.WatchError(h.resource)
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

// servesDeviceTaintRules asks discovery whether resource.k8s.io/v1 has
// devicetaintrules (before 1.37 it is off by default): an informer of a
// resource that is not served never syncs, and the exporter would render
// nothing. A failed discovery counts as served, so that a transient error
// shows as watch errors rather than a silently missing kind.
func servesDeviceTaintRules(client kubernetes.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	for _, r := range list.APIResources {
		if r.Name == ResDeviceTaintRules {
			return true
		}
	}
	return false
}
