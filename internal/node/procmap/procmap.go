// Package procmap maps a process to the pod it runs in, by the pod UID the
// kubelet writes into the process's cgroup path (/proc/<pid>/cgroup).
package procmap

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// podUID finds the kubelet's pod directory in a cgroup path:
//
//	cgroupfs driver:  /kubepods/burstable/pod1b4c...-.../<container>
//	systemd driver:   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4c..._....slice/cri-containerd-<id>.scope
//
// Guaranteed pods sit directly under kubepods (kubepods/pod<uid>,
// kubepods-pod<uid>.slice). The systemd driver writes the UID's dashes as
// underscores. A static pod's UID is 32 hex digits without dashes (the
// kubelet's hash of the manifest), which its mirror pod carries too. The
// directory is a whole path element (or the systemd slice's last part).
var podUID = regexp.MustCompile(`(?:^|/|-)pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})(?:\.slice)?(?:/|$)`)

// Mapper reads /proc under a root (the host's /proc mounted into the agent's
// container, e.g. /host/proc, which needs hostPID to list other pods'
// processes).
type Mapper struct {
	Root string
}

// Visible reports whether the root shows the host's processes: whether it
// is the proc file system of the host's (the initial) PID namespace. The
// kernel's threads are visible there only, kthreadd always as PID 2; a
// container's own /proc (no hostPID) has a PID 1 and a cgroup file too,
// but no kthreadd. NVML reports the host's PIDs, so only then do they map.
func (m Mapper) Visible() bool {
	comm, err := os.ReadFile(filepath.Join(m.Root, "2", "comm"))
	return err == nil && strings.TrimSpace(string(comm)) == "kthreadd"
}

// ErrNoProcess is returned for a PID that has no entry under the root.
var ErrNoProcess = errors.New("no such process")

// PodUID returns the UID of the pod the process runs in; "" (and no error)
// for a process outside any pod (the host, a system daemon).
func (m Mapper) PodUID(pid int) (string, error) {
	f, err := os.Open(filepath.Join(m.Root, strconv.Itoa(pid), "cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return "", fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		if uid := ParseCgroupLine(sc.Text()); uid != "" {
			return uid, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("pid %d: read cgroup: %w", pid, err)
	}
	return "", nil
}

// ParseCgroupLine returns the pod UID of one line of /proc/<pid>/cgroup
// (v1 "ID:controllers:path" or v2 "0::path"), or "". The path names
// kubepods, except where the reader has a cgroup namespace of its own (a
// container without a privileged cgroupns on cgroup v2): there other
// pods' paths are relative to the reader's and may start above kubepods
// ("0::/../../pod<uid>/<container>" with the cgroupfs driver).
func ParseCgroupLine(line string) string {
	parts := strings.SplitN(line, ":", 3)
	if len(parts) != 3 {
		return ""
	}
	path := parts[2]
	if !strings.Contains(path, "kubepods") && !strings.HasPrefix(path, "/..") {
		return ""
	}
	m := podUID.FindStringSubmatch(path)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "_", "-")
}
