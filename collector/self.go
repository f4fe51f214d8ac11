package collector

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/shard"
)

var (
	informerSynced = newDef("dra_exporter_informer_synced", typeGauge,
		"Whether the informer of a resource has completed its initial list (1) or not (0).",
		"resource").live().
		doc("Until every informer has synced, /metrics carries only the exporter's own families (a partial index would read as leaks and empty classes) and /readyz fails.")
	eventsTotal = newDef("dra_exporter_events_total", typeCounter,
		"Watch events the exporter processed, per resource and type (add, update, delete).",
		"resource", "type").live()
	watchErrors = newDef("dra_exporter_watch_errors_total", typeCounter,
		"Errors listing or watching a resource.",
		"resource").live().
		doc("API server unreachable, forbidden, resource not served. The exporter keeps serving its last known state.")
	apiServerUp = newDef("dra_exporter_apiserver_up", typeGauge,
		"Whether the API server answered the exporter's last /readyz probe (1) or not (0).").live().
		doc("While it is 0 the exporter serves its last known state.")
	shardInfo = newDef("dra_exporter_shard_info", typeGauge,
		"The shard of the cluster this exporter serves, when the exporter is sharded.",
		"shard", "total_shards").live().
		doc("Only with --total-shards above 1. Shard N serves the namespaces whose FNV-1a 32 hash mod total_shards is N; shard 0 also serves the cluster-scoped families and the latency histograms. count(dra_exporter_shard_info) below total_shards means a shard is missing. Always 1.")
	objectsRejected = newDef("dra_exporter_objects_rejected_total", typeCounter,
		"Objects the index could not use, per resource.",
		"resource").live()
)

// Self holds the exporter's own health metrics. It implements
// prometheus.Collector and the informer layer's event recorder.
type Self struct {
	events   *prometheus.CounterVec
	errors   *prometheus.CounterVec
	rejected *prometheus.CounterVec
	up       prometheus.Gauge

	mu     sync.Mutex
	synced map[string]func() bool
	shard  shard.Shard
}

// NewSelf returns the self-metrics.
func NewSelf() *Self {
	return &Self{
		events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: eventsTotal.Name, Help: eventsTotal.Help}, eventsTotal.Labels),
		errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: watchErrors.Name, Help: watchErrors.Help}, watchErrors.Labels),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: objectsRejected.Name, Help: objectsRejected.Help}, objectsRejected.Labels),
		up:       prometheus.NewGauge(prometheus.GaugeOpts{Name: apiServerUp.Name, Help: apiServerUp.Help}),
		synced:   map[string]func() bool{},
	}
}

// Defs lists the self families.
func (s *Self) Defs() []*Def {
	return []*Def{informerSynced, eventsTotal, watchErrors, objectsRejected, apiServerUp, shardInfo}
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
func (s *Self) WatchError(resource string) { s.errors.WithLabelValues(resource).Inc() }

// APIServerUp records the outcome of the last API server probe.
func (s *Self) APIServerUp(up bool) { s.up.Set(boolFloat(up)) }

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
	s.errors.WithLabelValues(resource)
}

// Describe implements prometheus.Collector.
func (s *Self) Describe(ch chan<- *prometheus.Desc) {
	ch <- informerSynced.desc
	s.events.Describe(ch)
	s.errors.Describe(ch)
	s.rejected.Describe(ch)
	s.up.Describe(ch)
	ch <- shardInfo.desc
}

// Collect implements prometheus.Collector.
func (s *Self) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	for resource, synced := range s.synced {
		ch <- prometheus.MustNewConstMetric(informerSynced.desc, prometheus.GaugeValue, boolFloat(synced()), resource)
	}
	sh := s.shard
	s.mu.Unlock()
	if sh.Sharded() {
		ch <- prometheus.MustNewConstMetric(shardInfo.desc, prometheus.GaugeValue, 1, strconv.Itoa(sh.Index), strconv.Itoa(sh.Total))
	}
	s.events.Collect(ch)
	s.errors.Collect(ch)
	s.rejected.Collect(ch)
	s.up.Collect(ch)
}
