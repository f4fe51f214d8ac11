package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/node/procmap"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// Store is the node's view of the API server, trimmed as the informers
// trim (internal/objects).
type Store interface {
	Pods() []*corev1.Pod
	Slices() []*objects.Slice
	// Claims returns the cached claims by ClaimKey.
	Claims() map[string]*resourceapi.ResourceClaim
	// Want asks the store to fetch and keep these claims (ClaimKey) too:
	// the ones the kubelet reports, which the pods may no longer name.
	Want(keys []string)
}

// Kubelet reads the pod-resources API.
type Kubelet interface {
	List(ctx context.Context) (*podresources.Report, error)
}

// Config wires an Agent.
type Config struct {
	Node  string
	Store Store
	// Kubelet nil: pod-resources disabled.
	Kubelet Kubelet
	GPU     gpu.Source
	// Proc nil: process mapping disabled.
	Proc   *procmap.Mapper
	Logger *slog.Logger
	// DevicePluginResources are the device-plugin GPU resources
	// (--device-plugin.resources).
	DevicePluginResources dra.Resources
	// DriverCheckpoint is the NVIDIA DRA driver's checkpoint file
	// (--nvidia.checkpoint-file); empty: not read.
	DriverCheckpoint string
}

// nvidiaDriver is the NVIDIA DRA driver's name, whose devices its
// checkpoint lists.
const nvidiaDriver = "gpu.nvidia.com"

// Step is the outcome of one part of a gather, for the scrape self-metrics.
type Step struct {
	Name     string
	Duration time.Duration
	OK       bool
}

// Agent gathers the inputs at scrape time and joins them.
type Agent struct {
	cfg Config

	mu      sync.Mutex
	lastErr map[string]string
	last    *gpu.Reading
	// slices keeps the last ResourceSlices of a pool the API lost for a
	// while (the kubelet wipes them when it starts).
	slices sliceMemory
}

// New returns an agent.
func New(cfg Config) *Agent {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.GPU == nil {
		cfg.GPU = gpu.None{}
	}
	return &Agent{cfg: cfg, lastErr: map[string]string{}}
}

// Gather reads every source once and joins. A failing source is logged
// when its error changes (not on every scrape) and leaves its part out.
func (a *Agent) Gather(ctx context.Context) (*View, []Step) {
	in := Inputs{Node: a.cfg.Node, DevicePluginResources: a.cfg.DevicePluginResources}
	var steps []Step

	start := time.Now()
	reading, err := safeRead(ctx, a.cfg.GPU)
	in.Source = a.cfg.GPU.Name()
	if c, ok := a.cfg.GPU.(interface{ Candidates() []gpu.CandidateStatus }); ok {
		in.Candidates = c.Candidates()
	}
	a.report("gpu", err, "source", in.Source)
	in.GPU = reading
	a.mu.Lock()
	a.last = reading
	a.mu.Unlock()
	steps = append(steps, Step{Name: "gpu", Duration: time.Since(start), OK: err == nil})

	start = time.Now()
	if a.cfg.Kubelet != nil {
		rep, err := a.cfg.Kubelet.List(ctx)
		a.report("podresources", err)
		in.Kubelet = rep
		steps = append(steps, Step{Name: "podresources", Duration: time.Since(start), OK: err == nil})
	} else {
		a.report("podresources", errors.New("disabled (--kubelet.pod-resources-socket is empty)"))
	}

	start = time.Now()
	in.ProcVisible = a.cfg.Proc != nil && a.cfg.Proc.Visible()
	if in.ProcVisible && reading != nil {
		in.PodOfPID = map[int]string{}
		var lastErr error
		for _, e := range reading.Entities {
			for _, p := range e.Processes {
				uid, err := a.cfg.Proc.PodUID(p.PID)
				if err != nil {
					// A process that exited between the GPU read and
					// now: it is nobody's.
					if !errors.Is(err, procmap.ErrNoProcess) {
						lastErr = err
					}
					continue
				}
				in.PodOfPID[p.PID] = uid
			}
		}
		a.report("procmap", lastErr)
		steps = append(steps, Step{Name: "procmap", Duration: time.Since(start), OK: lastErr == nil})
	}

	if a.cfg.DriverCheckpoint != "" {
		start = time.Now()
		prepared, err := ReadNVIDIACheckpoint(a.cfg.DriverCheckpoint, nvidiaDriver)
		a.report("driver-checkpoint", err, "path", a.cfg.DriverCheckpoint)
		in.DriverPrepared = prepared
		steps = append(steps, Step{Name: "driver-checkpoint", Duration: time.Since(start), OK: err == nil})
	}

	start = time.Now()
	in.Pods = a.cfg.Store.Pods()
	in.Slices = a.slices.withVanished(a.cfg.Store.Slices(), time.Now())
	var keys []string
	if in.Kubelet != nil {
		for _, p := range in.Kubelet.Pods {
			for _, c := range p.Claims {
				keys = append(keys, ClaimKey(c.ClaimNamespace, c.ClaimName))
			}
		}
	}
	for _, pc := range in.DriverPrepared {
		keys = append(keys, ClaimKey(pc.Namespace, pc.Name))
	}
	if in.Kubelet != nil || in.DriverPrepared != nil {
		a.cfg.Store.Want(keys)
	}
	in.Claims = a.cfg.Store.Claims()
	v := Join(in)
	steps = append(steps, Step{Name: "join", Duration: time.Since(start), OK: true})
	return v, steps
}

// LastReading returns the GPU source's last reading (nil when it failed).
func (a *Agent) LastReading() *gpu.Reading {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// safeRead shields the agent from a source that panics (C bindings).
func safeRead(ctx context.Context, s gpu.Source) (r *gpu.Reading, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, errors.New("GPU source panicked")
		}
	}()
	return s.Read(ctx)
}

// report logs a part's error once, and again only when it changes or clears.
func (a *Agent) report(part string, err error, attrs ...any) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	a.mu.Lock()
	prev, seen := a.lastErr[part]
	a.lastErr[part] = msg
	a.mu.Unlock()
	if seen && prev == msg {
		return
	}
	args := append([]any{"part", part}, attrs...)
	switch {
	case err != nil:
		a.cfg.Logger.Warn("node source failing; serving the other series", append(args, "err", msg)...)
	case seen:
		a.cfg.Logger.Info("node source recovered", args...)
	}
}
