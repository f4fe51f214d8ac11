package index_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// observation is one call of the index.Observer.
type observation struct {
	Kind string // allocation, release, startup
	A, B string // class / class,stage / lane,stage
	D    time.Duration
}

func (o observation) String() string {
	return fmt.Sprintf("%s{%s,%s}=%v", o.Kind, o.A, o.B, o.D)
}

type recorder struct{ got []observation }

func (r *recorder) ObserveAllocation(class string, d time.Duration) {
	r.got = append(r.got, observation{"allocation", class, "", d})
}

func (r *recorder) ObserveRelease(class, stage string, d time.Duration) {
	r.got = append(r.got, observation{"release", class, stage, d})
}

func (r *recorder) ObservePodStartup(lane, stage string, d time.Duration) {
	r.got = append(r.got, observation{"startup", lane, stage, d})
}

func (r *recorder) of(kind string) []observation {
	var out []observation
	for _, o := range r.got {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// at sets the clock to t0 + d.
func (c *fakeClock) at(d time.Duration) { c.now = T0.Add(d) }

func newTracked(t *testing.T, objs ...any) (*index.Index, *recorder, *fakeClock) {
	t.Helper()
	rec := &recorder{}
	clock := &fakeClock{now: T0}
	ix := Build(t, index.Config{Now: clock.Now, Observer: rec, DevicePluginResources: []string{GPUResource}}, objs...)
	return ix, rec, clock
}

func sameObservations(t *testing.T, what string, got, want []observation) {
	t.Helper()
	sortObs := func(o []observation) []string {
		out := make([]string, len(o))
		for i, x := range o {
			out[i] = x.String()
		}
		slices.Sort(out)
		return out
	}
	g, w := sortObs(got), sortObs(want)
	if !slices.Equal(g, w) {
		t.Errorf("%s observations:\n got  %s\n want %s", what, strings.Join(g, " "), strings.Join(w, " "))
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestLatencyAllocation(t *testing.T) {
	base := []any{GPUClass(), MIGClass(), Slice("node-1", "node-1", 1, gpus("gpu-0", "gpu-1")...)}
	gpu0 := Result("gpu", "node-1", "gpu-0")

	t.Run("live add, then allocated promptly", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c") // created at t0
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(ms(1500))
		Upsert(t, ix, Allocated(c, "node-1", T0.Add(time.Second), gpu0), true)
		clock.at(ms(1700))
		Upsert(t, ix, ReservedFor(Allocated(c, "node-1", T0.Add(time.Second), gpu0), Pod("p", "uid-p")), true)
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", ms(1400)}})
	})
	t.Run("allocation seen late is timed by the timestamps", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c")
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(10 * time.Second) // the watch was slow
		Upsert(t, ix, Allocated(c, "node-1", T0.Add(time.Second), gpu0), true)
		// creationTimestamp -> allocationTimestamp, not the 9.9s it took
		// to reach us.
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", time.Second}})
	})
	t.Run("without allocation timestamp the observed time stands", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c")
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(10 * time.Second)
		Upsert(t, ix, Allocated(c, "node-1", time.Time{}, gpu0), true)
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", ms(9900)}})
	})
	t.Run("once per class", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c", Request("a", GPUClassName), Request("b", GPUClassName), Request("m", MIGClassName))
		clock.at(ms(200))
		Upsert(t, ix, c, true)
		clock.at(ms(700))
		Upsert(t, ix, Allocated(c, "node-1", T0, gpu0, Result("b", "node-1", "gpu-1"), Result("m", "node-1", "mig-0")), true)
		sameObservations(t, "allocation", rec.of("allocation"), []observation{
			{"allocation", GPUClassName, "", ms(500)},
			{"allocation", MIGClassName, "", ms(500)},
		})
	})
	t.Run("initial list, unallocated, then allocated live", func(t *testing.T) {
		c := CreatedAt(Claim("c", "uid-c"), T0.Add(-5*time.Second))
		ix, rec, clock := newTracked(t, append(base, c)...)
		clock.at(0)
		Upsert(t, ix, Allocated(c, "node-1", T0, gpu0), true)
		// Not a prompt live add: timed from creationTimestamp.
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", GPUClassName, "", 5 * time.Second}})
	})
	t.Run("initial list, already allocated, observes nothing", func(t *testing.T) {
		c := Allocated(CreatedAt(Claim("c", "uid-c"), T0.Add(-time.Hour)), "node-1", T0.Add(-time.Hour), gpu0)
		ix, rec, clock := newTracked(t, append(base, c)...)
		clock.at(time.Minute)
		Upsert(t, ix, ReservedFor(c, Pod("p", "uid-p")), true)
		clock.at(2 * time.Minute)
		Upsert(t, ix, c, true)
		if got := rec.of("allocation"); len(got) != 0 {
			t.Errorf("observed %v for a claim allocated before the exporter saw it", got)
		}
	})
	t.Run("deleted before allocation observes nothing", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c")
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(time.Second)
		Del(t, ix, c)
		clock.at(2 * time.Second)
		// Delivered again, allocated before the process started: not
		// timed from the sighting the delete ended, nor recovered.
		Upsert(t, ix, Allocated(c, "node-1", T0.Add(-time.Second), gpu0), false)
		if got := rec.of("allocation"); len(got) != 0 {
			t.Errorf("observed %v", got)
		}
	})
	// A request with firstAvailable subrequests of two classes is
	// allocated from one of them: only that class waited for a device.
	t.Run("firstAvailable observes the class that was allocated", func(t *testing.T) {
		ix, rec, clock := newTracked(t, base...)
		c := Claim("c", "uid-c", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "full", DeviceClassName: GPUClassName},
			{Name: "half", DeviceClassName: MIGClassName},
		}})
		clock.at(ms(100))
		Upsert(t, ix, c, true)
		clock.at(ms(600))
		Upsert(t, ix, Allocated(c, "node-1", T0, Result("gpu/half", "node-1", "gpu-0-mig-3g20gb-9-0")), true)
		sameObservations(t, "allocation", rec.of("allocation"), []observation{{"allocation", MIGClassName, "", ms(500)}})
	})
}

