package main

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/selfmetrics"
)

// TestWatchedResourcesReachInformersExplainAndBundle holds the informers,
// explain and bundle to kube.Watched, the one list of what the exporter
// reads: each lists every resource of it, and nothing else, so a kind
// added there reaches the three.
func TestWatchedResourcesReachInformersExplainAndBundle(t *testing.T) {
	var want []string
	for _, r := range kube.Watched {
		want = append(want, r.Name)
	}
	slices.Sort(want)
	newClient := func() *fake.Clientset {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
			Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: new("c")}}}}
		cs := fake.NewClientset(pod)
		// Discovery serves every watched resource, the optional ones too.
		byVersion := map[string]*metav1.APIResourceList{}
		for _, r := range kube.Watched {
			if byVersion[r.APIVersion] == nil {
				byVersion[r.APIVersion] = &metav1.APIResourceList{GroupVersion: r.APIVersion}
				cs.Resources = append(cs.Resources, byVersion[r.APIVersion])
			}
			byVersion[r.APIVersion].APIResources = append(byVersion[r.APIVersion].APIResources, metav1.APIResource{Name: r.Name, Kind: r.Kind, Namespaced: r.Namespaced})
		}
		return cs
	}
	listed := func(cs *fake.Clientset) []string {
		var out []string
		for _, a := range cs.Actions() {
			if l, ok := a.(k8stesting.ListAction); ok && !slices.Contains(out, l.GetResource().Resource) {
				out = append(out, l.GetResource().Resource)
			}
		}
		slices.Sort(out)
		return out
	}
	cfg, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("informers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs := newClient()
		inf, err := kube.Start(ctx, cs, index.New(cfg.indexConfig(nil, nil)), selfmetrics.NewSelf(), kube.Options{Trimmer: cfg.trimmer()})
		if err != nil {
			t.Fatal(err)
		}
		if !inf.WaitForSync(ctx) {
			t.Fatal("informers did not sync")
		}
		if got := listed(cs); !slices.Equal(got, want) {
			t.Errorf("informers list %v, kube.Watched is %v", got, want)
		}
	})
	t.Run("explain", func(t *testing.T) {
		cs := newClient()
		if _, err := readPod(context.Background(), cs, "ns", "p", cfg, time.Now); err != nil {
			t.Fatal(err)
		}
		if got := listed(cs); !slices.Equal(got, want) {
			t.Errorf("explain lists %v, kube.Watched is %v", got, want)
		}
	})
	t.Run("bundle", func(t *testing.T) {
		cs := newClient()
		w := bundle.NewWriter(io.Discard, time.Now(), "test")
		saveObjects(context.Background(), cs, "", w)
		if got := listed(cs); !slices.Equal(got, want) {
			t.Errorf("bundle lists %v, kube.Watched is %v", got, want)
		}
		var saved []string
		for _, it := range w.Items() {
			if it.Error != "" || it.Skipped != "" {
				t.Errorf("%s: %s%s", it.What, it.Error, it.Skipped)
			}
			saved = append(saved, it.What)
		}
		slices.Sort(saved)
		if !slices.Equal(saved, want) {
			t.Errorf("bundle saves %v, kube.Watched is %v", saved, want)
		}
	})
}
