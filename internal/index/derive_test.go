package index_test

import (
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// derived is what a build function of Snapshot.Derive was handed.
type derived struct {
	prev any
	ch   index.Change
}

func derive(s *index.Snapshot, value string) derived {
	var got derived
	s.Derive(func(prev any, ch index.Change) any {
		got = derived{prev, ch}
		return value
	})
	return got
}

// The value derived from a snapshot (the allocator model) is built once,
// and handed to the next snapshot's build with how the two differ, when it
// was built by the time the next snapshot was taken: never an older one,
// whose changes since the index no longer knows.
func TestDeriveHandsOnTheLastValue(t *testing.T) {
	objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...)}
	ix := Build(t, index.Config{}, objs...)
	s1 := ix.Snapshot()
	if got := derive(s1, "first"); got.prev != nil {
		t.Errorf("the first snapshot's build was handed %v", got.prev)
	}
	if v := s1.Derive(func(any, index.Change) any { t.Error("built twice"); return nil }); v != "first" {
		t.Errorf("Derive = %v, want the value built first", v)
	}

	claim := Claim("c", "uid-c", Request("gpu", "gpu.nvidia.com"))
	Upsert(t, ix, Allocated(claim, "node-1", time.Time{}, Result("gpu", "node-1", "gpu-0")), true)
	got := derive(ix.Snapshot(), "second")
	if got.prev != "first" || !got.ch.Claims || got.ch.Devices || got.ch.Nodes {
		t.Errorf("after an allocation: handed %v, %+v; want the first value and claims changed only", got.prev, got.ch)
	}
	if _, ok := got.ch.Allocated[DevKey("node-1", "gpu-0")]; !ok || len(got.ch.Allocated) != 1 {
		t.Errorf("after an allocation: allocations changed on %v, want node-1/gpu-0 only", got.ch.Allocated)
	}

	Upsert(t, ix, NotReadyNode("node-1"), true)
	if got := derive(ix.Snapshot(), "third"); got.prev != "second" || !got.ch.Nodes || got.ch.Claims || got.ch.Allocated != nil {
		t.Errorf("after a node's change: handed %v, %+v; want the second value and nodes changed only", got.prev, got.ch)
	}

	// s4's value is not built before s5 is taken: s5's build starts afresh.
	Upsert(t, ix, Slice("node-1", "node-1", 2, gpus("gpu-0", "gpu-1", "gpu-2")...), true)
	s4 := ix.Snapshot()
	Upsert(t, ix, Deallocated(claim), true)
	s5 := ix.Snapshot()
	if got := derive(s4, "fourth"); got.prev != "third" || !got.ch.Devices {
		t.Errorf("after a slice's change: handed %v, %+v; want the third value and devices changed", got.prev, got.ch)
	}
	if got := derive(s5, "fifth"); got.prev != nil {
		t.Errorf("after a snapshot with nothing derived: handed %v, want nothing", got.prev)
	}
}

// The index's kept value outlives its snapshots, not a rebuild: a rebuilt
// index starts a new one.
func TestKeptValueEndsWithARebuild(t *testing.T) {
	objs := []any{GPUClass(), Node("node-1", 0), Slice("node-1", "node-1", 1, gpus("gpu-0")...)}
	ix := Build(t, index.Config{}, objs...)
	first := ix.Snapshot().Kept(func() any { return new(int) })
	Upsert(t, ix, NotReadyNode("node-1"), true)
	if again := ix.Snapshot().Kept(func() any { return new(int) }); again != first {
		t.Error("a new snapshot made the kept value again")
	}
	err := ix.Rebuild(func(add func(any) error) error {
		for _, o := range objs {
			if err := add(o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt := ix.Snapshot().Kept(func() any { return new(int) }); rebuilt == first {
		t.Error("the rebuilt index kept the value of the index before")
	}
}
