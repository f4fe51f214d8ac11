package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
)

// PreparedClaim is a claim a DRA driver's kubelet plugin holds prepared on
// the node, as its checkpoint records it.
type PreparedClaim struct {
	UID, Namespace, Name string
	Devices              []DeviceRef
}

// nvidiaCheckpoint is the part of the NVIDIA DRA driver's checkpoint
// (cmd/gpu-kubelet-plugin/checkpoint.go:26-35 and checkpointv.go:59-91 of
// kubernetes-sigs/dra-driver-nvidia-gpu 9593204; the file is
// <plugin dir>/checkpoint.json, /var/lib/kubelet/plugins/gpu.nvidia.com on a
// node) that names the prepared claims: v2's claims by UID with their
// state, name, namespace and allocation. The driver writes v1 beside v2 for
// downgrades; v1 has no claim names and is not read.
type nvidiaCheckpoint struct {
	V2 *struct {
		PreparedClaims map[string]struct {
			CheckpointState string                          `json:"checkpointState"`
			Status          resourceapi.ResourceClaimStatus `json:"status"`
			Name            string                          `json:"name"`
			Namespace       string                          `json:"namespace"`
		} `json:"preparedClaims"`
	} `json:"v2"`
}

// prepareCompleted is the state of a claim the plugin has prepared
// (ClaimCheckpointStatePrepareCompleted, checkpointv.go:62-65); a claim in
// PrepareStarted has not finished preparing and holds nothing yet.
const prepareCompleted = "PrepareCompleted"

// ReadNVIDIACheckpoint reads the claims the NVIDIA driver's kubelet plugin
// holds prepared (state PrepareCompleted), with the devices of the driver's
// pool, sorted by UID.
func ReadNVIDIACheckpoint(path, driver string) ([]PreparedClaim, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the driver's checkpoint: %w", err)
	}
	var cp nvidiaCheckpoint
	if err := json.Unmarshal(raw, &cp); err != nil {
		return nil, fmt.Errorf("parse the driver's checkpoint %s: %w", path, err)
	}
	if cp.V2 == nil {
		return nil, fmt.Errorf("the driver's checkpoint %s has no v2 section (a driver before v25.12.0 writes no claim names)", path)
	}
	out := []PreparedClaim{}
	for uid, c := range cp.V2.PreparedClaims {
		if c.CheckpointState != prepareCompleted {
			continue
		}
		pc := PreparedClaim{UID: uid, Namespace: c.Namespace, Name: c.Name}
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.Driver == driver {
					pc.Devices = append(pc.Devices, DeviceRef{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
				}
			}
		}
		out = append(out, pc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, nil
}
