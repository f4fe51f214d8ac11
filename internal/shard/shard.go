// Package shard assigns namespaces to the exporter's shards. A namespace,
// and every namespaced object in it (claims, pods, events, claim templates),
// belongs to shard fnv1a32(namespace) mod total, so that the joins a series
// needs (claim -> pod -> node, claim -> device) stay inside one shard;
// cluster-scoped series come from shard 0. kube-state-metrics shards by the
// md5 of each object's UID, which would split a claim from its pod.
package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Shard is one exporter's part of the cluster. The zero value, like
// {Index: 0, Total: 1}, is an unsharded exporter that owns everything.
type Shard struct {
	Index int
	Total int
	// assign overrides the namespace hash (tests enumerate assignments).
	assign func(namespace string) int
}

// New returns shard index of total, checking 0 <= index < total.
func New(index, total int) (Shard, error) {
	if total < 1 {
		return Shard{}, fmt.Errorf("total shards must be at least 1, got %d", total)
	}
	if index < 0 || index >= total {
		return Shard{}, fmt.Errorf("shard %d out of range: want 0 <= shard < %d (total shards)", index, total)
	}
	return Shard{Index: index, Total: total}, nil
}

// WithAssignment is New with the namespace hash replaced by assign, whose
// results are taken mod total. For tests.
func WithAssignment(index, total int, assign func(namespace string) int) (Shard, error) {
	s, err := New(index, total)
	s.assign = assign
	return s, err
}

// FromPodName reads the shard from a StatefulSet pod's name, whose ordinal
// is its trailing -<ordinal> (dra-exporter-2 is shard 2).
func FromPodName(podName string, total int) (Shard, error) {
	if podName == "" {
		return Shard{}, fmt.Errorf("auto-sharding needs the pod's name in $POD_NAME (the downward API's metadata.name)")
	}
	i := strings.LastIndexByte(podName, '-')
	if i < 0 || i == len(podName)-1 {
		return Shard{}, fmt.Errorf("auto-sharding: pod name %q has no trailing -<ordinal> (is it a StatefulSet pod?)", podName)
	}
	ordinal, err := strconv.Atoi(podName[i+1:])
	if err != nil || ordinal < 0 || podName[i+1] == '+' {
		return Shard{}, fmt.Errorf("auto-sharding: pod name %q has no trailing -<ordinal> (is it a StatefulSet pod?)", podName)
	}
	s, err := New(ordinal, total)
	if err != nil {
		return Shard{}, fmt.Errorf("auto-sharding: pod %q: %w", podName, err)
	}
	return s, nil
}

// Sharded reports whether the cluster is split over more than one exporter.
func (s Shard) Sharded() bool { return s.Total > 1 }

// Of returns the shard a namespace belongs to: FNV-1a (32 bit) of the
// namespace's name, mod the total.
func (s Shard) Of(namespace string) int {
	if !s.Sharded() {
		return 0
	}
	if s.assign != nil {
		return ((s.assign(namespace) % s.Total) + s.Total) % s.Total
	}
	h := fnv.New32a()
	h.Write([]byte(namespace))
	return int(h.Sum32() % uint32(s.Total))
}

// Owns reports whether the namespace's objects and series are this shard's.
func (s Shard) Owns(namespace string) bool { return s.Of(namespace) == s.Index }

// OwnsCluster reports whether this shard emits the cluster-scoped series
// (and those aggregated over all namespaces): shard 0.
func (s Shard) OwnsCluster() bool { return s.Index == 0 }

func (s Shard) String() string {
	if !s.Sharded() {
		return "unsharded"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Total)
}
