package nodeagent

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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// KubeStore watches only what one node needs, so that thousands of agents
// do not each watch the cluster: pods and ResourceSlices by spec.nodeName
// and the node's own Node object. Claims are fetched by name (get) for the
// node's pods and for what the kubelet reports, and refreshed when a pod
// changes and every refresh interval; there is no claim watch.
type KubeStore struct {
	client  kubernetes.Interface
	logger  *slog.Logger
	refresh time.Duration

	pods, slices, nodes cache.SharedIndexInformer

	kick chan struct{}

	mu     sync.Mutex
	claims map[string]*resourceapi.ResourceClaim
	wanted map[string]bool
}

// StartKube starts the node-scoped informers and the claim fetcher.
func StartKube(ctx context.Context, client kubernetes.Interface, node string, refresh time.Duration, logger *slog.Logger) (*KubeStore, error) {
	byNode := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	self := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	s := &KubeStore{
		client: client, logger: logger, refresh: refresh,
		pods:   byNode.Core().V1().Pods().Informer(),
		slices: byNode.Resource().V1().ResourceSlices().Informer(),
		nodes:  self.Core().V1().Nodes().Informer(),
		kick:   make(chan struct{}, 1),
		claims: map[string]*resourceapi.ResourceClaim{},
		wanted: map[string]bool{},
	}
	kick := func(any) { s.Kick() }
	if _, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
	}); err != nil {
		return nil, err
	}
	byNode.Start(ctx.Done())
	self.Start(ctx.Done())
	go s.fetchLoop(ctx)
	return s, nil
}

// Synced reports whether the initial lists completed.
func (s *KubeStore) Synced() bool {
	return s.pods.HasSynced() && s.slices.HasSynced() && s.nodes.HasSynced()
}

// Kick asks the fetcher to refresh the claims now.
func (s *KubeStore) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Pods implements Store.
func (s *KubeStore) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range s.pods.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// Slices implements Store.
func (s *KubeStore) Slices() []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, o := range s.slices.GetStore().List() {
		if rs, ok := o.(*resourceapi.ResourceSlice); ok {
			out = append(out, rs)
		}
	}
	return out
}

// Claims implements Store.
func (s *KubeStore) Claims() map[string]*resourceapi.ResourceClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*resourceapi.ResourceClaim, len(s.claims))
	for k, c := range s.claims {
		out[k] = c
	}
	return out
}

// Want implements Store: keys replaces the last set; a changed set is
// fetched at once.
func (s *KubeStore) Want(keys []string) {
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

func (s *KubeStore) fetchLoop(ctx context.Context) {
	t := time.NewTicker(s.refresh)
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
// claims nobody needs any more are dropped.
func (s *KubeStore) fetch(ctx context.Context) {
	need := map[string]bool{}
	for _, p := range s.Pods() {
		for _, name := range ClaimNamesOf(p) {
			need[ClaimKey(p.Namespace, name)] = true
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
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		c, err := s.client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			got[k] = c
		case apierrors.IsNotFound(err):
		default:
			// Keep what we had: the API server is unreachable, not the
			// claim gone.
			s.mu.Lock()
			if old := s.claims[k]; old != nil {
				got[k] = old
			}
			s.mu.Unlock()
			s.logger.Debug("get resourceclaim", "claim", k, "err", err)
		}
	}
	s.mu.Lock()
	s.claims = got
	s.mu.Unlock()
}
