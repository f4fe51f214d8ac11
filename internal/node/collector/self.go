package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/selfmetrics"
)

var claimFetchErrors = family.NewSplit("dra_node_claim_fetch_errors_total", family.TypeCounter,
	"Failed gets of the ResourceClaims of the node's pods, by reason (forbidden, error)."+docSep+"forbidden: the agent's ClusterRole lacks get on resourceclaims; error: the API server unreachable or slow. Each fetch round counts each failed claim once; the claim keeps its last known state and its GPUs read from the kubelet. Logged when the error changes.",
	"reason").Liveness()

// Self is the node agent's own health: the exporter's informer and API
// server self-metrics (resources pods, resourceslices, nodes) and the
// failed claim fetches. It implements internal/kube's NodeRecorder.
type Self struct {
	*selfmetrics.Self
	fetch *prometheus.CounterVec
}

// NewSelf returns the agent's self-metrics; the fetch failures' reasons
// start at zero, so that absent and zero are not confused.
func NewSelf(fetchReasons ...string) *Self {
	s := &Self{Self: selfmetrics.NewSelf(),
		fetch: prometheus.NewCounterVec(prometheus.CounterOpts{Name: claimFetchErrors.Name, Help: claimFetchErrors.Help}, claimFetchErrors.Labels)}
	for _, r := range fetchReasons {
		s.fetch.WithLabelValues(r)
	}
	return s
}

// SelfDefs lists the agent's own families beyond the exporter's.
func SelfDefs() []*family.Def { return []*family.Def{claimFetchErrors} }

// ClaimFetchError counts a failed claim get.
func (s *Self) ClaimFetchError(reason string) { s.fetch.WithLabelValues(reason).Inc() }

// Describe implements prometheus.Collector.
func (s *Self) Describe(ch chan<- *prometheus.Desc) {
	s.Self.Describe(ch)
	s.fetch.Describe(ch)
}

// Collect implements prometheus.Collector.
func (s *Self) Collect(ch chan<- prometheus.Metric) {
	s.Self.Collect(ch)
	s.fetch.Collect(ch)
}