// releaseWorld: pod llm-0 with a generated claim allocated on gpu-0 and
// reserved for it, from the initial list.
func releaseWorld() (*corev1.Pod, *resourceapi.ResourceClaim, []any) {
	p := Running(Bound(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "tmpl"), "node-1"))
	p = WithClaimStatus(p, "gpu", "llm-0-gpu")
	c := ReservedFor(Allocated(OwnedBy(Claim("llm-0-gpu", "uid-c"), p, "gpu"), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), p)
	return p, c, []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...), p, c}
}

func unreserved(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim { return ReservedFor(c) }

func release(stage string, d time.Duration) observation {
	return observation{"release", GPUClassName, stage, d}
}

func TestLatencyRelease(t *testing.T) {
	t.Run("pod deleted, claim unreserved, then deallocated", func(t *testing.T) {
		p, c, objs := releaseWorld()
		ix, rec, clock := newTracked(t, objs...)
		clock.at(10 * time.Second)
		Del(t, ix, p)
		clock.at(12 * time.Second)
		Upsert(t, ix, unreserved(c), true)
		clock.at(15 * time.Second)
		Upsert(t, ix, Deallocated(c), true)
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, 2*time.Second),
			release(index.StageDeallocated, 5*time.Second),
		})
	})
	t.Run("pod finished, claim unreserved, then claim deleted", func(t *testing.T) {
		p, c, objs := releaseWorld()
		ix, rec, clock := newTracked(t, objs...)
		clock.at(10 * time.Second)
		Upsert(t, ix, Finished(p, corev1.PodSucceeded), true)
		clock.at(ms(10300))
		Upsert(t, ix, unreserved(c), true)
		clock.at(11 * time.Second)
		Del(t, ix, unreserved(c))
		clock.at(20 * time.Second)
		Del(t, ix, p) // the finished pod goes away: no second end
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, ms(300)),
			release(index.StageDeallocated, time.Second),
		})
	})
	t.Run("claim lets go before the pod delete arrives", func(t *testing.T) {
		p, c, objs := releaseWorld()
		ix, rec, clock := newTracked(t, objs...)
		clock.at(10 * time.Second)
		Upsert(t, ix, unreserved(c), true)
		clock.at(11 * time.Second)
		Del(t, ix, p)
		clock.at(12 * time.Second)
		Del(t, ix, p) // a repeated delete (tombstone) is not a second end
		got := rec.of("release")
		sameObservations(t, "release", got, []observation{release(index.StageUnreserved, 0)})
		clock.at(14 * time.Second)
		Upsert(t, ix, Deallocated(c), true)
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, 0),
			release(index.StageDeallocated, 3*time.Second),
		})
	})
	t.Run("shared claim: deallocation timed from the last pod's end", func(t *testing.T) {
		a := Running(Bound(WithNamedClaim(Pod("a", "uid-a"), "gpu", "shared"), "node-1"))
		b := Running(Bound(WithNamedClaim(Pod("b", "uid-b"), "gpu", "shared"), "node-1"))
		c := ReservedFor(Allocated(Claim("shared", "uid-shared"), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), a, b)
		ix, rec, clock := newTracked(t, GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...), a, b, c)
		clock.at(10 * time.Second)
		Upsert(t, ix, Finished(a, corev1.PodFailed), true)
		clock.at(11 * time.Second)
		Upsert(t, ix, ReservedFor(c, b), true)
		clock.at(20 * time.Second)
		Del(t, ix, b)
		clock.at(ms(20500))
		Upsert(t, ix, ReservedFor(c), true)
		clock.at(25 * time.Second)
		Upsert(t, ix, Deallocated(c), true)
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, time.Second),
			release(index.StageUnreserved, ms(500)),
			release(index.StageDeallocated, 5*time.Second),
		})
	})
	t.Run("claim deleted while still reserved", func(t *testing.T) {
		p, c, objs := releaseWorld()
		ix, rec, clock := newTracked(t, objs...)
		clock.at(10 * time.Second)
		Del(t, ix, p)
		clock.at(13 * time.Second)
		Del(t, ix, c)
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, 3*time.Second),
			release(index.StageDeallocated, 3*time.Second),
		})
	})
	t.Run("claim deleted while reserved, before the pod ends", func(t *testing.T) {
		p, c, objs := releaseWorld()
		ix, rec, clock := newTracked(t, objs...)
		clock.at(10 * time.Second)
		Del(t, ix, c)
		clock.at(12 * time.Second)
		Del(t, ix, p)
		sameObservations(t, "release", rec.of("release"), []observation{
			release(index.StageUnreserved, 0),
			release(index.StageDeallocated, 0),
		})
	})
	t.Run("deallocated without a reservation observes nothing", func(t *testing.T) {
		c := Allocated(Claim("idle", "uid-idle"), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0"))
		ix, rec, clock := newTracked(t, GPUClass(), c)
		clock.at(time.Second)
		Upsert(t, ix, Deallocated(c), true)
		if got := rec.of("release"); len(got) != 0 {
			t.Errorf("observed %v", got)
		}
	})
	t.Run("pod already finished at the initial list observes nothing", func(t *testing.T) {
		p, c, objs := releaseWorld()
		objs[2] = Finished(p, corev1.PodSucceeded)
		ix, rec, clock := newTracked(t, objs...)
		clock.at(time.Second)
		Upsert(t, ix, unreserved(c), true)
		clock.at(2 * time.Second)
		Upsert(t, ix, Deallocated(c), true)
		if got := rec.of("release"); len(got) != 0 {
			t.Errorf("observed %v for a pod that ended before the exporter started", got)
		}
	})
}

