package main

import (
	"fmt"

	"github.com/alecthomas/kingpin/v2"
	"github.com/dra-exporter/dra-exporter/internal/shard"
)

// shardFlags split the cluster exporter over replicas by namespace (see
// internal/shard): --shard/--total-shards, or --auto-sharding from a
// StatefulSet pod's ordinal.
type shardFlags struct {
	index, total int
	auto         bool
	// explicit is whether --shard was given, which --auto-sharding refuses.
	explicit bool
}

func (f *shardFlags) register(app *kingpin.Application) {
	app.Flag("shard", "This exporter's shard, 0 <= shard < --total-shards: it serves the namespaces with fnv1a32(namespace) mod total == shard, and shard 0 also the cluster-scoped series.").
		Default("0").IsSetByUser(&f.explicit).IntVar(&f.index)
	app.Flag("total-shards", "How many shards split the cluster (1: unsharded).").
		Default("1").IntVar(&f.total)
	app.Flag("auto-sharding", "Read the shard from $POD_NAME's trailing -<ordinal>, as a StatefulSet names its pods (the total from --total-shards).").
		BoolVar(&f.auto)
}

// resolve returns the shard the flags name; getenv reads $POD_NAME.
func (f *shardFlags) resolve(getenv func(string) string) (shard.Shard, error) {
	if !f.auto {
		s, err := shard.New(f.index, f.total)
		if err != nil {
			return shard.Shard{}, fmt.Errorf("--shard/--total-shards: %w", err)
		}
		return s, nil
	}
	if f.explicit {
		return shard.Shard{}, fmt.Errorf("--auto-sharding reads the shard from $POD_NAME: do not set --shard too")
	}
	if f.total < 1 {
		return shard.Shard{}, fmt.Errorf("--total-shards must be at least 1, got %d", f.total)
	}
	return shard.FromPodName(getenv("POD_NAME"), f.total)
}
