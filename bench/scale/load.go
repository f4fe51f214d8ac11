package main

// The loader: writes a generated cluster (bench.Generate) through the API,
// the way the control plane and kubelets would have written it. Objects are
// created, then their status subresource is written (the scheduler's
// allocation and reservation, the kubelet's pod and node status), because
// the API server drops status on create. Pods are created first so that the
// claims' owner references and reservations carry the UIDs the API server
// assigned.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/bench"
)

// LoadStats says what the loader wrote and how long it took.
type LoadStats struct {
	Objects  int64         `json:"objects"`
	Requests int64         `json:"requests"`
	Duration time.Duration `json:"duration_ns"`
	Workers  int           `json:"workers"`
}

type loader struct {
	client   kubernetes.Interface
	workers  int
	requests atomic.Int64
	objects  atomic.Int64
}

// loaderClient is a protobuf client without client-side rate limiting: the
// admin user is in system:masters, which API Priority and Fairness exempts,
// so the API server's own capacity is the only limit.
func loaderClient(admin *rest.Config) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.UserAgent = "dra-bench-loader"
	return kubernetes.NewForConfig(cfg)
}

// load writes c through the API with the given number of parallel workers.
func load(ctx context.Context, client kubernetes.Interface, c *bench.Cluster, workers int) (LoadStats, error) {
	start := time.Now()
	l := &loader{client: client, workers: workers}
	if err := l.namespaces(ctx, c); err != nil {
		return LoadStats{}, err
	}
	for _, dc := range c.Classes {
		obj := dc.DeepCopy()
		clearServerFields(&obj.ObjectMeta)
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return LoadStats{}, fmt.Errorf("create deviceclass %s: %w", dc.Name, err)
		}
		l.count(1, 1)
	}
	nodeUIDs := make([]types.UID, len(c.Nodes))
	if err := l.parallel(ctx, len(c.Nodes), func(k int) error {
		uid, err := l.node(ctx, c.Nodes[k])
		nodeUIDs[k] = uid
		return err
	}); err != nil {
		return LoadStats{}, err
	}
	if err := l.parallel(ctx, len(c.Slices), func(k int) error { return l.slice(ctx, c.Slices[k], nodeUIDs[k]) }); err != nil {
		return LoadStats{}, err
	}
	if err := l.workloads(ctx, c); err != nil {
		return LoadStats{}, err
	}
	return LoadStats{Objects: l.objects.Load(), Requests: l.requests.Load(), Duration: time.Since(start), Workers: workers}, nil
}

func (l *loader) count(objects, requests int64) {
	l.objects.Add(objects)
	l.requests.Add(requests)
}

// parallel runs fn(0..n-1) on the loader's workers and returns the first
// error.
func (l *loader) parallel(ctx context.Context, n int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(l.workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return nil
}

// namespaces creates every namespace of the cluster and its default service
// account (no controller-manager runs to create it, and the ServiceAccount
// admission plugin rejects pods whose account is missing).
func (l *loader) namespaces(ctx context.Context, c *bench.Cluster) error {
	seen := map[string]bool{}
	for _, p := range c.Pods {
		seen[p.Namespace] = true
	}
	for _, rc := range c.Claims {
		seen[rc.Namespace] = true
	}
	for ns := range seen {
		if _, err := l.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}
		if _, err := l.client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create serviceaccount %s/default: %w", ns, err)
		}
		l.count(2, 2)
	}
	return nil
}

// node creates a node and writes its status as the kubelet does.
func (l *loader) node(ctx context.Context, n *corev1.Node) (types.UID, error) {
	obj := n.DeepCopy()
	clearServerFields(&obj.ObjectMeta)
	for k, v := range obj.Labels {
		// GPU feature discovery writes the product name with dashes
		// ("NVIDIA-H100-80GB-HBM3"): a label value has no spaces.
		obj.Labels[k] = strings.ReplaceAll(v, " ", "-")
	}
	created, err := l.client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create node %s: %w", n.Name, err)
	}
	l.count(1, 1)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		created.Status = n.Status
		_, err := l.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		l.count(0, 1)
		if apierrors.IsConflict(err) {
			if created, err = l.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
				return apierrors.NewConflict(corev1.Resource("nodes"), n.Name, fmt.Errorf("retry"))
			}
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return created.UID, nil
}

// slice creates a ResourceSlice owned by its node, as the driver does.
func (l *loader) slice(ctx context.Context, s *resourceapi.ResourceSlice, nodeUID types.UID) error {
	obj := s.DeepCopy()
	clearServerFields(&obj.ObjectMeta)
	for k := range obj.OwnerReferences {
		obj.OwnerReferences[k].UID = nodeUID
	}
	if _, err := l.client.ResourceV1().ResourceSlices().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create resourceslice %s: %w", s.Name, err)
	}
	l.count(1, 1)
	return nil
}

