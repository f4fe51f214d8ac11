package index_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

func upsertLate(t *testing.T, ix *index.Index, obj any) {
	t.Helper()
	if err := ix.UpsertLate(obj); err != nil {
		t.Fatalf("UpsertLate(%T): %v", obj, err)
	}
}

// stamped returns the pod as the kubelet and the scheduler leave it once
// it is ready: bound at bound, its container started at started, Ready at
// ready (each with its timestamp).
func stamped(p *corev1.Pod, node string, bound, started, ready time.Time) *corev1.Pod {
	p = Ready(Bound(p, node))
	for i := range p.Status.Conditions {
		switch p.Status.Conditions[i].Type {
		case corev1.PodScheduled:
			p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(bound)
		case corev1.PodReady:
			p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(ready)
		}
	}
	p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(started)
	return p
}

// A claim created and allocated while the watch was down is first seen
// allocated, in a relist or an initial list: its allocation is timed from
// creationTimestamp to allocationTimestamp when that is after the process
// started, once, whatever relists follow.
func TestLatencyAllocationRecovered(t *testing.T) {
	base := []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...)}
	gpu0 := Result("gpu", "node-1", "gpu-0")
	t.Run("relist after an outage", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Allocated(CreatedAt(Claim("c", "uid-c"), T0.Add(10*time.Second)), "node-1", T0.Add(13*time.Second), gpu0)
		clock.at(40 * time.Second) // the watch came back
		upsertLate(t, ix, c)
		clock.at(50 * time.Second)
		upsertLate(t, ix, c)                // another relist
		Upsert(t, ix, ReservedFor(c), true) // and a live update
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", 3 * time.Second}})
	})
	t.Run("initial list after the process started", func(t *testing.T) {
		// The process starts at T0; its initial list comes a moment later.
		c := Allocated(CreatedAt(Claim("c", "uid-c"), T0.Add(-time.Second)), "node-1", T0, gpu0)
		_, rec, _ := newTracked(t, append(base, c)...)
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", time.Second}})
	})
	t.Run("allocated before the process started", func(t *testing.T) {
		c := Allocated(CreatedAt(Claim("c", "uid-c"), T0.Add(-time.Minute)), "node-1", T0.Add(-time.Second), gpu0)
		ix, rec, clock := newTracked(t, append(base, c)...)
		clock.at(time.Minute)
		upsertLate(t, ix, ReservedFor(c))
		if got := rec.of("allocation"); len(got) != 0 {
			t.Errorf("observed %v for an allocation before the process started", got)
		}
	})
	t.Run("seen pending, allocated during the outage", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := CreatedAt(Claim("c", "uid-c"), T0.Add(time.Second))
		clock.at(ms(1100))
		Upsert(t, ix, c, true)
		clock.at(45 * time.Second)
		upsertLate(t, ix, Allocated(c, "node-1", T0.Add(6*time.Second), gpu0))
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", 5 * time.Second}})
	})
	t.Run("seen pending, allocated during the outage, no timestamp", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c")
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(45 * time.Second)
		upsertLate(t, ix, Allocated(c, "node-1", time.Time{}, gpu0))
		if got := rec.of("allocation"); len(got) != 0 {
			t.Errorf("observed %v: a late change without a timestamp cannot be timed", got)
		}
	})
}

