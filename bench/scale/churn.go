package main

// Churn: a live cluster changes between scrapes. While the churn scrapes
// run, a writer changes objects through the API at a set rate, as
// controllers and kubelets do: pod and claim updates (a metadata patch, which
// every watcher receives as an update of the whole object) and new Warning
// events about pods. An exporter that keeps what did not change is measured
// on what a change costs, not only on an idle cluster.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/dra-exporter/dra-exporter/bench"
)

// churnMix is the order writes cycle through: of every five, two pod
// updates, two new events, one claim update.
var churnMix = []string{"pod", "event", "pod", "claim", "event"}

// ChurnStats is what the writer did during the churn scrapes.
type ChurnStats struct {
	Rate    float64        `json:"rate_per_second"` // asked for
	Seconds float64        `json:"seconds"`
	Writes  map[string]int `json:"writes"` // by kind, succeeded
	Errors  int            `json:"errors"`
}

type churner struct {
	client kubernetes.Interface
	rate   float64
	pods   []types.NamespacedName
	claims []types.NamespacedName
	events []*corev1.Event // templates
	next   atomic.Int64    // position in the cluster's objects, across runs
}

func newChurner(client kubernetes.Interface, c *bench.Cluster, rate float64) *churner {
	ch := &churner{client: client, rate: rate, events: c.Events}
	for _, p := range c.Pods {
		ch.pods = append(ch.pods, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	for _, rc := range c.Claims {
		ch.claims = append(ch.claims, types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name})
	}
	return ch
}

// start writes at the rate until stop is called, which returns the stats.
func (ch *churner) start(ctx context.Context) (stop func() ChurnStats) {
	ctx, cancel := context.WithCancel(ctx)
	limiter := flowcontrol.NewTokenBucketRateLimiter(float32(ch.rate), 1)
	var mu sync.Mutex
	stats := ChurnStats{Rate: ch.rate, Writes: map[string]int{}}
	var wg sync.WaitGroup
	begin := time.Now()
	// A few writers, so that one slow request does not lower the rate.
	for range 4 {
		wg.Go(func() {
			for {
				if err := limiter.Wait(ctx); err != nil {
					return
				}
				kind, err := ch.write(ctx)
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				if err != nil {
					stats.Errors++
				} else {
					stats.Writes[kind]++
				}
				mu.Unlock()
			}
		})
	}
	return func() ChurnStats {
		cancel()
		wg.Wait()
		stats.Seconds = time.Since(begin).Seconds()
		return stats
	}
}

// write does the next write of the mix.
func (ch *churner) write(ctx context.Context) (string, error) {
	k := ch.next.Add(1)
	kind := churnMix[int(k)%len(churnMix)]
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.dra-exporter.io/churn":"%d"}}}`, k)
	switch kind {
	case "pod":
		p := ch.pods[int(k)%len(ch.pods)]
		_, err := ch.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return kind, err
	case "claim":
		c := ch.claims[int(k)%len(ch.claims)]
		_, err := ch.client.ResourceV1().ResourceClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return kind, err
	default:
		if len(ch.events) == 0 {
			return kind, fmt.Errorf("no event templates")
		}
		tmpl := ch.events[int(k)%len(ch.events)]
		e := tmpl.DeepCopy()
		e.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s.churn%d", tmpl.Name, k), Namespace: tmpl.Namespace}
		now := metav1.Now()
		e.FirstTimestamp, e.LastTimestamp, e.Count = now, now, 1
		_, err := ch.client.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		return kind, err
	}
}
