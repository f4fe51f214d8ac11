package main

// Churn: a live cluster changes between scrapes. While the churn scrapes
// run, a writer changes objects through the API at a set rate, as kubelets,
// drivers and controllers do: a running pod's Ready condition flips (a
// failing readiness probe, then a passing one), a driver reports an
// allocated device's status on its claim, kubelets post Warning events, and
// a controller annotates a claim (which every watcher receives as an update
// of the whole object, though nothing the exporter reads changed). An
// exporter that keeps what did not change is measured on what a change
// costs, not only on an idle cluster.

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

// churnMix is the order writes cycle through: of every six, two readiness
// flips, two new events, one device status, one annotation.
var churnMix = []string{"pod-ready", "event", "claim-device-status", "pod-ready", "event", "claim-annotation"}

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
	// ready are the pods running Ready, allocated the claims with an
	// allocation (and its first device).
	ready     []types.NamespacedName
	allocated []allocatedClaim
	events    []*corev1.Event // templates
	next      atomic.Int64    // writes so far, across runs
}

type allocatedClaim struct {
	types.NamespacedName
	driver, pool, device string
}

func newChurner(client kubernetes.Interface, c *bench.Cluster, rate float64) *churner {
	ch := &churner{client: client, rate: rate, events: c.Events}
	for _, p := range c.Pods {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ch.ready = append(ch.ready, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
			}
		}
	}
	for _, rc := range c.Claims {
		if a := rc.Status.Allocation; a != nil && len(a.Devices.Results) > 0 {
			r := a.Devices.Results[0]
			ch.allocated = append(ch.allocated, allocatedClaim{types.NamespacedName{Namespace: rc.Namespace, Name: rc.Name}, r.Driver, r.Pool, r.Device})
		}
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

// write does the next write of the mix. The k-th write of a kind goes to
// object k mod n of that kind, so a second pass over the pods sets Ready
// back.
func (ch *churner) write(ctx context.Context) (string, error) {
	k := int(ch.next.Add(1))
	kind := churnMix[k%len(churnMix)]
	nth := k / len(churnMix) // the write's turn within its kind
	now := metav1.Now().UTC().Format(time.RFC3339)
	switch kind {
	case "pod-ready":
		if len(ch.ready) == 0 {
			return kind, fmt.Errorf("no ready pods")
		}
		p := ch.ready[nth%len(ch.ready)]
		status := corev1.ConditionFalse
		if (nth/len(ch.ready))%2 == 1 {
			status = corev1.ConditionTrue
		}
		patch := fmt.Appendf(nil, `{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q}]}}`, status, now)
		_, err := ch.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return kind, err
	case "claim-device-status":
		if len(ch.allocated) == 0 {
			return kind, fmt.Errorf("no allocated claims")
		}
		c := ch.allocated[nth%len(ch.allocated)]
		patch := fmt.Appendf(nil, `{"status":{"devices":[{"driver":%q,"pool":%q,"device":%q,"conditions":[{"type":"Ready","status":"True","reason":"Churn","message":"status report %d","lastTransitionTime":%q}]}]}}`,
			c.driver, c.pool, c.device, k, now)
		out, err := ch.client.ResourceV1().ResourceClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if err == nil && len(out.Status.Devices) == 0 {
			err = fmt.Errorf("the API server dropped status.devices of %s (DRAResourceClaimDeviceStatus off?)", c)
		}
		return kind, err
	case "claim-annotation":
		if len(ch.allocated) == 0 {
			return kind, fmt.Errorf("no allocated claims")
		}
		c := ch.allocated[nth%len(ch.allocated)]
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.dra-exporter.io/churn":"%d"}}}`, k)
		_, err := ch.client.ResourceV1().ResourceClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return kind, err
	default:
		if len(ch.events) == 0 {
			return kind, fmt.Errorf("no event templates")
		}
		tmpl := ch.events[nth%len(ch.events)]
		e := tmpl.DeepCopy()
		e.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s.churn%d", tmpl.Name, k), Namespace: tmpl.Namespace}
		t := metav1.Now()
		e.FirstTimestamp, e.LastTimestamp, e.Count = t, t, 1
		_, err := ch.client.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		return kind, err
	}
}
