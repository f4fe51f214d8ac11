package kube

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

type nodeRecorder struct {
	mu     sync.Mutex
	events map[string]int
	fetch  map[string]int
}

func (r *nodeRecorder) Event(resource, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[resource]++
}
func (r *nodeRecorder) WatchError(string, string)                   {}
func (r *nodeRecorder) Relisted(string)                             {}
func (r *nodeRecorder) IndexRebuilt()                               {}
func (r *nodeRecorder) Rejected(string)                             {}
func (r *nodeRecorder) TrackSynced(string, func() bool)             {}
func (r *nodeRecorder) Served(string, bool)                         {}
func (r *nodeRecorder) TrackWatch(string, func() (bool, time.Time)) {}
func (r *nodeRecorder) ClaimFetchError(reason string)               { r.mu.Lock(); r.fetch[reason]++; r.mu.Unlock() }
func (r *nodeRecorder) count(m map[string]int, k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[k]
}

// The agent's informers trim as the exporter's and count their events; a
// claim its RBAC may not get is a counted error, and the claim comes back
// once it may.
func TestNodeStore(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "llm-0", UID: "u1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}, Annotations: map[string]string{"big": "x"}},
		Spec: corev1.PodSpec{NodeName: "gpu-node-1", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr("llm-0-gpu")}},
			Containers: []corev1.Container{{Name: "server", Image: "llm:1"}}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "llm-0-gpu", UID: "c1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler"}}}}
	client := fake.NewClientset(pod, claim)
	var forbidden atomic.Bool
	forbidden.Store(true)
	client.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if forbidden.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "llm-0-gpu", nil)
		}
		return false, nil, nil
	})
	rec := &nodeRecorder{events: map[string]int{}, fetch: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := StartNode(ctx, client, rec, NodeOptions{Node: "gpu-node-1", ClaimRefresh: 20 * time.Millisecond, Trimmer: objects.Trimmer{}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "informers synced and a forbidden fetch counted", func() bool {
		return s.Synced() && rec.count(rec.fetch, FetchForbidden) > 0 && len(s.Pods()) == 1
	})
	if len(s.Claims()) != 0 {
		t.Errorf("claims %v while forbidden", s.Claims())
	}
	p := s.Pods()[0]
	if p.ManagedFields != nil || p.Annotations != nil || p.Spec.Containers[0].Image != "" {
		t.Errorf("pod not trimmed: %+v", p)
	}
	if rec.count(rec.events, ResPods) == 0 {
		t.Error("pod events not counted")
	}
	forbidden.Store(false)
	waitFor(t, "the claim fetched once allowed", func() bool { return s.Claims()["llm/llm-0-gpu"] != nil })
	if c := s.Claims()["llm/llm-0-gpu"]; c.ManagedFields != nil {
		t.Errorf("claim not trimmed: %+v", c.ObjectMeta)
	}
}

func ptr[T any](v T) *T { return &v }

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
