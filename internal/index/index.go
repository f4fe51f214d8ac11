package index

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/dra-exporter/dra-exporter/internal/celmatch"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// Config configures an Index.
type Config struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Observer receives latency observations of live transitions; nil
	// discards them.
	Observer Observer
	// DevicePluginResources are the extended resources that device plugins
	// advertise for GPUs (the legacy lane), such as nvidia.com/gpu.
	DevicePluginResources []string
	// Shard is the exporter's part of the cluster. The index still holds
	// every claim and pod (free devices, conflicts and lower-priority
	// holders are verdicts over all namespaces) but only the shard's
	// events, which are evidence about its own pods only.
	Shard shard.Shard
	// Started is when the process started: transitions recovered from
	// objects' timestamps (see Observer) are observed only when they
	// happened at or after it. Zero means when New is called.
	Started time.Time
}

// Index holds the joined DRA state. Writers are informer handlers (or the
// offline loader); readers take a Snapshot.
type Index struct {
	mu      sync.RWMutex
	now     func() time.Time
	matcher *celmatch.Matcher
	// kept is what the allocator model keeps beside the index (derive.go).
	kept         *kept
	devicePlugin []string
	shard        shard.Shard

	classes     map[string]*Class
	sliceToPool map[string]PoolKey
	pools       map[PoolKey]*pool
	devices     map[DeviceKey]*Device
	claims      map[Key]*Claim
	pods        map[Key]*Pod
	nodes       map[string]*Node
	events      map[Key]*Event
	taintRules  map[string]*resourceapi.DeviceTaintRule

	// claimsByReservedPod maps a pod UID to the claims reserved for it.
	claimsByReservedPod links
	// claimsByOwner maps a pod UID to the claims it controls.
	claimsByOwner links
	// unreservedSince records when an allocated claim was first seen
	// reserving nobody.
	unreservedSince map[types.UID]time.Time

	latency *latencyTracker

	// poisoned is set when a write panicked half-way: the maps may
	// disagree until Rebuild replaces them, and Snapshot hands out the
	// last snapshot taken before.
	poisoned bool
	// cfg is what New was given, for Rebuild.
	cfg Config

	// changedClaims and changedPods are the keys of the claims and pods
	// written since the last snapshot (Snapshot patches that one's joins
	// when they are few).
	changedClaims, changedPods map[Key]struct{}

	// version counts, per kind, the changes Upsert and Delete made (an
	// update that changes nothing the index holds is not one); a snapshot
	// taken at the same version is the same view, so the last one is
	// handed out again (snapMu serialises taking one).
	version     Version
	snapMu      sync.Mutex
	snap        *Snapshot
	snapVersion Version
}

// New returns an empty index.
func New(cfg Config) *Index {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if cfg.Started.IsZero() {
		cfg.Started = now()
	}
	return &Index{
		cfg:                 cfg,
		version:             Version{index: indexIDs.Add(1)},
		now:                 now,
		devicePlugin:        slices.Clone(cfg.DevicePluginResources),
		shard:               cfg.Shard,
		claimsByOwner:       links{},
		matcher:             celmatch.New(),
		kept:                &kept{},
		classes:             map[string]*Class{},
		sliceToPool:         map[string]PoolKey{},
		pools:               map[PoolKey]*pool{},
		devices:             map[DeviceKey]*Device{},
		claims:              map[Key]*Claim{},
		pods:                map[Key]*Pod{},
		nodes:               map[string]*Node{},
		events:              map[Key]*Event{},
		taintRules:          map[string]*resourceapi.DeviceTaintRule{},
		claimsByReservedPod: links{},
		unreservedSince:     map[types.UID]time.Time{},
		latency:             newLatencyTracker(cfg.Observer, cfg.Started),
		changedClaims:       map[Key]struct{}{},
		changedPods:         map[Key]struct{}{},
	}
}

// Upsert adds or replaces an object. live is false for objects delivered by
// an informer's initial list (or read from a file): their past transitions
// are observed only when their timestamps record them after the process
// started (see Observer). Objects of kinds the index does not use are
// rejected with an error.
func (ix *Index) Upsert(obj any, live bool) error {
	if live {
		return ix.upsert(obj, arrivedLive)
	}
	return ix.upsert(obj, arrivedInitial)
}

// UpsertLate is Upsert for an object a relist delivered after the watch
// was down: what changed in it happened at some unknown time before now, so
// its transitions are timed only from its timestamps.
func (ix *Index) UpsertLate(obj any) error { return ix.upsert(obj, arrivedLate) }

