package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

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

// Resource is one kind of object the exporter reads from the API server.
type Resource struct {
	// Name is the plural resource name, as in the self-metrics, the
	// bundle's file names and the RBAC rules.
	Name       string
	APIVersion string
	Kind       string
	Namespaced bool
	// Unserved, when set, makes the resource optional: read only where
	// the API server serves it, and this says what its absence means.
	Unserved string

	object runtime.Object
	// watchOptions narrow what the informer watches of it (nil: all).
	watchOptions func(*metav1.ListOptions)
	client       func(c kubernetes.Interface, namespace string) typedClient
}

// Watched is the one list of what the exporter reads: the informers watch
// each, `explain` lists each for one pod and `bundle` saves each, all by
// ranging over it, so a kind added here reaches the three. The order is
// the one a rebuild adds them in (what others refer to first, as a file is
// loaded); `bundle` relies on pods coming before the events it keeps of
// them.
var Watched = []Resource{
	{
		Name: ResDeviceClasses, APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass", object: &resourceapi.DeviceClass{},
		client: func(c kubernetes.Interface, _ string) typedClient { return typed(c.ResourceV1().DeviceClasses()) },
	},
	{
		Name: ResDeviceTaintRules, APIVersion: "resource.k8s.io/v1", Kind: "DeviceTaintRule", object: &resourceapi.DeviceTaintRule{},
		Unserved: "device taints come from ResourceSlices only (Kubernetes 1.37 serves it)",
		client:   func(c kubernetes.Interface, _ string) typedClient { return typed(c.ResourceV1().DeviceTaintRules()) },
	},
	{
		Name: ResResourceSlices, APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice", object: &resourceapi.ResourceSlice{},
		client: func(c kubernetes.Interface, _ string) typedClient { return typed(c.ResourceV1().ResourceSlices()) },
	},
	{
		Name: ResNodes, APIVersion: "v1", Kind: "Node", object: &corev1.Node{},
		client: func(c kubernetes.Interface, _ string) typedClient { return typed(c.CoreV1().Nodes()) },
	},
	{
		Name: ResResourceClaims, APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespaced: true, object: &resourceapi.ResourceClaim{},
		client: func(c kubernetes.Interface, ns string) typedClient { return typed(c.ResourceV1().ResourceClaims(ns)) },
	},
	{
		Name: ResPods, APIVersion: "v1", Kind: "Pod", Namespaced: true, object: &corev1.Pod{},
		client: func(c kubernetes.Interface, ns string) typedClient { return typed(c.CoreV1().Pods(ns)) },
	},
	{
		Name: ResEvents, APIVersion: "v1", Kind: "Event", Namespaced: true, object: &corev1.Event{},
		// Only Warning events about pods carry DRA evidence.
		watchOptions: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.AndSelectors(
				fields.OneTermEqualSelector("type", "Warning"),
				fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
			).String()
		},
		client: func(c kubernetes.Interface, ns string) typedClient { return typed(c.CoreV1().Events(ns)) },
	},
}

// watched returns the declaration of the named resource.
func watched(name string) Resource {
	for _, r := range Watched {
		if r.Name == name {
			return r
		}
	}
	panic("kube: no watched resource " + name)
}

// List lists the resource in namespace ("" for all, or for a cluster-scoped
// one) and returns pointers to its items.
func (r Resource) List(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) ([]runtime.Object, error) {
	list, err := r.client(c, namespace).list(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.Name, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.Name, err)
	}
	return items, nil
}

// listWatch lists and watches the resource in all namespaces with its
// typed client (protobuf), as the generated informers do; tweak narrows
// the options further.
func (r Resource) listWatch(client kubernetes.Interface, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	c := r.client(client, "")
	opts := func(o metav1.ListOptions) metav1.ListOptions {
		if tweak != nil {
			tweak(&o)
		}
		return o
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return c.list(ctx, opts(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.watch(ctx, opts(o))
		},
	}, client)
}

// typedClient is a typed client's list and watch of one resource, with
// the list type erased.
type typedClient interface {
	list(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// listWatchClient is a typed client's list and watch of one resource.
type listWatchClient[L runtime.Object] interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

type typedOf[L runtime.Object] struct{ c listWatchClient[L] }

func typed[L runtime.Object](c listWatchClient[L]) typedClient { return typedOf[L]{c} }

func (t typedOf[L]) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return t.c.List(ctx, o)
}

func (t typedOf[L]) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return t.c.Watch(ctx, o)
}
