package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
)

// The scenario's checkpoint (the driver's v2 shape): PrepareCompleted
// claims with the driver's devices, PrepareStarted left out.
func TestReadNVIDIACheckpoint(t *testing.T) {
	got, err := ReadNVIDIACheckpoint("../../../testdata/node/stale-driver-checkpoint/checkpoint.json", nvidiaDriver)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].UID != "6d1f0a3e-8b2c-4e5d-9f7a-1c3b5d7e9f01" || got[0].Name != "dra-pod-a-gpu-7m2xq" ||
		len(got[0].Devices) != 1 || got[0].Devices[0] != (DeviceRef{Driver: "gpu.nvidia.com", Pool: "gpu-node-1", Device: "gpu-1"}) {
		t.Errorf("claims %+v", got)
	}
	dir := t.TempDir()
	for name, c := range map[string]struct{ content, want string }{
		"missing": {"", "read the driver's checkpoint"},
		"garbage": {"{not json", "parse the driver's checkpoint"},
		"v1 only": {`{"v1": {"preparedClaims": {}}}`, "no v2 section"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if c.content != "" {
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ReadNVIDIACheckpoint(path, nvidiaDriver); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}

// A checkpoint entry is a conflict only when no claim of that name and UID
// exists and the kubelet does not report it.
func TestDriverPreparedWithoutClaim(t *testing.T) {
	p := pod("llm-0")
	c := allocated("llm-0-gpu", p, "gpu-0")
	entry := func(uid string) []PreparedClaim {
		return []PreparedClaim{{UID: uid, Namespace: c.Namespace, Name: c.Name, Devices: []DeviceRef{{Driver: nvidiaDriver, Pool: node, Device: "gpu-0"}}}}
	}
	for _, tt := range []struct {
		name     string
		in       Inputs
		conflict bool
	}{
		{"the claim exists", withPrepared(inputs(p, c), entry(string(c.UID))), false},
		{"the claim is gone", withPrepared(inputs(p), entry(string(c.UID))), true},
		{"a claim of that name with another UID", withPrepared(inputs(p, c), entry("00000000-dead-4000-8000-000000000000")), true},
		{"the kubelet reports it", func() Inputs {
			in := withPrepared(inputs(p), entry(string(c.UID)))
			in.Kubelet = &podresources.Report{Dynamic: true, Pods: []podresources.Pod{{Namespace: p.Namespace, Name: p.Name, Claims: []podresources.ClaimDevice{
				{Container: "main", ClaimNamespace: c.Namespace, ClaimName: c.Name, Driver: nvidiaDriver, Pool: node, Device: "gpu-0"}}}}}
			return in
		}(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []Conflict
			for _, x := range Join(tt.in).Conflicts {
				if x.Reason == ReasonDriverPreparedWithoutClaim {
					got = append(got, x)
				}
			}
			if tt.conflict != (len(got) == 1) || (tt.conflict && (got[0].Device != "gpu-0" || got[0].GPUUUID != gpuA || got[0].Claim != c.Name)) {
				t.Errorf("conflicts %+v, want one: %v", got, tt.conflict)
			}
		})
	}
}

func withPrepared(in Inputs, prepared []PreparedClaim) Inputs {
	in.DriverPrepared = prepared
	return in
}
