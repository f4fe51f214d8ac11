package procmap

import (
	"errors"
	"testing"
)

// The fixture tree holds one process per layout: cgroup v1 and v2, the
// systemd and cgroupfs drivers, and the three QoS classes.
func TestPodUID(t *testing.T) {
	m := Mapper{Root: "testdata/proc"}
	cases := []struct {
		pid  int
		want string
		why  string
	}{
		{1, "", "init is no pod"},
		{101, "1b4c6d2e-3f40-4a5b-8c6d-7e8f90a1b2c3", "v2, systemd, burstable: underscores become dashes"},
		{102, "2c5d7e3f-4051-4b6c-9d7e-8f90a1b2c3d4", "v2, cgroupfs, besteffort"},
		{103, "3d6e8f40-5162-4c7d-ae8f-90a1b2c3d4e5", "v1, systemd, guaranteed"},
		{104, "4e7f9051-6273-4d8e-bf90-a1b2c3d4e5f6", "v1, cgroupfs, burstable"},
		{105, "", "a host daemon"},
		{106, "", "a non-Kubernetes container whose name has pod in it"},
		{107, "5f80a162-7384-4e9f-8a01-b2c3d4e5f607", "v2, systemd, the pod slice itself"},
		{108, "0a1b2c3d4e5f60718293a4b5c6d7e8f9", "v2, systemd, a static pod (32 hex digits, no dashes)"},
		{109, "6a91b273-8495-4fa0-9b12-c3d4e5f60718", "v2, cgroupfs, read from a cgroup namespace of its own (relative path)"},
		{110, "0a1b2c3d4e5f60718293a4b5c6d7e8f9", "v1, cgroupfs, a static pod"},
	}
	for _, c := range cases {
		got, err := m.PodUID(c.pid)
		if err != nil {
			t.Errorf("pid %d (%s): %v", c.pid, c.why, err)
			continue
		}
		if got != c.want {
			t.Errorf("pid %d (%s): got %q, want %q", c.pid, c.why, got, c.want)
		}
	}
	if _, err := m.PodUID(999); !errors.Is(err, ErrNoProcess) {
		t.Errorf("pid 999: got %v, want ErrNoProcess", err)
	}
	if !m.Visible() {
		t.Error("fixture tree has kthreadd as pid 2 (the host's PID namespace): want Visible")
	}
	if (Mapper{Root: t.TempDir()}).Visible() {
		t.Error("empty root: want not Visible")
	}
}

func TestParseCgroupLineRejectsGarbage(t *testing.T) {
	for _, line := range []string{"", "garbage", "0::", "0::/kubepods/podnot-a-uid/x", "0::/kubepods/pod1b4c6d2e-3f40-4a5b-8c6d-7e8f90a1b2c3x/x",
		"0::/system.slice/mypod0a1b2c3d4e5f60718293a4b5c6d7e8f9.scope", "0::/user.slice/pod0a1b2c3d4e5f60718293a4b5c6d7e8f9/x"} {
		if got := ParseCgroupLine(line); got != "" {
			t.Errorf("%q: got %q, want none", line, got)
		}
	}
}

// Defect 6: a container's own /proc (no hostPID) has a PID 1 with a cgroup
// file, yet shows none of the host's processes.
func TestVisibleNeedsTheHostPIDNamespace(t *testing.T) {
	if (Mapper{Root: "testdata/container-proc"}).Visible() {
		t.Error("a container's own /proc: want not Visible")
	}
}
