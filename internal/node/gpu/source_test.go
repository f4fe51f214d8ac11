package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu/gpufake"
)

// clock is the reconnect backoff's clock, moved by the test.
type clock = gpufake.Clock

func opts(c *clock) gpu.Options {
	return gpu.Options{Now: c.Now, Timeout: 2 * time.Second}
}

// standalone are the options of an agent that reads the GPU Operator's
// nv-hostengine: on a MIG node an embedded host engine without
// privileges cannot start.
func standalone(c *clock) gpu.Options {
	o := opts(c)
	o.HostEngine = "nvidia-dcgm.gpu-operator.svc:5555"
	return o
}

const (
	gpu0 = "GPU-a100-0000-0000-0000-000000000000"
	gpu1 = "GPU-a100-0000-0000-0000-000000000001"
	migA = "MIG-aaaa-0000-0000-0000-000000000000"
	migB = "MIG-bbbb-0000-0000-0000-000000000000"
	migC = "MIG-cccc-0000-0000-0000-000000000000"
)

func busy(util, power float64) map[string]float64 {
	return map[string]float64{
		"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": 1000, "DCGM_FI_DEV_FB_FREE": 80559, "DCGM_FI_DEV_FB_TOTAL": 81559,
		"DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_DEV_GPU_TEMP": 50, "DCGM_FI_DEV_SM_CLOCK": 1410,
		"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 2, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5, "DCGM_FI_PROF_SM_ACTIVE": 0.4, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.3, "DCGM_FI_PROF_DRAM_ACTIVE": 0.2,
	}
}

func instanceFields(used float64, gr float64) map[string]float64 {
	return map[string]float64{"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": 9984 - used, "DCGM_FI_DEV_FB_TOTAL": 9984, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gr}
}

func twoGPUs() []gpufake.GPUSpec {
	return []gpufake.GPUSpec{
		{UUID: gpu0, Product: "NVIDIA A100-SXM4-80GB", Index: 0, Fields: busy(87, 310), Processes: []gpufake.ProcessSpec{{PID: 100, UsedMemoryBytes: 1 << 30}}},
		{UUID: gpu1, Product: "NVIDIA A100-SXM4-80GB", Index: 1, Fields: busy(3, 70)},
	}
}

func read(t *testing.T, s gpu.Source) *gpu.Reading {
	t.Helper()
	r, err := s.Read(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return r
}

func entity(t *testing.T, r *gpu.Reading, uuid string) gpu.Entity {
	t.Helper()
	for _, e := range r.Entities {
		if e.UUID == uuid {
			return e
		}
	}
	t.Fatalf("no entity %s in %+v", uuid, r.Entities)
	return gpu.Entity{}
}

func group(r *gpu.Reading, name string) gpu.GroupStatus {
	for _, g := range r.Groups {
		if g.Name == name {
			return g
		}
	}
	return gpu.GroupStatus{}
}

// Defect 1: a profiling watch that fails (A100 without CAP_SYS_ADMIN,
// another client holding the profiling lock) must not take the basic
// fields with it: the host engine undoes every watch of a failed request.
func TestProfilingFailureKeepsBasicFields(t *testing.T) {
	for _, c := range []struct{ profiling, reason string }{
		{"requires_root", gpu.ReasonNoPermission},
		{"held", gpu.ReasonProfilingModule},
		{"unsupported", gpu.ReasonUnsupported},
	} {
		t.Run(c.profiling, func(t *testing.T) {
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{Profiling: c.profiling}, NVML: true, GPUs: twoGPUs()})
			src := gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
			defer src.Close()
			r := read(t, src)
			e := entity(t, r, gpu0)
			if e.Values[gpu.FieldGPUUtil] != 87 || e.Values[gpu.FieldPowerUsage] != 310 || e.Values[gpu.FieldFBUsed] != 1000 {
				t.Errorf("basic fields lost with profiling %s: %v", c.profiling, e.Values)
			}
			if _, ok := e.Values[gpu.FieldProfGrEngine]; ok {
				t.Errorf("profiling field present although its watch failed: %v", e.Values)
			}
			if g := group(r, gpu.GroupBasic); !g.Watched {
				t.Errorf("basic group %+v, want watched", g)
			}
			if g := group(r, gpu.GroupProfiling); g.Watched || g.Reason != c.reason {
				t.Errorf("profiling group %+v, want unwatched, reason %s", g, c.reason)
			}
		})
	}
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: twoGPUs()})
	src := gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
	defer src.Close()
	r := read(t, src)
	if e := entity(t, r, gpu0); e.Values[gpu.FieldProfGrEngine] != 0.5 {
		t.Errorf("profiling free: GR_ENGINE_ACTIVE %v, want 0.5", e.Values)
	}
	if g := group(r, gpu.GroupProfiling); !g.Watched {
		t.Errorf("profiling group %+v, want watched", g)
	}
}

