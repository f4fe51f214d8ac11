// Package selfmetrics holds the informer layer's own health metrics, which
// the cluster exporter and the node agent share: events, watch errors and
// health, relists, rejected objects, index rebuilds, the API server probe.
package selfmetrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

var (
	informerSynced = family.New("dra_exporter_informer_synced", family.TypeGauge,
		"Whether the informer of a resource has completed its initial list (1) or not (0).",
		"resource").Liveness().
		WithDoc("Until every informer has synced, /metrics carries only the exporter's own families (a partial index would read as leaks and empty classes) and /readyz fails.")
	eventsTotal = family.New("dra_exporter_events_total", family.TypeCounter,
		"Watch events the exporter processed, per resource and type (add, update, delete).",
		"resource", "type").Liveness()
	watchErrors = family.New("dra_exporter_watch_errors_total", family.TypeCounter,
		"Errors listing or watching a resource, by reason.",
		"resource", "reason").Liveness().
		WithDoc("Every error the informers' list and watch calls meet, each also logged: `unreachable` (refused, reset, timed out: calls then wait for the API server probe instead of client-go's growing backoff), `expired` (410 Gone: the watch's resourceVersion was compacted, a relist follows), `unauthorized` (401), `forbidden` (403), `not_found` (404: resource not served), `throttled` (429), `server_error` (5xx), `other`. Every reason is exported from the start, at 0. The exporter keeps serving its last known state meanwhile; dra_exporter_watch_healthy says which resources are stale.")
	watchHealthy = family.New("dra_exporter_watch_healthy", family.TypeGauge,
		"Whether the exporter holds a resource as the API server has it now (1), or serves a stale copy (0).",
		"resource").Liveness().
		WithDoc("1 while a watch is open and the index has every object of the list it resumed from; 0 from the moment a watch breaks (the API server goes away, 410 Gone, a list fails) until a watch is open again and, when it had to relist, the whole relist is in the index; also 0 before the initial list. While any resource is 0, dra_pod_blocked, dra_claim_reservation_leak, dra_device_allocation_conflict and the gate families (dra_pod_gate, dra_pod_ready, dra_negative_control) are held at the last scrape every resource was current for (dra_exporter_verdicts_held): a verdict computed from a fresh resource and a stale one (pods back, claims not yet) would page for nothing. The other families serve what each resource last said.")
	watchStaleSeconds = family.New("dra_exporter_watch_stale_seconds", family.TypeGauge,
		"Seconds since the exporter last held a resource as the API server has it, 0 while it does.",
		"resource").Liveness()
	relists = family.New("dra_exporter_relists_total", family.TypeCounter,
		"Lists of a resource after its initial list, when a watch could not resume from where it broke.",
		"resource").Liveness().
		WithDoc("After 410 Gone (an etcd compaction, or an API server restarted without the watch's events). Each relist's changes reach the index as one batch; latencies of the transitions it reveals are timed from the objects' own timestamps (see the latency families).")
	verdictsHeld = family.New("dra_exporter_verdicts_held", family.TypeGauge,
		"Whether the verdict families are held at their last consistent state (1) while a resource is stale.").Liveness().
		WithDoc("The verdict families are dra_pod_blocked, dra_claim_reservation_leak, dra_device_allocation_conflict, the gate families dra_pod_gate, dra_pod_ready and dra_negative_control, and dra_pod_lower_priority_holders, which the blocked collector also writes.")
	indexRebuilds = family.New("dra_exporter_index_rebuilds_total", family.TypeCounter,
		"Rebuilds of the index from the informers' caches after an update panicked half-way.").Liveness().
		WithDoc("The change that panicked is rejected (dra_exporter_objects_rejected_total) and the exporter serves its last snapshot until the index is rebuilt; /readyz fails meanwhile.")
	apiServerUp = family.New("dra_exporter_apiserver_up", family.TypeGauge,
		"Whether the API server answered the exporter's last /readyz probe (1) or not (0).").Liveness().
		WithDoc("While it is 0 the exporter serves its last known state.")
	shardInfo = family.New("dra_exporter_shard_info", family.TypeGauge,
		"The shard of the cluster this exporter serves, when the exporter is sharded.",
		"shard", "total_shards").Liveness().
		WithDoc("Only with --total-shards above 1. Shard N serves the namespaces whose FNV-1a 32 hash mod total_shards is N; shard 0 also serves the cluster-scoped families and the latency histograms. count(dra_exporter_shard_info) below total_shards means a shard is missing. Always 1.")
	resourceServed = family.New("dra_exporter_resource_served", family.TypeGauge,
		"Whether the API server serves a resource the exporter reads (1) or not (0), as discovery said at startup.",
		"resource").Liveness().
		WithDoc("Asked once, at startup, of the discovery of resource.k8s.io/v1; pods, nodes and events (core/v1) are always 1. A resource at 0 is not watched and nothing is said from it: devicetaintrules before Kubernetes 1.37 (device taints then come from ResourceSlices alone, and no verdict names a DeviceTaintRule). deviceclasses, resourceslices or resourceclaims at 0 mean a cluster older than 1.34, which the exporter does not support: their informers never sync and /metrics carries only the self-metrics. The resource.k8s.io series are absent when discovery failed at startup: every resource is then watched, and dra_exporter_watch_errors_total{reason=\"not_found\"} names one that is not served. A cluster upgraded under a running exporter is asked again when the exporter restarts. Fields a release leaves off by default (partitionable devices, consumable capacity, binding conditions and device taints before 1.36) are dropped by the API server, so the exporter, like the scheduler, sees none: README.md's Kubernetes versions.")
	objectsRejected = family.New("dra_exporter_objects_rejected_total", family.TypeCounter,
		"Objects the index could not use, per resource.",
		"resource").Liveness()
)

