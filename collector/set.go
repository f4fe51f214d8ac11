// Package collector holds the cluster exporter's collectors, one concern per
// file: each reads the same index snapshot, taken once per scrape by the
// engine (internal/engine), and emits gauge series of the families it
// defines (internal/family). Collectors never call the API server.
package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
)

// Config shapes the cluster collectors.
type Config struct {
	// AttributeLabels are the device attributes exported on dra_device_info.
	AttributeLabels []AttributeLabel
	// PodLabels is the allowlist of pod label keys for dra_pod_labels.
	PodLabels []string
	// UnreservedGrace is how long an allocated claim may reserve nobody
	// before it counts as leaked.
	UnreservedGrace time.Duration
	// NegativeControl marks the pods that are negative controls.
	NegativeControl ControlLabel
}

// ClusterCollectors returns the cluster exporter's collectors, in the order
// their families appear in the metrics reference.
func ClusterCollectors(cfg Config) []engine.Collector {
	// One memo serves every verdict family: the gates read the blocked
	// pods' verdicts (one walk of the tree serves both), and the leaks,
	// conflicts and capacity are kept beside them.
	memo := classify.NewMemo(cfg.NegativeControl.Matches)
	return []engine.Collector{
		NewDeviceCollector(cfg.AttributeLabels),
		deviceClassCollector{memo: memo},
		NewClaimCollector(),
		blockedCollector{memo: memo},
		leakCollector{grace: cfg.UnreservedGrace, memo: memo},
		conflictCollector{memo: memo},
		NewHeldCollector(),
		laneCollector{memo: memo},
		NewPodCollector(cfg.PodLabels),
		NewGateCollector(memo),
		// Last: ahead of the blocked collector it made a claim change's
		// scrape at 100k claims 10-50% slower (the memo's readers then
		// shared the two processors in another order); last, as before
		// (bench/README.md, 2026-12-07).
		NewClaimDeviceCollector(),
	}
}