// An embedded host engine without privileges cannot start on a node with
// a MIG-enabled GPU (DCGM needs root and NVML's privileged instance
// calls): auto serves NVML and says why DCGM does not; with privileges,
// or through the GPU Operator's privileged nv-hostengine, DCGM serves.
func TestEmbeddedDCGMOnMIGNode(t *testing.T) {
	a := gpufake.MIGSpec{UUID: migA, GI: 3, Profile: "1g.10gb", Fields: instanceFields(1000, 0.1)}
	for _, c := range []struct {
		name       string
		privileged bool
		o          func(*clock) gpu.Options
		want       string
		reason     string
	}{
		{"embedded unprivileged", false, opts, gpu.SourceNVML, gpu.UnavailableEmbeddedMIG},
		{"embedded privileged", true, opts, gpu.SourceDCGM, ""},
		{"standalone", false, standalone, gpu.SourceDCGM, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, Privileged: c.privileged, GPUs: []gpufake.GPUSpec{migGPU(a)}})
			src := gpu.NewAuto(m.DCGM(), m.NVML(), c.o(gpufake.NewClock(time.Time{})))
			defer src.Close()
			r := read(t, src)
			if r.Source != c.want {
				t.Fatalf("served by %s, want %s", r.Source, c.want)
			}
			if e := entity(t, r, migA); e.Values[gpu.FieldFBUsed] != 1000 {
				t.Errorf("instance memory %v", e.Values)
			}
			var dcgm gpu.CandidateStatus
			for _, cs := range src.Candidates() {
				if cs.Source == gpu.SourceDCGM {
					dcgm = cs
				}
			}
			if (dcgm.State == gpu.StateServing) != (c.want == gpu.SourceDCGM) || dcgm.Reason != c.reason {
				t.Errorf("dcgm candidate %+v, want serving %v, reason %q", dcgm, c.want == gpu.SourceDCGM, c.reason)
			}
		})
	}
}

// Hopper and later profile through GPM: neither another DCGM holding the
// profiling hardware nor a host engine without root keeps them from it.
func TestProfilingThroughGPM(t *testing.T) {
	for _, mode := range []string{"held", "requires_root"} {
		g := twoGPUs()
		for i := range g {
			g[i].Product = "NVIDIA H100 80GB HBM3"
		}
		m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{Profiling: mode}, NVML: true, GPUs: g})
		src := gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
		r := read(t, src)
		if st := group(r, gpu.GroupProfiling); !st.Watched || entity(t, r, gpu0).Values[gpu.FieldProfGrEngine] != 0.5 {
			t.Errorf("H100, profiling %s: %+v %v, want watched", mode, st, entity(t, r, gpu0).Values)
		}
		src.Close()
	}
}