// WatchErrorReasons are the values of dra_exporter_watch_errors_total's
// reason label (internal/kube classifies the errors; a test holds the two
// lists equal).
var WatchErrorReasons = []string{"unreachable", "expired", "unauthorized", "forbidden", "not_found", "throttled", "server_error", "other"}

// Self holds the exporter's own health metrics. It implements
// prometheus.Collector and the informer layer's event recorder.
type Self struct {
	events   *prometheus.CounterVec
	errors   *prometheus.CounterVec
	relists  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	rebuilds prometheus.Counter
	up       prometheus.Gauge
	now      func() time.Time

	mu      sync.Mutex
	synced  map[string]func() bool
	watches map[string]func() (bool, time.Time)
	served  map[string]bool
	held    func() bool
	shard   shard.Shard
}

// NewSelf returns the self-metrics.
func NewSelf() *Self {
	return &Self{
		events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: eventsTotal.Name, Help: eventsTotal.Help}, eventsTotal.Labels),
		errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: watchErrors.Name, Help: watchErrors.Help}, watchErrors.Labels),
		relists:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: relists.Name, Help: relists.Help}, relists.Labels),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: objectsRejected.Name, Help: objectsRejected.Help}, objectsRejected.Labels),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: indexRebuilds.Name, Help: indexRebuilds.Help}),
		up:       prometheus.NewGauge(prometheus.GaugeOpts{Name: apiServerUp.Name, Help: apiServerUp.Help}),
		now:      time.Now,
		synced:   map[string]func() bool{},
		watches:  map[string]func() (bool, time.Time){},
		served:   map[string]bool{},
	}
}

// Defs lists the self families.
func (s *Self) Defs() []*family.Def {
	return []*family.Def{informerSynced, eventsTotal, watchErrors, watchHealthy, watchStaleSeconds, relists, objectsRejected,
		indexRebuilds, verdictsHeld, apiServerUp, shardInfo, resourceServed}
}

// WithClock sets the clock of dra_exporter_watch_stale_seconds (tests).
func (s *Self) WithClock(now func() time.Time) *Self {
	s.now = now
	return s
}

// TrackHeld registers whether the verdict families are held (see
// Exporter.HoldVerdictsWhen).
func (s *Self) TrackHeld(held func() bool) {
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
}

// SetShard records the exporter's shard; unsharded, no series is emitted.
func (s *Self) SetShard(sh shard.Shard) {
	s.mu.Lock()
	s.shard = sh
	s.mu.Unlock()
}

