package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// GPUProcess puts a process on the GPU of a device of the node's slice in
// the node agent's recording.
type GPUProcess struct {
	Device string // the slice's device name (gpu-0, ...)
	PID    int
	Bytes  float64
}

// Busy is the utilisation, in percent, the recording gives a device that a
// GPUProcess runs on.
const Busy = 93

// WriteRecording writes the node agent's recorded GPU source for the real
// node: one GPU per device of the driver's slice (its uuid, index and
// model), Busy where procs run, idle elsewhere. The example driver's
// devices are not GPUs and have no telemetry: the recording is what a GPU
// would report. The recorded source reads the file again on every scrape;
// the file is replaced atomically.
func WriteRecording(path string, slice *resourceapi.ResourceSlice, procs []GPUProcess) error {
	rec := gpu.Recording{Comment: "the dra-example-driver's devices of the real node (not GPUs: the telemetry is recorded)"}
	for i, d := range slice.Spec.Devices {
		attr := func(name string) string {
			if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
				return *a.StringValue
			}
			return ""
		}
		g := gpu.RecordedGPU{UUID: attr("uuid"), Index: i, Product: attr("model"),
			Fields: map[string]float64{"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_FB_TOTAL": 81559}}
		for _, p := range procs {
			if p.Device == d.Name {
				g.Fields["DCGM_FI_DEV_GPU_UTIL"] = Busy
				g.Processes = append(g.Processes, gpu.RecordedProcess{PID: p.PID, UsedMemoryBytes: p.Bytes})
			}
		}
		rec.GPUs = append(rec.GPUs, g)
	}
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ContainerPID is the host PID of the pod's container's main process, from
// containerd's task list.
func (n *Node) ContainerPID(ctx context.Context, p *corev1.Pod, container string) (int, error) {
	var id string
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == container {
			id = strings.TrimPrefix(c.ContainerID, "containerd://")
		}
	}
	if id == "" {
		return 0, fmt.Errorf("no container ID for %s/%s in %+v", p.Name, container, p.Status.ContainerStatuses)
	}
	out, err := n.Ctr(ctx, "tasks", "ls")
	if err != nil {
		return 0, fmt.Errorf("ctr tasks ls: %w: %s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("container %s not in containerd's tasks:\n%s", id, out)
}