// Profiling is tried again later: the lock's holder may go away.
func TestProfilingRetriedWhenTheLockIsFree(t *testing.T) {
	clk := gpufake.NewClock(time.Time{})
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{Profiling: "held"}, NVML: true, GPUs: twoGPUs(),
		Steps: []gpufake.Step{{DCGM: &gpufake.DCGMSpec{}}}})
	src := gpu.NewDCGM(m.DCGM(), m.NVML(), opts(clk))
	defer src.Close()
	read(t, src)
	m.Step()
	clk.Add(time.Minute)
	if g := group(read(t, src), gpu.GroupProfiling); g.Watched {
		t.Errorf("profiling watched again after a minute: %+v, want after 5m", g)
	}
	clk.Add(5 * time.Minute)
	r := read(t, src)
	if g := group(r, gpu.GroupProfiling); !g.Watched {
		t.Errorf("profiling %+v, want watched once the lock is free", g)
	}
	if e := entity(t, r, gpu0); e.Values[gpu.FieldProfSMActive] != 0.4 {
		t.Errorf("SM_ACTIVE %v", e.Values)
	}
}

// Defect 2: DCGM is initialised again after its connection is lost
// (nv-hostengine restarted) or when it was not there at start.
func TestReconnect(t *testing.T) {
	clk := gpufake.NewClock(time.Time{})
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{Down: true}, NVML: true, GPUs: twoGPUs(), Steps: []gpufake.Step{
		{Comment: "nv-hostengine starts", DCGM: &gpufake.DCGMSpec{}},
		{Comment: "nv-hostengine restarts", RestartHostEngine: true},
	}})
	src := gpu.NewDCGM(m.DCGM(), m.NVML(), gpu.Options{HostEngine: "nvidia-dcgm:5555", Now: clk.Now, Timeout: 2 * time.Second})
	defer src.Close()
	if _, err := src.Read(context.Background()); err == nil {
		t.Fatal("read with nv-hostengine down: want an error")
	}
	m.Step()
	if _, err := src.Read(context.Background()); err == nil {
		t.Fatal("read before the backoff passed: want an error")
	}
	clk.Add(10 * time.Second)
	if e := entity(t, read(t, src), gpu0); e.Values[gpu.FieldGPUUtil] != 87 {
		t.Fatalf("after nv-hostengine started: %v", e.Values)
	}
	m.Step()
	if _, err := src.Read(context.Background()); err == nil {
		t.Fatal("read on the lost connection: want an error")
	}
	if e := entity(t, read(t, src), gpu0); e.Values[gpu.FieldGPUUtil] != 87 {
		t.Fatalf("after the restart: %v", e.Values)
	}
	if n := m.Calls["Init"]; n != 3 {
		t.Errorf("Init called %d times, want 3 (down, up, after the restart)", n)
	}
}

func migGPU(instances ...gpufake.MIGSpec) gpufake.GPUSpec {
	board := busy(0, 250)
	delete(board, "DCGM_FI_DEV_GPU_UTIL")
	board["DCGM_FI_DEV_XID_ERRORS"] = 0
	return gpufake.GPUSpec{UUID: gpu0, Product: "NVIDIA H100 80GB HBM3", Index: 0, MIGEnabled: true, Fields: board, MIG: instances}
}

