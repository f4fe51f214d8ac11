package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets span 10 ms to 10 min: allocation takes ~100 ms on a
// healthy cluster, a stuck release minutes.
var latencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

var (
	allocationDuration = family.New("dra_claim_allocation_duration_seconds", family.TypeHistogram,
		"Time from a claim's creation to its allocation, in seconds.",
		"device_class").Liveness().
		WithDoc("Timed by the exporter's clock when it sees the allocation as it happens. An allocation it did not see (the claim was created and allocated while the watch was down, or between the process start and its initial list) is recovered from the claim's own timestamps, metadata.creationTimestamp to status.allocation.allocationTimestamp (second resolution; set by the scheduler since Kubernetes 1.37), when that is after the process started; never twice, whatever relists and restarts follow. Never for claims allocated before the exporter started.")
	releaseDuration = family.New("dra_claim_release_duration_seconds", family.TypeHistogram,
		"Time from the end of a pod to its claim releasing it, per stage, in seconds.",
		"device_class", "stage").Liveness().
		WithDoc("The end of a pod is its finish or deletion. stage unreserved: removed from status.reservedFor; deallocated: allocation removed or claim deleted, timed from the end of its last pod. Observed only as the exporter sees it happen: the API records neither when a pod was deleted nor when a claim let go of it, so a release that happened while the watch was down (found by a relist) is not observed.")
	podStartupDuration = family.New("dra_pod_startup_duration_seconds", family.TypeHistogram,
		"Time from a GPU pod's creation to each startup stage, per lane, in seconds.",
		"lane", "stage").Liveness().
		WithDoc("Stages claim_created, allocated, bound, started, ready, each timed from the pod's creation. A stage the exporter sees reached live is timed by its clock; one reached while the watch was down, or before the initial list, is recovered from timestamps when that is after the process started, once: claim_created from the latest creationTimestamp of the pod's claims, allocated from their latest allocationTimestamp, bound from the PodScheduled condition's lastTransitionTime, started from the earliest startedAt of its containers, ready from the Ready condition's lastTransitionTime. A stage whose timestamp is missing is then not observed.")
)

// Latency records lifecycle durations; it implements index.Observer and
// prometheus.Collector.
type Latency struct {
	allocation *prometheus.HistogramVec
	release    *prometheus.HistogramVec
	startup    *prometheus.HistogramVec
}

// NewLatency returns empty latency histograms.
func NewLatency() *Latency {
	vec := func(d *family.Def) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: latencyBuckets}, d.Labels)
	}
	return &Latency{allocation: vec(allocationDuration), release: vec(releaseDuration), startup: vec(podStartupDuration)}
}

// Defs lists the latency families.
func (l *Latency) Defs() []*family.Def {
	return []*family.Def{allocationDuration, releaseDuration, podStartupDuration}
}

// ObserveAllocation implements index.Observer.
func (l *Latency) ObserveAllocation(class string, d time.Duration) {
	l.allocation.WithLabelValues(class).Observe(d.Seconds())
}

// ObserveRelease implements index.Observer.
func (l *Latency) ObserveRelease(class, stage string, d time.Duration) {
	l.release.WithLabelValues(class, stage).Observe(d.Seconds())
}

// ObservePodStartup implements index.Observer.
func (l *Latency) ObservePodStartup(lane, stage string, d time.Duration) {
	l.startup.WithLabelValues(lane, stage).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (l *Latency) Describe(ch chan<- *prometheus.Desc) {
	l.allocation.Describe(ch)
	l.release.Describe(ch)
	l.startup.Describe(ch)
}

// Collect implements prometheus.Collector.
func (l *Latency) Collect(ch chan<- prometheus.Metric) {
	l.allocation.Collect(ch)
	l.release.Collect(ch)
	l.startup.Collect(ch)
}