// A pod created and started while the watch was down is first seen ready
// in a relist: every stage its timestamps record is observed from them,
// its claim's stages when the claim arrives (in the relist of another
// informer, before or after the pod's), and nothing twice.
func TestLatencyPodStartupRecovered(t *testing.T) {
	created := T0.Add(10 * time.Second)
	p := PodCreatedAt(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "llm-gpu"), created)
	c := CreatedAt(OwnedBy(Claim("llm-0-gpu-x", "uid-c"), p, "gpu"), created.Add(time.Second))
	c = ReservedFor(Allocated(c, "node-1", created.Add(2*time.Second), Result("gpu", "node-1", "gpu-0")), p)
	p = stamped(WithClaimStatus(p, "gpu", c.Name), "node-1", created.Add(2*time.Second), created.Add(5*time.Second), created.Add(9*time.Second))
	want := []observation{
		startup(index.LaneDRA, index.StageClaimCreated, time.Second),
		startup(index.LaneDRA, index.StageAllocated, 2*time.Second),
		startup(index.LaneDRA, index.StageBound, 2*time.Second),
		startup(index.LaneDRA, index.StageStarted, 5*time.Second),
		startup(index.LaneDRA, index.StageReady, 9*time.Second),
	}
	base := []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...)}
	for _, tc := range []struct {
		name  string
		order []any
	}{
		{"pods relisted first", []any{p, c}},
		{"claims relisted first", []any{c, p}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, rec, clock := newTracked(t, base...)
			clock.at(time.Minute)
			for _, o := range tc.order {
				upsertLate(t, ix, o)
			}
			clock.at(2 * time.Minute)
			for _, o := range tc.order {
				upsertLate(t, ix, o) // a second relist
			}
			Upsert(t, ix, p, true)
			sameObservations(t, "startup", rec.of("startup"), want)
		})
	}
	t.Run("restart: initial list", func(t *testing.T) {
		// The process started at T0, before the pod was created: its
		// initial list recovers the stages as the relist does.
		_, rec, _ := newTracked(t, append(base, p, c)...)
		sameObservations(t, "startup", rec.of("startup"), want)
	})
	t.Run("stages before the process started", func(t *testing.T) {
		// Created before the start, bound before it, started and ready
		// after it: only the later stages are observed.
		early := T0.Add(-3 * time.Second)
		p := PodCreatedAt(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), early)
		p = stamped(p, "dp-node", early.Add(time.Second), T0.Add(2*time.Second), T0.Add(4*time.Second))
		ix, rec, clock := newTracked(t, GPUClass(), Node("dp-node", 8))
		clock.at(time.Minute)
		upsertLate(t, ix, p)
		sameObservations(t, "startup", rec.of("startup"), []observation{
			startup(index.LaneDevicePlugin, index.StageStarted, 5*time.Second),
			startup(index.LaneDevicePlugin, index.StageReady, 7*time.Second),
		})
	})
	t.Run("seen pending, ready during the outage", func(t *testing.T) {
		pending := PodCreatedAt(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), T0)
		ix, rec, clock := newTracked(t, GPUClass(), Node("dp-node", 8))
		clock.at(ms(300))
		Upsert(t, ix, pending, true)
		clock.at(time.Minute)
		upsertLate(t, ix, stamped(pending, "dp-node", T0.Add(time.Second), T0.Add(3*time.Second), T0.Add(8*time.Second)))
		sameObservations(t, "startup", rec.of("startup"), []observation{
			startup(index.LaneDevicePlugin, index.StageBound, time.Second),
			startup(index.LaneDevicePlugin, index.StageStarted, 3*time.Second),
			startup(index.LaneDevicePlugin, index.StageReady, 8*time.Second),
		})
	})
}

// A pod deleted and its claim released while the watch was down: the API
// records neither time, so no release is observed (not the milliseconds
// between two relists).
func TestLatencyReleaseNotRecovered(t *testing.T) {
	p, c, objs := releaseWorld()
	ix, rec, clock := newTracked(t, objs...)
	clock.at(40 * time.Second)
	if err := ix.DeleteLate(cache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name, Obj: p}); err != nil {
		t.Fatal(err)
	}
	clock.at(ms(40010))
	upsertLate(t, ix, unreserved(c))
	clock.at(ms(40020))
	if err := ix.DeleteLate(c); err != nil {
		t.Fatal(err)
	}
	if got := rec.of("release"); len(got) != 0 {
		t.Errorf("observed %v for a release nobody saw", got)
	}
}