// Defect 3: DCGM renumbers GPU-instance entities on every MIG change; the
// agent reads the hierarchy again and keys instances by UUID, so no
// instance's values land under another's UUID, new instances are watched
// and their processes are theirs.
func TestMIGReconfigurationBetweenReads(t *testing.T) {
	a := gpufake.MIGSpec{UUID: migA, GI: 3, Profile: "1g.10gb", Placement: 0, Fields: instanceFields(1000, 0.1)}
	b := gpufake.MIGSpec{UUID: migB, GI: 4, Profile: "1g.10gb", Placement: 1, Fields: instanceFields(2000, 0.2)}
	c := gpufake.MIGSpec{UUID: migC, GI: 1, Profile: "3g.40gb", Placement: 4, Fields: map[string]float64{"DCGM_FI_DEV_FB_USED": 30000, "DCGM_FI_DEV_FB_FREE": 10320, "DCGM_FI_DEV_FB_TOTAL": 40320, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9},
		Processes: []gpufake.ProcessSpec{{PID: 4242, UsedMemoryBytes: 30 << 30}}}
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: []gpufake.GPUSpec{migGPU(a, b)},
		Steps: []gpufake.Step{{Comment: "A destroyed, C created", GPUs: []gpufake.GPUSpec{migGPU(b, c)}}}})
	src := gpu.NewDCGM(m.DCGM(), m.NVML(), standalone(gpufake.NewClock(time.Time{})))
	defer src.Close()
	r := read(t, src)
	if e := entity(t, r, migB); e.Values[gpu.FieldFBUsed] != 2000 {
		t.Fatalf("before: B FB_USED %v", e.Values)
	}
	m.Step()
	r = read(t, src)
	if e := entity(t, r, migB); e.Values[gpu.FieldFBUsed] != 2000 || e.Values[gpu.FieldProfGrEngine] != 0.2 {
		t.Errorf("after the change B reads %v: another instance's values under its UUID", e.Values)
	}
	e := entity(t, r, migC)
	if e.Values[gpu.FieldFBUsed] != 30000 || e.MIG == nil || e.MIG.Profile != "3g.40gb" {
		t.Errorf("new instance C: %+v", e)
	}
	if len(e.Processes) != 1 || e.Processes[0].PID != 4242 {
		t.Errorf("C's process: %+v", e.Processes)
	}
	if p := entity(t, r, gpu0); len(p.Processes) != 0 {
		t.Errorf("the parent GPU lists an instance's processes: %+v", p.Processes)
	}
	for _, e := range r.Entities {
		if e.UUID == migA {
			t.Errorf("destroyed instance A still read: %+v", e)
		}
	}
}

// Defect 4: an instance carries only its own fields; the board's power,
// temperature, clock, ECC and XID stay on the GPU.
func TestBoardFieldsStayOnTheGPU(t *testing.T) {
	a := gpufake.MIGSpec{UUID: migA, GI: 3, Profile: "1g.10gb", Fields: instanceFields(1000, 0.1)}
	for _, source := range []string{gpu.SourceDCGM, gpu.SourceNVML} {
		t.Run(source, func(t *testing.T) {
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: []gpufake.GPUSpec{migGPU(a)}})
			var src gpu.Source = gpu.NewDCGM(m.DCGM(), m.NVML(), standalone(gpufake.NewClock(time.Time{})))
			if source == gpu.SourceNVML {
				src = gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
			}
			defer src.Close()
			r := read(t, src)
			in := entity(t, r, migA)
			for id := range in.Values {
				if f, _ := gpu.FieldByID(id); !f.Instance {
					t.Errorf("instance carries the board's %s = %v", f.Name, in.Values[id])
				}
			}
			if in.Values[gpu.FieldFBUsed] != 1000 {
				t.Errorf("instance FB_USED %v", in.Values)
			}
			if p := entity(t, r, gpu0); p.Values[gpu.FieldPowerUsage] != 250 {
				t.Errorf("board power %v", p.Values)
			}
		})
	}
}

// Defect 7: the last XID reads 0 until the first XID (DCGM has no sample
// of it: blank, NO_DATA), then the XID's code; NVML through its events.
func TestLastXID(t *testing.T) {
	for _, source := range []string{gpu.SourceDCGM, gpu.SourceNVML} {
		t.Run(source, func(t *testing.T) {
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: twoGPUs(),
				Steps: []gpufake.Step{{XIDs: []gpufake.XID{{UUID: gpu1, Code: 48}}}}})
			var src gpu.Source = gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
			if source == gpu.SourceNVML {
				src = gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
			}
			defer src.Close()
			x, ok := entity(t, read(t, src), gpu1).Values[gpu.FieldXIDErrors]
			if !ok || x != 0 {
				t.Errorf("before any XID: %v (present %v), want 0", x, ok)
			}
			m.Step()
			if x := entity(t, read(t, src), gpu1).Values[gpu.FieldXIDErrors]; x != 48 {
				t.Errorf("after XID 48: %v", x)
			}
		})
	}
}

