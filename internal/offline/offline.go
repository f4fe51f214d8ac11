// Package offline builds the exporter's index from objects read from files:
// the snapshot and explain commands and the golden tests share it
// (engine.Render prints the exposition). A file may be an evidence
// bundle (dra-exporter bundle): its objects are read.
package offline

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// ErrNothingRead is Build's error when the files hold no object of a kind
// the exporter reads: an empty exposition would read as a healthy cluster.
var ErrNothingRead = errors.New("no object dra-exporter reads (DeviceClass, ResourceSlice, ResourceClaim, DeviceTaintRule, Pod, Node, Event) could be read")

// Build reads the files into a new index. Objects are trimmed exactly as the
// informers trim them, and added as not live (no latencies are observed).
// The objects it skipped are returned with the error when none was read
// (ErrNothingRead), so that the caller can say why.
func Build(paths []string, trimmer objects.Trimmer, cfg index.Config) (*index.Index, []objects.Problem, error) {
	objs, problems, err := Load(paths)
	if err != nil {
		return nil, nil, err
	}
	if len(objs) == 0 {
		why := "the files hold no object"
		if len(problems) > 0 {
			why = fmt.Sprintf("%d objects skipped, listed above", len(problems))
		}
		return nil, problems, fmt.Errorf("%w from %s (%s)", ErrNothingRead, strings.Join(paths, ", "), why)
	}
	ix := index.New(cfg)
	for _, obj := range objs {
		if err := ix.Upsert(trimmer.Trim(obj), false); err != nil {
			return nil, nil, fmt.Errorf("index: %w", err)
		}
	}
	return ix, problems, nil
}

// Load reads the objects of the files, and of the objects folder of every
// bundle among them.
func Load(paths []string) ([]runtime.Object, []objects.Problem, error) {
	var objs []runtime.Object
	var problems []objects.Problem
	var plain []string
	for _, p := range paths {
		if !bundle.Is(p) {
			plain = append(plain, p)
			continue
		}
		b, err := bundle.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range b.Under(bundle.ObjectsDir) {
			o, pr, err := objects.Load(p+":"+m.Path, bytes.NewReader(m.Data))
			if err != nil {
				return nil, nil, err
			}
			objs = append(objs, o...)
			problems = append(problems, pr...)
		}
	}
	o, pr, err := objects.LoadFiles(plain)
	if err != nil {
		return nil, nil, err
	}
	return append(objs, o...), append(problems, pr...), nil
}
