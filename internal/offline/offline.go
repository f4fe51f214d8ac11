// Package offline builds the exporter's index from objects read from files:
// the snapshot and explain commands and the golden tests share it
// (collector.Render prints the exposition).
package offline

import (
	"fmt"

	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// Build reads the files into a new index. Objects are trimmed exactly as the
// informers trim them, and added as not live (no latencies are observed).
func Build(paths []string, trimmer objects.Trimmer, cfg index.Config) (*index.Index, []objects.Problem, error) {
	objs, problems, err := objects.LoadFiles(paths)
	if err != nil {
		return nil, nil, err
	}
	ix := index.New(cfg)
	for _, obj := range objs {
		if err := ix.Upsert(trimmer.Trim(obj), false); err != nil {
			return nil, nil, fmt.Errorf("index: %w", err)
		}
	}
	return ix, problems, nil
}