// A MIG instance's XID is the instance's: DCGM stores it on the compute
// instance, NVML reports it with the GPU instance ID (to privileged
// callers only). The GPU's last XID stays 0; the instance reads the code.
func TestMIGInstanceXID(t *testing.T) {
	for _, c := range []struct {
		source     string
		privileged bool
	}{{gpu.SourceDCGM, false}, {gpu.SourceNVML, true}, {gpu.SourceNVML, false}} {
		t.Run(fmt.Sprintf("%s/privileged=%v", c.source, c.privileged), func(t *testing.T) {
			a := gpufake.MIGSpec{UUID: migA, GI: 3, Profile: "1g.10gb", Fields: instanceFields(1000, 0.1)}
			b := gpufake.MIGSpec{UUID: migB, GI: 4, Profile: "1g.10gb", Placement: 1, Fields: instanceFields(1000, 0.1)}
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{Address: "nvidia-dcgm:5555"}, NVML: true, Privileged: c.privileged,
				GPUs: []gpufake.GPUSpec{migGPU(a, b)}, Steps: []gpufake.Step{{XIDs: []gpufake.XID{{UUID: migB, Code: 43}}}}})
			o := opts(gpufake.NewClock(time.Time{}))
			o.HostEngine = "nvidia-dcgm:5555"
			var src gpu.Source = gpu.NewDCGM(m.DCGM(), m.NVML(), o)
			if c.source == gpu.SourceNVML {
				src = gpu.NewNVML(m.NVML(), o)
			}
			defer src.Close()
			read(t, src)
			m.Step()
			r := read(t, src)
			if x := entity(t, r, gpu0).Values[gpu.FieldXIDErrors]; x != 0 {
				t.Errorf("the GPU's last XID %v, want 0 (the XID is the instance's)", x)
			}
			x, ok := entity(t, r, migB).Values[gpu.FieldXIDErrors]
			switch {
			case c.source == gpu.SourceNVML && !c.privileged:
				if ok {
					t.Errorf("unprivileged NVML: instance XID %v, want none (NVML does not report it)", x)
				}
			case x != 43:
				t.Errorf("instance B's last XID %v (present %v), want 43", x, ok)
			}
			if x := entity(t, r, migA).Values[gpu.FieldXIDErrors]; x != 0 {
				t.Errorf("instance A's last XID %v, want 0", x)
			}
		})
	}
}

// Defect 7: MIG profile names are the driver's (+me, its memory rounding),
// found without NVML's privileged calls; placements need them.
func TestProfileNames(t *testing.T) {
	me := gpufake.MIGSpec{UUID: migA, GI: 3, Profile: "1g.10gb+me", Placement: 2, Fields: instanceFields(1000, 0.1)}
	plain := gpufake.MIGSpec{UUID: migB, GI: 4, Profile: "1g.10gb", Placement: 3, Fields: instanceFields(1000, 0.1)}
	big := gpufake.MIGSpec{UUID: migC, GI: 5, Profile: "1g.20gb", Placement: 4, Fields: instanceFields(1000, 0.1)}
	for _, privileged := range []bool{false, true} {
		t.Run(fmt.Sprintf("privileged=%v", privileged), func(t *testing.T) {
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, Privileged: privileged, GPUs: []gpufake.GPUSpec{migGPU(me, plain, big)}})
			src := gpu.NewDCGM(m.DCGM(), m.NVML(), standalone(gpufake.NewClock(time.Time{})))
			defer src.Close()
			r := read(t, src)
			for uuid, want := range map[string]string{migA: "1g.10gb+me", migB: "1g.10gb", migC: "1g.20gb"} {
				e := entity(t, r, uuid)
				if e.MIG.Profile != want {
					t.Errorf("%s: profile %q, want %q", uuid, e.MIG.Profile, want)
				}
				wantStart := -1
				if privileged {
					wantStart = map[string]int{migA: 2, migB: 3, migC: 4}[uuid]
				}
				if e.MIG.PlacementStart != wantStart {
					t.Errorf("%s: placement %d, want %d", uuid, e.MIG.PlacementStart, wantStart)
				}
			}
		})
	}
}

