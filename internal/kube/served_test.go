package kube

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// servedRecorder keeps what Start reports as served.
type servedRecorder struct {
	*fakeRecorder
	mu     sync.Mutex
	served map[string]bool
}

func (r *servedRecorder) Served(resource string, served bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served[resource] = served
}

// resourceV1 is the discovery of resource.k8s.io/v1 listing the resources.
func resourceV1(names ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: resourceapi.SchemeGroupVersion.String()}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n}, metav1.APIResource{Name: n + "/status"})
	}
	return l
}

// Start asks discovery what the API server serves, says it in the
// self-metrics, and watches devicetaintrules only where it is served (1.37)
// or unknown; a release that lacks it gets no informer that would never
// sync, and a 0 rather than silence.
func TestStartReportsWhatIsServed(t *testing.T) {
	v1 := []string{"deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"}
	core := map[string]bool{ResPods: true, ResNodes: true, ResEvents: true}
	with := func(m map[string]bool) map[string]bool {
		out := maps.Clone(core)
		maps.Copy(out, m)
		return out
	}
	for _, tc := range []struct {
		name      string
		discovery *metav1.APIResourceList // nil: resource.k8s.io/v1 not served
		fail      bool                    // discovery errors
		served    map[string]bool
		watched   bool // devicetaintrules
	}{
		{name: "1.37", discovery: resourceV1(append(v1, "devicetaintrules")...),
			served: with(map[string]bool{"deviceclasses": true, "resourceslices": true, "resourceclaims": true, "devicetaintrules": true}), watched: true},
		{name: "1.34-1.36", discovery: resourceV1(v1...),
			served: with(map[string]bool{"deviceclasses": true, "resourceslices": true, "resourceclaims": true, "devicetaintrules": false})},
		{name: "before 1.34",
			served: with(map[string]bool{"deviceclasses": false, "resourceslices": false, "resourceclaims": false, "devicetaintrules": false})},
		{name: "discovery fails", fail: true, served: core, watched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.discovery != nil {
				client.Resources = []*metav1.APIResourceList{tc.discovery}
			}
			if tc.fail {
				client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			rec := &servedRecorder{fakeRecorder: newFakeRecorder(), served: map[string]bool{}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			inf, err := Start(ctx, client, index.New(index.Config{}), rec, Options{})
			if err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			got := maps.Clone(rec.served)
			rec.mu.Unlock()
			if !maps.Equal(got, tc.served) {
				t.Errorf("served = %v, want %v", got, tc.served)
			}
			var watched []string
			for _, r := range inf.resources {
				watched = append(watched, r.name)
			}
			if slices.Contains(watched, ResDeviceTaintRules) != tc.watched {
				t.Errorf("informers %v: devicetaintrules watched = %v, want %v", watched, !tc.watched, tc.watched)
			}
			want := 6
			if tc.watched {
				want++
			}
			if len(watched) != want {
				t.Errorf("informers %v, want %d", watched, want)
			}
		})
	}
}