func (ix *Index) upsert(obj any, arr arrival) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.poisonOnPanic()
	now := ix.now()
	switch o := obj.(type) {
	case *resourceapi.DeviceClass:
		ix.upsertClass(newClass(o))
		ix.touch(KindClass)
	case *resourceapi.ResourceSlice:
		ix.upsertSliceIfChanged(objects.CompactSlice(o))
	case *objects.Slice:
		ix.upsertSliceIfChanged(o)
	case *resourceapi.ResourceClaim:
		old := ix.claims[Key{o.Namespace, o.Name}]
		if old != nil && sameContent(old.Obj, o) {
			break
		}
		ix.upsertClaim(newClaim(o), now, arr)
		ix.touch(KindClaim)
		if old == nil || !samePlacement(old.Obj, o) {
			ix.touch(KindPlacement)
		}
	case *corev1.Pod:
		old := ix.pods[Key{o.Namespace, o.Name}]
		if old != nil && sameContent(old.Obj, o) {
			break
		}
		if ix.upsertPod(newPod(o), now, arr) {
			ix.touch(KindPod)
			if old == nil || ix.pods[old.Key] == nil || !samePlacement(old.Obj, o) {
				ix.touch(KindPlacement)
			}
		}
	case *corev1.Node:
		// Kubelets report status every few minutes; most reports change
		// nothing the index reads.
		if n := newNode(o); !n.same(ix.nodes[o.Name]) {
			ix.nodes[o.Name] = n
			ix.touch(KindNode)
		}
	case *corev1.Event:
		if ix.upsertEvent(newCoreEvent(o)) {
			ix.touch(KindEvent)
		}
	case *eventsv1.Event:
		if ix.upsertEvent(newEventsV1Event(o)) {
			ix.touch(KindEvent)
		}
	case *resourceapi.DeviceTaintRule:
		if !sameContent(ix.taintRules[o.Name], o) {
			ix.taintRules[o.Name] = o
			ix.touch(KindTaintRule)
		}
	default:
		return fmt.Errorf("index: unsupported object type %T", obj)
	}
	return nil
}

func (ix *Index) upsertSliceIfChanged(s *objects.Slice) {
	if !ix.slice(s.Name).Equal(s) {
		ix.upsertSlice(s)
		ix.touch(KindSlice)
	}
}

// slice returns the slice of that name the index holds, or nil.
func (ix *Index) slice(name string) *objects.Slice {
	pk, ok := ix.sliceToPool[name]
	if !ok {
		return nil
	}
	return ix.pools[pk].slices[name]
}

// Delete removes an object. It accepts cache.DeletedFinalStateUnknown.
func (ix *Index) Delete(obj any) error { return ix.delete(obj, arrivedLive) }

// DeleteLate is Delete for an object a relist found gone: it went at some
// unknown time, so the end of a pod it reports is not timed.
func (ix *Index) DeleteLate(obj any) error { return ix.delete(obj, arrivedLate) }

func (ix *Index) delete(obj any, arr arrival) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.poisonOnPanic()
	now := ix.now()
	switch o := obj.(type) {
	case *resourceapi.DeviceClass:
		delete(ix.classes, o.Name)
		ix.rematchClass(o.Name)
		ix.touch(KindClass)
	case *resourceapi.ResourceSlice, *objects.Slice:
		ix.deleteSlice(o.(metav1.Object).GetName())
		ix.touch(KindSlice)
	case *resourceapi.ResourceClaim:
		ix.deleteClaim(Key{o.Namespace, o.Name}, now, arr)
		ix.touch(KindClaim)
		ix.touch(KindPlacement)
	case *corev1.Pod:
		if ix.deletePod(Key{o.Namespace, o.Name}, now, arr) {
			ix.touch(KindPod)
			ix.touch(KindPlacement)
		}
	case *corev1.Node:
		if _, ok := ix.nodes[o.Name]; ok {
			delete(ix.nodes, o.Name)
			ix.touch(KindNode)
		}
	case *corev1.Event:
		if ix.deleteEvent(Key{o.Namespace, o.Name}) {
			ix.touch(KindEvent)
		}
	case *eventsv1.Event:
		if ix.deleteEvent(Key{o.Namespace, o.Name}) {
			ix.touch(KindEvent)
		}
	case *resourceapi.DeviceTaintRule:
		delete(ix.taintRules, o.Name)
		ix.touch(KindTaintRule)
	default:
		return fmt.Errorf("index: unsupported object type %T", obj)
	}
	return nil
}

func (ix *Index) claimByKey(k Key) *Claim { return ix.claims[k] }

func (ix *Index) claimsOwnedBy(uid types.UID) []*Claim {
	keys := ix.claimsByOwner[uid]
	out := make([]*Claim, 0, len(keys))
	for _, k := range keys {
		if c := ix.claims[k]; c != nil {
			out = append(out, c)
		}
	}
	return out
}

// claimsOfGroup scans: PodGroup claims are rare (alpha), and only the
// latency tracker resolves claims on the live index.
func (ix *Index) claimsOfGroup(g Key) []*Claim {
	var out []*Claim
	for _, c := range ix.claims {
		if c.OwnerGroup != nil && c.Key.Namespace == g.Namespace && c.OwnerGroup.Name == g.Name {
			out = append(out, c)
		}
	}
	return out
}

func (ix *Index) podLane(p *Pod) string {
	return podLane(p,
		func(name string) bool { return slices.Contains(ix.devicePlugin, name) },
		func(name string) bool { return classForExtendedResource(ix.classes, name) != nil },
	)
}

// classForExtendedResource returns the class that serves an extended
// resource name, explicitly or through the implicit deviceclass name.
func classForExtendedResource(classes map[string]*Class, name string) *Class {
	if c, ok := classes[strings.TrimPrefix(name, resourceapi.ResourceDeviceClassPrefix)]; ok && strings.HasPrefix(name, resourceapi.ResourceDeviceClassPrefix) {
		return c
	}
	// The scheduler's choice (extendedresourcecache): the newest class, the
	// name breaking ties.
	var found *Class
	for _, c := range classes {
		if c.ExtendedResource != name {
			continue
		}
		if found == nil || c.Created.After(found.Created) || (c.Created.Equal(found.Created) && c.Name < found.Name) {
			found = c
		}
	}
	return found
}