// Defect 7: NVML's "not available" (all ones) is no memory figure.
func TestProcessMemoryNotAvailable(t *testing.T) {
	g := twoGPUs()
	g[0].Processes = []gpufake.ProcessSpec{{PID: 7, MemoryNotAvailable: true}, {PID: 8, UsedMemoryBytes: 5 << 20}}
	m := gpufake.New(gpufake.Spec{NVML: true, GPUs: g})
	src := gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
	defer src.Close()
	ps := entity(t, read(t, src), gpu0).Processes
	if len(ps) != 2 || !ps[0].MemoryUnknown || ps[0].UsedMemoryBytes != 0 || ps[1].MemoryUnknown || ps[1].UsedMemoryBytes != 5<<20 {
		t.Errorf("processes %+v", ps)
	}
}

// Defect 7: a hung call answers the scrape with an error within the
// timeout, later reads fail at once while it hangs, and the source serves
// again when it returns.
func TestHungCall(t *testing.T) {
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: twoGPUs()})
	// A timeout long enough that "at once" (below) is told from it on a
	// loaded machine under the race detector.
	src := gpu.NewDCGM(m.DCGM(), m.NVML(), gpu.Options{Timeout: time.Second})
	defer src.Close()
	read(t, src)
	m.SetHang(true)
	start := time.Now()
	_, err := src.Read(context.Background())
	if !errors.Is(err, gpu.ErrHung) || time.Since(start) > 5*time.Second {
		t.Fatalf("hung read: %v after %s, want ErrHung within the timeout", err, time.Since(start))
	}
	start = time.Now()
	if _, err := src.Read(context.Background()); !errors.Is(err, gpu.ErrHung) || time.Since(start) > 500*time.Millisecond {
		t.Errorf("read while hung: %v after %s, want ErrHung at once", err, time.Since(start))
	}
	m.SetHang(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := src.Read(context.Background())
		if err == nil {
			if entity(t, r, gpu0).Values[gpu.FieldGPUUtil] != 87 {
				t.Errorf("after the hang: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after the hang cleared: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Defect 7: a lost GPU is reported lost, its values gone; the source and
// the other GPUs still serve.
func TestLostGPU(t *testing.T) {
	for _, source := range []string{gpu.SourceDCGM, gpu.SourceNVML} {
		t.Run(source, func(t *testing.T) {
			g := twoGPUs()
			lost := twoGPUs()
			lost[1].Lost = true
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: g, Steps: []gpufake.Step{{Comment: "XID 79", GPUs: lost}}})
			var src gpu.Source = gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
			if source == gpu.SourceNVML {
				src = gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
			}
			defer src.Close()
			read(t, src)
			m.Step()
			r := read(t, src)
			if e := entity(t, r, gpu1); !e.Lost || len(e.Values) != 0 {
				t.Errorf("lost GPU: %+v", e)
			}
			if e := entity(t, r, gpu0); e.Lost || e.Values[gpu.FieldGPUUtil] != 87 {
				t.Errorf("the other GPU: %+v", e)
			}
		})
	}
}

// One GPU NVML counts but cannot open (NO_PERMISSION on its handle, or
// GPU_IS_LOST) leaves the other GPUs served; one an earlier session named
// is reported lost under its UUID after the source opens again.
func TestOneBadGPU(t *testing.T) {
	for _, source := range []string{gpu.SourceDCGM, gpu.SourceNVML} {
		t.Run(source+"/no_permission", func(t *testing.T) {
			g := twoGPUs()
			g[1].NoPermission = true
			m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: g})
			var src gpu.Source = gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
			if source == gpu.SourceNVML {
				src = gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
			}
			defer src.Close()
			r := read(t, src)
			if e := entity(t, r, gpu0); e.Lost || e.Values[gpu.FieldGPUUtil] != 87 {
				t.Errorf("the healthy GPU: %+v", e)
			}
			for _, e := range r.Entities {
				if e.UUID == gpu1 || e.UUID == "" {
					t.Errorf("a GPU nobody could name reported: %+v", e)
				}
			}
		})
	}
	t.Run("dcgm/lost_then_reconnect", func(t *testing.T) {
		lost := twoGPUs()
		lost[1].Lost = true
		m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: twoGPUs(), Steps: []gpufake.Step{
			{Comment: "GPU 1 falls off the bus; nv-hostengine restarts", GPUs: lost, RestartHostEngine: true}}})
		src := gpu.NewDCGM(m.DCGM(), m.NVML(), gpu.Options{HostEngine: "nvidia-dcgm:5555", Now: gpufake.NewClock(time.Time{}).Now, Timeout: 2 * time.Second})
		defer src.Close()
		read(t, src)
		m.Step()
		if _, err := src.Read(context.Background()); err == nil {
			t.Fatal("read on the lost connection: want an error")
		}
		r := read(t, src)
		if e := entity(t, r, gpu0); e.Lost || e.Values[gpu.FieldGPUUtil] != 87 {
			t.Errorf("the healthy GPU: %+v", e)
		}
		if e := entity(t, r, gpu1); !e.Lost || len(e.Values) != 0 {
			t.Errorf("the lost GPU: %+v, want lost without values", e)
		}
	})
}