// workloads writes every claim with its pod and the pod's events. A claim's
// generator index is its position in c.Claims; pods and events name their
// claim, so they are matched by name.
func (l *loader) workloads(ctx context.Context, c *bench.Cluster) error {
	podOf := make(map[string]*corev1.Pod, len(c.Pods)) // by namespace/name
	for _, p := range c.Pods {
		podOf[p.Namespace+"/"+p.Name] = p
	}
	eventsOf := map[string][]*corev1.Event{}
	for _, e := range c.Events {
		k := e.Namespace + "/" + e.InvolvedObject.Name
		eventsOf[k] = append(eventsOf[k], e)
	}
	schedEventsOf := map[string][]*eventsv1.Event{}
	for _, e := range c.SchedulerEvents {
		k := e.Namespace + "/" + e.Regarding.Name
		schedEventsOf[k] = append(schedEventsOf[k], e)
	}
	return l.parallel(ctx, len(c.Claims), func(i int) error {
		rc := c.Claims[i]
		owner := rc.Namespace + "/" + rc.OwnerReferences[0].Name
		pod := podOf[owner]
		uid := rc.OwnerReferences[0].UID // a leak whose pod is gone keeps its generated UID
		if pod != nil {
			var err error
			if uid, err = l.pod(ctx, pod); err != nil {
				return err
			}
		}
		if err := l.claim(ctx, rc, uid); err != nil {
			return err
		}
		if pod == nil {
			return nil
		}
		if err := l.podStatus(ctx, pod); err != nil {
			return err
		}
		for _, e := range eventsOf[owner] {
			obj := e.DeepCopy()
			clearServerFields(&obj.ObjectMeta)
			obj.InvolvedObject.UID = uid
			if _, err := l.client.CoreV1().Events(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create event %s/%s: %w", obj.Namespace, obj.Name, err)
			}
			l.count(1, 1)
		}
		for _, e := range schedEventsOf[owner] {
			obj := e.DeepCopy()
			clearServerFields(&obj.ObjectMeta)
			obj.Regarding.UID = uid
			if _, err := l.client.EventsV1().Events(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create events.k8s.io event %s/%s: %w", obj.Namespace, obj.Name, err)
			}
			l.count(1, 1)
		}
		return nil
	})
}

// pod creates a pod (bound already when the plan binds it: the scheduler's
// binding is one write of spec.nodeName) and returns its UID.
func (l *loader) pod(ctx context.Context, p *corev1.Pod) (types.UID, error) {
	obj := p.DeepCopy()
	clearServerFields(&obj.ObjectMeta)
	obj.Status = corev1.PodStatus{}
	created, err := l.client.CoreV1().Pods(p.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	l.count(1, 1)
	// The generator's pod keeps its UID for the events; the created one is
	// what the status update sends.
	p.UID, p.ResourceVersion = created.UID, created.ResourceVersion
	return created.UID, nil
}

// podStatus writes the kubelet's (and, for pending pods, the scheduler's)
// pod status.
func (l *loader) podStatus(ctx context.Context, p *corev1.Pod) error {
	obj := p.DeepCopy()
	obj.CreationTimestamp = metav1.Time{}
	if _, err := l.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s status: %w", p.Namespace, p.Name, err)
	}
	l.count(0, 1)
	return nil
}

// claim creates a generated claim owned by its pod, then writes the
// scheduler's allocation and reservation.
func (l *loader) claim(ctx context.Context, rc *resourceapi.ResourceClaim, podUID types.UID) error {
	obj := rc.DeepCopy()
	clearServerFields(&obj.ObjectMeta)
	obj.OwnerReferences[0].UID = podUID
	status := obj.Status
	obj.Status = resourceapi.ResourceClaimStatus{}
	created, err := l.client.ResourceV1().ResourceClaims(rc.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create resourceclaim %s/%s: %w", rc.Namespace, rc.Name, err)
	}
	l.count(1, 1)
	if status.Allocation == nil {
		return nil
	}
	for k := range status.ReservedFor {
		status.ReservedFor[k].UID = podUID
	}
	created.Status = status
	if _, err := l.client.ResourceV1().ResourceClaims(rc.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("resourceclaim %s/%s status: %w", rc.Namespace, rc.Name, err)
	}
	l.count(0, 1)
	return nil
}

// clearServerFields drops what the API server sets on create.
func clearServerFields(m *metav1.ObjectMeta) {
	m.UID, m.ResourceVersion, m.CreationTimestamp, m.GenerateName = "", "", metav1.Time{}, ""
}