func startup(lane, stage string, d time.Duration) observation {
	return observation{"startup", lane, stage, d}
}

func TestLatencyPodStartup(t *testing.T) {
	t.Run("dra lane", func(t *testing.T) {
		ix, rec, clock := newTracked(t, GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...))
		p := WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "llm-gpu")
		c := OwnedBy(Claim("llm-0-gpu-x", "uid-c"), p, "gpu")
		gpu0 := Result("gpu", "node-1", "gpu-0")
		clock.at(ms(50))
		Upsert(t, ix, p, true)
		clock.at(ms(500))
		Upsert(t, ix, c, true)
		clock.at(ms(1000))
		Upsert(t, ix, Allocated(c, "node-1", T0.Add(time.Second), gpu0), true)
		clock.at(ms(1200))
		Upsert(t, ix, ReservedFor(Allocated(c, "node-1", T0.Add(time.Second), gpu0), p), true)
		p = Bound(WithClaimStatus(p, "gpu", c.Name), "node-1")
		clock.at(ms(1300))
		Upsert(t, ix, p, true)
		clock.at(3 * time.Second)
		Upsert(t, ix, Running(p), true)
		clock.at(10 * time.Second)
		Upsert(t, ix, Ready(p), true)
		clock.at(20 * time.Second)
		Upsert(t, ix, Ready(p), true)
		sameObservations(t, "startup", rec.of("startup"), []observation{
			startup(index.LaneDRA, index.StageClaimCreated, ms(450)),
			startup(index.LaneDRA, index.StageAllocated, ms(950)),
			startup(index.LaneDRA, index.StageBound, ms(1250)),
			startup(index.LaneDRA, index.StageStarted, ms(2950)),
			startup(index.LaneDRA, index.StageReady, ms(9950)),
		})
	})
	t.Run("device-plugin lane", func(t *testing.T) {
		ix, rec, clock := newTracked(t, GPUClass(), Node("dp-node", 8))
		p := WithLimit(Pod("dp", "uid-dp"), GPUResource, 1)
		clock.at(ms(50))
		Upsert(t, ix, p, true)
		p = Bound(p, "dp-node")
		clock.at(time.Second)
		Upsert(t, ix, p, true)
		clock.at(2 * time.Second)
		Upsert(t, ix, Running(p), true)
		clock.at(4 * time.Second)
		Upsert(t, ix, Ready(p), true)
		sameObservations(t, "startup", rec.of("startup"), []observation{
			startup(index.LaneDevicePlugin, index.StageBound, ms(950)),
			startup(index.LaneDevicePlugin, index.StageStarted, ms(1950)),
			startup(index.LaneDevicePlugin, index.StageReady, ms(3950)),
		})
	})
	t.Run("dra-extended lane", func(t *testing.T) {
		ix, rec, clock := newTracked(t, GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...))
		p := WithLimit(Pod("ext", "uid-ext"), GPUResource, 1)
		c := ExtendedFor(Claim("ext-gpu-1", "uid-e", Request("container-0-request-0", GPUClassName)), p)
		clock.at(ms(50))
		Upsert(t, ix, p, true)
		clock.at(ms(500))
		Upsert(t, ix, c, true)
		clock.at(ms(800))
		Upsert(t, ix, ReservedFor(Allocated(c, "node-1", T0, Result("container-0-request-0", "node-1", "gpu-0")), p), true)
		p = Bound(WithExtendedClaimStatus(p, c.Name), "node-1")
		clock.at(time.Second)
		Upsert(t, ix, p, true)
		clock.at(2 * time.Second)
		Upsert(t, ix, Running(p), true)
		clock.at(5 * time.Second)
		Upsert(t, ix, Ready(p), true)
		sameObservations(t, "startup", rec.of("startup"), []observation{
			startup(index.LaneDRAExtended, index.StageClaimCreated, ms(450)),
			startup(index.LaneDRAExtended, index.StageAllocated, ms(750)),
			startup(index.LaneDRAExtended, index.StageBound, ms(950)),
			startup(index.LaneDRAExtended, index.StageStarted, ms(1950)),
			startup(index.LaneDRAExtended, index.StageReady, ms(4950)),
		})
	})
	t.Run("a pod first seen ready is not timed", func(t *testing.T) {
		ix, rec, clock := newTracked(t, GPUClass(), Node("dp-node", 8))
		p := Ready(Bound(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), "dp-node"))
		clock.at(time.Second)
		Upsert(t, ix, p, true)
		if got := rec.of("startup"); len(got) != 0 {
			t.Errorf("observed %v", got)
		}
	})
}