// NVML serves where DCGM cannot start; DCGM takes over once it can.
func TestAutoPrefersDCGM(t *testing.T) {
	clk := gpufake.NewClock(time.Time{})
	m := gpufake.New(gpufake.Spec{NVML: true, GPUs: twoGPUs(), Steps: []gpufake.Step{{Comment: "DCGM installed", DCGM: &gpufake.DCGMSpec{}}}})
	src := gpu.NewAuto(m.DCGM(), m.NVML(), opts(clk))
	defer src.Close()
	r := read(t, src)
	if r.Source != gpu.SourceNVML || src.Name() != gpu.SourceNVML {
		t.Fatalf("without DCGM: source %s (%s), want nvml", r.Source, src.Name())
	}
	e := entity(t, r, gpu0)
	if e.Values[gpu.FieldGPUUtil] != 87 || e.Values[gpu.FieldFBUsed] != 1000 || e.Values[gpu.FieldPowerUsage] != 310 ||
		e.Values[gpu.FieldSMClock] != 1410 || e.Values[gpu.FieldGPUTemp] != 50 || e.Values[gpu.FieldECCSBEVolTotal] != 2 {
		t.Errorf("NVML basic fields: %v", e.Values)
	}
	if g := group(r, gpu.GroupProfiling); g.Watched || g.Reason != gpu.ReasonUnsupported {
		t.Errorf("NVML profiling group %+v", g)
	}
	m.Step()
	clk.Add(2 * time.Minute)
	r = read(t, src)
	if r.Source != gpu.SourceDCGM || src.Name() != gpu.SourceDCGM {
		t.Errorf("with DCGM installed: source %s, want dcgm", r.Source)
	}
	if entity(t, r, gpu0).Values[gpu.FieldProfGrEngine] != 0.5 {
		t.Errorf("DCGM profiling: %v", entity(t, r, gpu0).Values)
	}
}