// Event counts one processed watch event.
func (s *Self) Event(resource, typ string) { s.events.WithLabelValues(resource, typ).Inc() }

// WatchError counts one list/watch failure.
func (s *Self) WatchError(resource, reason string) { s.errors.WithLabelValues(resource, reason).Inc() }

// Relisted counts a list after the initial one.
func (s *Self) Relisted(resource string) { s.relists.WithLabelValues(resource).Inc() }

// IndexRebuilt counts a rebuild of the index after a write panicked.
func (s *Self) IndexRebuilt() { s.rebuilds.Inc() }

// TrackWatch registers a resource's watch state: whether it is current,
// and since when that holds.
func (s *Self) TrackWatch(resource string, state func() (healthy bool, since time.Time)) {
	s.mu.Lock()
	s.watches[resource] = state
	s.mu.Unlock()
}

// Served records whether the API server serves a resource (discovery).
func (s *Self) Served(resource string, served bool) {
	s.mu.Lock()
	s.served[resource] = served
	s.mu.Unlock()
}

// APIServerUp records the outcome of the last API server probe.
func (s *Self) APIServerUp(up bool) { s.up.Set(family.BoolFloat(up)) }

// Rejected counts an object the index refused.
func (s *Self) Rejected(resource string) { s.rejected.WithLabelValues(resource).Inc() }

// TrackSynced registers a resource's informer; its counters start at zero
// so that absent and zero are not confused.
func (s *Self) TrackSynced(resource string, synced func() bool) {
	s.mu.Lock()
	s.synced[resource] = synced
	s.mu.Unlock()
	for _, t := range []string{"add", "update", "delete"} {
		s.events.WithLabelValues(resource, t)
	}
	for _, reason := range WatchErrorReasons {
		s.errors.WithLabelValues(resource, reason)
	}
	s.relists.WithLabelValues(resource)
}

// Describe implements prometheus.Collector.
func (s *Self) Describe(ch chan<- *prometheus.Desc) {
	ch <- informerSynced.Desc()
	ch <- watchHealthy.Desc()
	ch <- watchStaleSeconds.Desc()
	ch <- verdictsHeld.Desc()
	ch <- resourceServed.Desc()
	s.events.Describe(ch)
	s.errors.Describe(ch)
	s.relists.Describe(ch)
	s.rejected.Describe(ch)
	s.rebuilds.Describe(ch)
	s.up.Describe(ch)
	ch <- shardInfo.Desc()
}

// Collect implements prometheus.Collector.
func (s *Self) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	for resource, synced := range s.synced {
		ch <- prometheus.MustNewConstMetric(informerSynced.Desc(), prometheus.GaugeValue, family.BoolFloat(synced()), resource)
	}
	now := s.now()
	for resource, state := range s.watches {
		healthy, since := state()
		stale := 0.0
		if !healthy {
			stale = max(now.Sub(since).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(watchHealthy.Desc(), prometheus.GaugeValue, family.BoolFloat(healthy), resource)
		ch <- prometheus.MustNewConstMetric(watchStaleSeconds.Desc(), prometheus.GaugeValue, stale, resource)
	}
	for resource, served := range s.served {
		ch <- prometheus.MustNewConstMetric(resourceServed.Desc(), prometheus.GaugeValue, family.BoolFloat(served), resource)
	}
	if s.held != nil {
		ch <- prometheus.MustNewConstMetric(verdictsHeld.Desc(), prometheus.GaugeValue, family.BoolFloat(s.held()))
	}
	sh := s.shard
	s.mu.Unlock()
	if sh.Sharded() {
		ch <- prometheus.MustNewConstMetric(shardInfo.Desc(), prometheus.GaugeValue, 1, strconv.Itoa(sh.Index), strconv.Itoa(sh.Total))
	}
	s.events.Collect(ch)
	s.errors.Collect(ch)
	s.relists.Collect(ch)
	s.rejected.Collect(ch)
	s.rebuilds.Collect(ch)
	s.up.Collect(ch)
}