// A claim that let go of its pod while the watch was down reserves nobody
// from the relist on, not from its allocation an hour before: the leak
// grace period starts when the exporter saw it.
func TestUnreservedSinceAfterRelist(t *testing.T) {
	_, c, objs := releaseWorld()
	ix, _, clock := newTracked(t, objs...)
	clock.at(time.Minute)
	upsertLate(t, ix, unreserved(c))
	s := ix.Snapshot()
	cl := s.Claim(index.Key{Namespace: c.Namespace, Name: c.Name})
	if cl == nil {
		t.Fatal("claim missing")
	}
	if got := s.UnreservedSince(cl); !got.Equal(T0.Add(time.Minute)) {
		t.Errorf("unreserved since %v, want the relist %v", got, T0.Add(time.Minute))
	}
}

// panicky panics on the first allocation it is given, as a broken
// histogram would: inside the index's write, after the claim maps changed.
type panicky struct {
	recorder
	armed bool
}

func (p *panicky) ObserveAllocation(class string, d time.Duration) {
	if p.armed {
		p.armed = false
		panic("observer broke")
	}
	p.recorder.ObserveAllocation(class, d)
}

// A write that panics half-way poisons the index: snapshots are the last
// one taken before, until Rebuild replaces the contents with what the
// informers hold, which then read exactly as a fresh index of the same
// objects.
func TestPanicPoisonsUntilRebuild(t *testing.T) {
	obs := &panicky{}
	clock := &fakeClock{now: T0}
	cfg := index.Config{Now: clock.Now, Observer: obs, DevicePluginResources: []string{GPUResource}}
	p := WithClaimStatus(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "llm-gpu"), "gpu", "llm-0-gpu")
	c := OwnedBy(Claim("llm-0-gpu", "uid-c"), p, "gpu")
	objs := []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...), p, c}
	ix := Build(t, cfg, objs...)
	clock.at(ms(100))
	Upsert(t, ix, c, true)
	before := ix.Snapshot()

	allocated := ReservedFor(Allocated(c, "node-1", T0, Result("gpu", "node-1", "gpu-0")), p)
	obs.armed = true
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("the observer's panic did not reach the writer")
			}
		}()
		_ = ix.Upsert(allocated, true)
	}()
	if ix.Consistent() {
		t.Fatal("index consistent after a write panicked half-way")
	}
	if got := ix.Snapshot(); got != before {
		t.Fatal("a poisoned index handed out a new snapshot")
	}

	// The informers' caches hold the new claim; the index is rebuilt from
	// them.
	now := []any{objs[0], objs[1], p, allocated}
	if err := ix.Rebuild(func(add func(any) error) error {
		for _, o := range now {
			if err := add(o); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !ix.Consistent() {
		t.Fatal("index not consistent after Rebuild")
	}
	fresh := Build(t, index.Config{Now: clock.Now, DevicePluginResources: []string{GPUResource}}, now...)
	if got, want := render(t, ix), render(t, fresh); got != want {
		t.Errorf("rebuilt index renders\n%s\nwant (a fresh index of the same objects)\n%s", got, want)
	}
	if got := ix.Snapshot().Claims; len(got) != 1 || got[0].Obj.Status.Allocation == nil {
		t.Errorf("rebuilt index holds claims %v, want the allocated one", got)
	}
}

// A failed fill replaces nothing.
func TestRebuildFillError(t *testing.T) {
	ix, _, _ := newTracked(t, GPUClass())
	err := ix.Rebuild(func(add func(any) error) error {
		_ = add(MIGClass())
		return errTest
	})
	if err != errTest {
		t.Fatalf("Rebuild returned %v", err)
	}
	if got := ix.Snapshot().Classes; len(got) != 1 || got[0].Name != GPUClassName {
		t.Errorf("classes after a failed rebuild: %v", got)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("fill failed")

// render is the exposition the cluster collectors write for the index.
func render(t *testing.T, ix *index.Index) string {
	t.Helper()
	x := engine.NewExporter(ix, func() time.Time { return T0.Add(time.Hour) }, false, nil,
		collector.ClusterCollectors(collector.Config{UnreservedGrace: 5 * time.Minute})...)
	out, err := engine.Render(x)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