// Without either library the source reports itself unavailable and keeps
// its configured name.
func TestNoLibrary(t *testing.T) {
	m := gpufake.New(gpufake.Spec{GPUs: twoGPUs()})
	src := gpu.NewAuto(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{})))
	defer src.Close()
	_, err := src.Read(context.Background())
	if err == nil || src.Name() != gpu.SourceAuto {
		t.Errorf("read %v, name %s", err, src.Name())
	}
	src2 := gpu.NewAuto(nil, nil, opts(gpufake.NewClock(time.Time{})))
	if _, err := src2.Read(context.Background()); !errors.Is(err, gpu.ErrUnavailable) {
		t.Errorf("no libraries in this build: %v", err)
	}
}

// Used memory means the same on both sources: DCGM reads NVML's version-2
// memory, which leaves the driver's reserved memory out; NVML's version 1
// counts it as used.
func TestMemoryMeansTheSameOnBothSources(t *testing.T) {
	g := twoGPUs()
	g[0].ReservedMiB = 512
	g[0].Fields["DCGM_FI_DEV_FB_FREE"] = 81559 - 512 - 1000 // total = reserved + free + used (nvml.h:272-279)
	m := gpufake.New(gpufake.Spec{DCGM: &gpufake.DCGMSpec{}, NVML: true, GPUs: g})
	for _, src := range []gpu.Source{
		gpu.NewDCGM(m.DCGM(), m.NVML(), opts(gpufake.NewClock(time.Time{}))),
		gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{}))),
	} {
		r := read(t, src)
		e := entity(t, r, gpu0)
		if e.Values[gpu.FieldFBUsed] != 1000 || e.Values[gpu.FieldFBTotal] != 81559 || e.Values[gpu.FieldFBFree] != 80047 {
			t.Errorf("%s: memory used %v, total %v, free %v; want 1000, 81559, 80047 MiB", r.Source,
				e.Values[gpu.FieldFBUsed], e.Values[gpu.FieldFBTotal], e.Values[gpu.FieldFBFree])
		}
		src.Close()
	}
}

// The driver lists only the processes of the caller's PID namespace: an
// agent without hostPID sees none of the pods' processes, while the GPU's
// memory still counts them.
func TestProcessesPerPIDNamespace(t *testing.T) {
	for _, own := range []bool{false, true} {
		m := gpufake.New(gpufake.Spec{NVML: true, OwnPIDNamespace: own, GPUs: twoGPUs()})
		src := gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
		e := entity(t, read(t, src), gpu0)
		if want := map[bool]int{false: 1, true: 0}[own]; len(e.Processes) != want || e.Values[gpu.FieldFBUsed] != 1000 {
			t.Errorf("own PID namespace %v: %d processes, memory used %v; want %d, 1000", own, len(e.Processes), e.Values[gpu.FieldFBUsed], want)
		}
		src.Close()
	}
}

// Under MPS NVML's compute list has the server; the clients come from the
// MPS process list, marked as clients.
func TestMPSClients(t *testing.T) {
	g := twoGPUs()
	g[0].Processes = []gpufake.ProcessSpec{{PID: 500, UsedMemoryBytes: 256 << 20},
		{PID: 501, UsedMemoryBytes: 4 << 30, MPSClient: true}, {PID: 502, UsedMemoryBytes: 1 << 30, MPSClient: true}}
	m := gpufake.New(gpufake.Spec{NVML: true, GPUs: g})
	src := gpu.NewNVML(m.NVML(), opts(gpufake.NewClock(time.Time{})))
	defer src.Close()
	got := map[int]bool{}
	for _, p := range entity(t, read(t, src), gpu0).Processes {
		got[p.PID] = p.MPSClient
	}
	if len(got) != 3 || got[500] || !got[501] || !got[502] {
		t.Errorf("processes (PID: MPS client) %v, want the server 500 and the clients 501, 502", got)
	}
}
