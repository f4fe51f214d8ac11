package gpufake

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// Machine is a running simulated node. DCGM() and NVML() are its two
// libraries; Step applies the spec's next step.
type Machine struct {
	mu   sync.Mutex
	spec Spec
	step int
	// hang is closed when the hang clears.
	hang chan struct{}

	// DCGM's host engine.
	generation int // bumped by a restart: older connections are invalid
	initCount  int // go-dcgm's Init counter (api.go ~23-45)
	conn       *conn

	// NVML.
	nvmlRefs int
	events   []xidEvent
	// xidAt is the step of each entity's last XID (its sample time).
	xidAt map[string]int64

	// Calls counts the library calls made, by name (tests).
	Calls map[string]int
}

// xidEvent is an XID the driver reports for a GPU; gi is the GPU instance
// it is attributable to, or -1 (nvml.h:3497-3502: 0xFFFFFFFF otherwise).
type xidEvent struct {
	uuid string
	gi   int
	code uint64
}

// New starts a machine from its spec.
func New(spec Spec) *Machine {
	m := &Machine{spec: spec, Calls: map[string]int{}, xidAt: map[string]int64{}}
	if spec.Hang {
		m.hang = make(chan struct{})
	}
	return m
}

// Steps is the number of steps of the spec.
func (m *Machine) Steps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.spec.Steps)
}

// Step applies the next step; it reports false when there is none.
func (m *Machine) Step() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.step >= len(m.spec.Steps) {
		return "", false
	}
	st := m.spec.Steps[m.step]
	m.step++
	if st.RestartHostEngine {
		m.generation++
		m.conn = nil
	}
	if st.DCGM != nil {
		d := *st.DCGM
		m.spec.DCGM = &d
	}
	if st.GPUs != nil {
		m.spec.GPUs = st.GPUs
	}
	for _, x := range st.XIDs {
		m.xid(x)
	}
	if st.Hang != nil {
		m.setHang(*st.Hang)
	}
	return st.Comment, true
}

// xid records an XID of a GPU or of a MIG instance (by its UUID): an
// event for NVML, a sample for DCGM on the GPU or on the instance's
// compute instance.
func (m *Machine) xid(x XID) {
	for i := range m.spec.GPUs {
		g := &m.spec.GPUs[i]
		if g.UUID == x.UUID {
			m.events = append(m.events, xidEvent{uuid: g.UUID, gi: -1, code: x.Code})
			g.Fields = cloneFields(g.Fields)
			g.Fields["DCGM_FI_DEV_XID_ERRORS"] = float64(x.Code)
			m.xidAt[g.UUID] = int64(m.step)
			return
		}
		for j := range g.MIG {
			in := &g.MIG[j]
			if in.UUID != x.UUID {
				continue
			}
			m.events = append(m.events, xidEvent{uuid: g.UUID, gi: in.GI, code: x.Code})
			in.Fields = cloneFields(in.Fields)
			in.Fields["DCGM_FI_DEV_XID_ERRORS"] = float64(x.Code)
			for _, di := range dcgmInstances(g.Index, g) {
				if di.spec.UUID == in.UUID {
					m.xidAt[fmt.Sprintf("%s/%d", g.UUID, di.entity%maxMigDevices)] = int64(m.step)
				}
			}
			return
		}
	}
}

// SetHang makes every library call block (true) or releases them.
func (m *Machine) SetHang(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setHang(on)
}

func (m *Machine) setHang(on bool) {
	switch {
	case on && m.hang == nil:
		m.hang = make(chan struct{})
	case !on && m.hang != nil:
		close(m.hang)
		m.hang = nil
	}
}

// enter counts a call and blocks while the machine hangs: a GPU that stops
// answering, or a library call stuck in the driver, returns when (if
// ever) the driver does. DCGM knows the case as an NVML driver timeout
// (dcgm_structs.h ~405, DCGM_ST_NVML_DRIVER_TIMEOUT), which its own calls
// into NVML wait out; the caller's call does not return meanwhile.
func (m *Machine) enter(call string) {
	m.mu.Lock()
	m.Calls[call]++
	h := m.hang
	m.mu.Unlock()
	if h != nil {
		<-h
	}
}

func cloneFields(in map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}

// value reads a field of a GPU or instance spec: its value and whether it
// has one.
func value(fields map[string]float64, id gpu.FieldID) (float64, bool) {
	f, ok := gpu.FieldByID(id)
	if !ok {
		return 0, false
	}
	v, ok := fields[f.Name]
	return v, ok
}

// instances returns a GPU's instances in NVML's GPU instance order.
func instances(g *GPUSpec) []MIGSpec {
	out := slices.Clone(g.MIG)
	sort.Slice(out, func(i, j int) bool { return out[i].GI < out[j].GI })
	return out
}

// dcgmInstances numbers a GPU's instances as DCGM does: it walks the
// profile table in index order and the instances of each profile, and
// gives the n-th instance found the entity ID gpuId * maxGpcs + n
// (DcgmCacheManager.cpp ~936-943). Creating or destroying an instance
// renumbers the others.
func dcgmInstances(gpuID int, g *GPUSpec) []dcgmInstance {
	var out []dcgmInstance
	for _, p := range h100Profiles {
		for _, in := range instances(g) {
			ip, _ := profileByName(in.Profile)
			if ip.index != p.index {
				continue
			}
			out = append(out, dcgmInstance{entity: uint(gpuID*maxMigDevices + len(out)), spec: in, profile: ip})
		}
	}
	return out
}

type dcgmInstance struct {
	entity  uint
	spec    MIGSpec
	profile profile
}

var errLibNotFound = errors.New("libdcgm.so.4 not found")

// findGPU returns the GPU spec with this DCGM ID (its index).
func (m *Machine) gpuByID(id uint) (*GPUSpec, bool) {
	for i := range m.spec.GPUs {
		if m.spec.GPUs[i].Index == int(id) {
			return &m.spec.GPUs[i], true
		}
	}
	return nil, false
}

func (m *Machine) gpuByUUID(uuid string) (*GPUSpec, bool) {
	for i := range m.spec.GPUs {
		if m.spec.GPUs[i].UUID == uuid {
			return &m.spec.GPUs[i], true
		}
	}
	return nil, false
}

// Libraries returns both libraries of the machine.
func (m *Machine) Libraries() (gpu.DCGMLib, gpu.NVMLLib) { return m.DCGM(), m.NVML() }

// Open starts the machine of a file.
func Open(path string) (*Machine, error) {
	spec, err := Load(path)
	if err != nil {
		return nil, err
	}
	return New(*spec), nil
}

// Address is the nv-hostengine address the agent is given ("" embedded).
func (m *Machine) Address() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spec.DCGM == nil {
		return ""
	}
	return m.spec.DCGM.Address
}

// Clock is a clock the test moves: the sources' reconnect backoff reads it
// (gpu.Options.Now), so that a step "a minute later" needs no waiting.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock on.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