// After a restart the informers deliver the initial lists of pods and
// claims in either order (separate informers): the stages the pod reached
// before the restart (the process starts at T0) are never observed, the
// later ones are.
func TestLatencyRestartHalfStartedPod(t *testing.T) {
	created := T0.Add(-time.Hour)
	p := PodCreatedAt(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "llm-gpu"), created)
	c := ReservedFor(Allocated(OwnedBy(CreatedAt(Claim("llm-0-gpu-x", "uid-c"), created), p, "gpu"), "node-1", created.Add(2*time.Second), Result("gpu", "node-1", "gpu-0")), p)
	p = Bound(WithClaimStatus(p, "gpu", c.Name), "node-1") // bound, ContainerCreating
	base := []any{GPUClass(), Slice("node-1", "node-1", 1, gpus("gpu-0")...)}
	for _, tc := range []struct {
		name string
		objs []any
	}{
		{"claims listed first", append(slices.Clone(base), c, p)},
		{"pods listed first", append(slices.Clone(base), p, c)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, rec, clock := newTracked(t, tc.objs...)
			clock.at(30 * time.Second)
			Upsert(t, ix, Running(p), true)
			clock.at(40 * time.Second)
			Upsert(t, ix, Ready(p), true)
			sameObservations(t, "startup", rec.of("startup"), []observation{
				startup(index.LaneDRA, index.StageStarted, time.Hour+30*time.Second),
				startup(index.LaneDRA, index.StageReady, time.Hour+40*time.Second),
			})
		})
	}
}

func TestLatencyNilObserver(t *testing.T) {
	ix := index.New(index.Config{Now: func() time.Time { return T0 }})
	p, c, objs := releaseWorld()
	for _, o := range objs {
		Upsert(t, ix, o, true)
	}
	Upsert(t, ix, unreserved(c), true)
	Del(t, ix, p)
	Del(t, ix, c)
}
