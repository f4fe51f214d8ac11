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
// underscores.
var podUID = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)`)

// Mapper reads /proc under a root (the host's /proc mounted into the agent's
// container, e.g. /host/proc, which needs hostPID to list other pods'
// processes).
type Mapper struct {
	Root string
}

// Visible reports whether the root looks like a proc file system with
// processes in it (PID 1 at least).
func (m Mapper) Visible() bool {
	_, err := os.Stat(filepath.Join(m.Root, "1", "cgroup"))
	return err == nil
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
// (v1 "ID:controllers:path" or v2 "0::path"), or "".
func ParseCgroupLine(line string) string {
	parts := strings.SplitN(line, ":", 3)
	if len(parts) != 3 {
		return ""
	}
	path := parts[2]
	if !strings.Contains(path, "kubepods") {
		return ""
	}
	m := podUID.FindStringSubmatch(path)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "_", "-")
}
