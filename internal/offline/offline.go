// Package offline runs the exporter's index and collectors over objects read
// from files: the snapshot and explain commands and the golden tests share it.
package offline

import (
	"bytes"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

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

// Render gathers the collector through a pedantic registry (which checks
// every metric against its descriptor) and writes the text exposition.
func Render(c prometheus.Collector) ([]byte, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("register collectors: %w", err)
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode %s: %w", mf.GetName(), err)
		}
	}
	return buf.Bytes(), nil
}
