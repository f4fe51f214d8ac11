package kube

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// trimTransform is the informers' transform: objects trimmed on arrival,
// delete tombstones included.
func trimTransform(t objects.Trimmer) cache.TransformFunc {
	return func(obj any) (any, error) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			tomb.Obj = t.Trim(tomb.Obj)
			return tomb, nil
		}
		return t.Trim(obj), nil
	}
}

// Claim fetch failures, by reason (dra_node_claim_fetch_errors_total).
const (
	FetchForbidden = "forbidden" // the agent's RBAC lacks get on resourceclaims
	FetchError     = "error"     // the API server unreachable, a timeout
)

// FetchReasons lists the reasons of a failed claim fetch.
var FetchReasons = []string{FetchForbidden, FetchError}

// NodeRecorder receives the node agent's informer health and its failed
// claim fetches.
type NodeRecorder interface {
	Recorder
	ClaimFetchError(reason string)
}

// NodeOptions configure the node agent's watches.
type NodeOptions struct {
	Node string
	// ClaimRefresh is how often the claims are fetched again (also on
	// every pod change).
	ClaimRefresh time.Duration
	Trimmer      objects.Trimmer
	Logger       *slog.Logger
	// Gate, when set, holds the watches while the API server does not
	// answer (see Gate); the probe opens it.
	Gate *Gate
}

// NodeStore watches only what one node needs, so that thousands of agents
// do not each watch the cluster: pods and ResourceSlices by spec.nodeName
// and the node's own Node, trimmed as the exporter trims them, through the
// same list/watch controllers, gate and watch health as the exporter's
// informers. Claims are fetched by name (get) for the node's pods and for
// what the kubelet reports, and refreshed when a pod changes and every
// refresh interval; there is no claim watch.
type NodeStore struct {
	client kubernetes.Interface
	rec    NodeRecorder
	opts   NodeOptions
	inf    *Informers
	kick   chan struct{}

	mu      sync.Mutex
	claims  map[string]*resourceapi.ResourceClaim
	wanted  map[string]bool
	lastErr string
}

// StartNode starts the node-scoped informers and the claim fetcher.
func StartNode(ctx context.Context, client kubernetes.Interface, rec NodeRecorder, opts NodeOptions) (*NodeStore, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &NodeStore{
		client: client, rec: rec, opts: opts,
		kick:   make(chan struct{}, 1),
		claims: map[string]*resourceapi.ResourceClaim{},
		wanted: map[string]bool{},
	}
	onNode := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.Node).String()
	}
	self := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.Node).String()
	}
	sources := []source{
		{ResPods, &corev1.Pod{}, watched(ResPods).listWatch(client, onNode)},
		{ResResourceSlices, &resourceapi.ResourceSlice{}, watched(ResResourceSlices).listWatch(client, onNode)},
		{ResNodes, &corev1.Node{}, watched(ResNodes).listWatch(client, self)},
	}
	s.inf = start(ctx, sources, nodeSink{s}, rec, Options{Trimmer: opts.Trimmer, Logger: opts.Logger, Gate: opts.Gate})
	go s.fetchLoop(ctx)
	return s, nil
}

// nodeSink keeps nothing (the informers' caches are the node's state): a
// change of a pod fetches the claims again.
type nodeSink struct{ s *NodeStore }

func (k nodeSink) kickFor(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if _, ok := obj.(*corev1.Pod); ok {
		k.s.Kick()
	}
}

func (k nodeSink) Upsert(obj any, _ bool) error { k.kickFor(obj); return nil }
func (k nodeSink) UpsertLate(obj any) error     { k.kickFor(obj); return nil }
func (k nodeSink) Delete(obj any) error         { k.kickFor(obj); return nil }
func (k nodeSink) DeleteLate(obj any) error     { k.kickFor(obj); return nil }

// Rebuild has nothing to rebuild: the caches are the state.
func (k nodeSink) Rebuild(func(add func(obj any) error) error) error { return nil }

// Synced reports whether the initial lists completed.
func (s *NodeStore) Synced() bool { return len(s.inf.Unsynced()) == 0 }

// Stale returns the node's resources whose watch is not current.
func (s *NodeStore) Stale() []string { return s.inf.Stale() }

// Kick asks the fetcher to refresh the claims now.
func (s *NodeStore) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Pods returns the node's pods.
func (s *NodeStore) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range s.inf.objects(ResPods) {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// Slices returns the node's ResourceSlices.
func (s *NodeStore) Slices() []*objects.Slice {
	var out []*objects.Slice
	for _, o := range s.inf.objects(ResResourceSlices) {
		if rs, ok := o.(*objects.Slice); ok {
			out = append(out, rs)
		}
	}
	return out
}

// Claims returns the fetched claims by dra.ClaimKey.
func (s *NodeStore) Claims() map[string]*resourceapi.ResourceClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*resourceapi.ResourceClaim, len(s.claims))
	for k, c := range s.claims {
		out[k] = c
	}
	return out
}

// Want asks for these claims (dra.ClaimKey) too, the ones the kubelet
// reports, which the pods may no longer name: keys replaces the last set;
// a changed set is fetched at once.
func (s *NodeStore) Want(keys []string) {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	s.mu.Lock()
	changed := len(set) != len(s.wanted)
	for k := range set {
		changed = changed || !s.wanted[k]
	}
	s.wanted = set
	s.mu.Unlock()
	if changed {
		s.Kick()
	}
}

func (s *NodeStore) fetchLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.ClaimRefresh)
	defer t.Stop()
	for {
		s.fetch(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// fetch gets every claim the node's pods name and the kubelet reported;
// claims nobody needs any more are dropped. A claim that cannot be fetched
// keeps its last state; the failure is counted by reason and logged when
// it changes (a missing RBAC rule fails every fetch the same way).
func (s *NodeStore) fetch(ctx context.Context) {
	known := dra.NewClaimSet(s.Claims())
	need := map[string]bool{}
	for _, p := range s.Pods() {
		for _, name := range dra.ClaimNames(p, known) {
			need[dra.ClaimKey(p.Namespace, name)] = true
		}
	}
	s.mu.Lock()
	for k := range s.wanted {
		need[k] = true
	}
	s.mu.Unlock()
	keys := make([]string, 0, len(need))
	for k := range need {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	got := map[string]*resourceapi.ResourceClaim{}
	var firstErr error
	failed := 0
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		c, err := s.client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			if t, ok := s.opts.Trimmer.Trim(c).(*resourceapi.ResourceClaim); ok {
				c = t
			}
			got[k] = c
		case apierrors.IsNotFound(err):
		case ctx.Err() != nil:
			return
		default:
			reason := FetchError
			if apierrors.IsForbidden(err) {
				reason = FetchForbidden
			}
			s.rec.ClaimFetchError(reason)
			failed++
			if firstErr == nil {
				firstErr = err
			}
			// Keep what we had: the claim is not gone.
			s.mu.Lock()
			if old := s.claims[k]; old != nil {
				got[k] = old
			}
			s.mu.Unlock()
		}
	}
	msg := ""
	if firstErr != nil {
		msg = firstErr.Error()
	}
	s.mu.Lock()
	s.claims = got
	prev := s.lastErr
	s.lastErr = msg
	s.mu.Unlock()
	switch {
	case msg != "" && msg != prev:
		s.opts.Logger.Warn("cannot get resourceclaims; their pods' GPUs read from the kubelet alone", "failed", failed, "of", len(keys), "err", msg)
	case msg == "" && prev != "":
		s.opts.Logger.Info("resourceclaims fetched again")
	}
}
