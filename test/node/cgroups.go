package node

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupName is the kubelet's cgroupRoot of the node in dir: one cgroup of
// its own in every hierarchy, named after the folder, so that its pods'
// cgroups never mix with the machine's and teardown knows what to remove.
func cgroupName(dir string) string { return filepath.Base(dir) }

// cgroupMounts lists the mount points of the machine's cgroup hierarchies
// (v1 controllers, named v1 hierarchies and the v2 unified one).
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	sort.Strings(out)
	return out
}

// cgroupDirs is the node's cgroup in every hierarchy.
func cgroupDirs(name string) []string {
	var out []string
	for _, m := range cgroupMounts() {
		out = append(out, filepath.Join(m, name))
	}
	return out
}

// createCgroups creates the node's cgroupRoot in every hierarchy; in cpuset
// the new cgroup gets its parent's cpus and mems (an empty cpuset admits no
// task).
func createCgroups(name string) error {
	for _, d := range cgroupDirs(name) {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(d), file))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, file), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", d, file, err)
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, deepest first, retrying while
// the last processes in them exit.
func removeCgroups(name string) error {
	var last error
	for try := 0; try < 50; try++ {
		last = nil
		for _, root := range cgroupDirs(name) {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
					last = err
				}
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroups: %w", last)
}

// cgroupPIDs lists the processes in the node's cgroups (what runs in its
// pods), from one hierarchy that every process is in.
func cgroupPIDs(name string) []string {
	var pids []string
	for _, root := range cgroupDirs(name) {
		if !strings.HasSuffix(filepath.Dir(root), "/pids") && !strings.HasSuffix(filepath.Dir(root), "/memory") {
			continue
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if data, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
				pids = append(pids, strings.Fields(string(data))...)
			}
			return nil
		})
		if len(pids) > 0 {
			break
		}
	}
	return pids
}

// killCgroups kills every process in the node's cgroups (its pods'
// processes) until none is left.
func killCgroups(name string) {
	for round := 0; round < 50; round++ {
		pids := cgroupPIDs(name)
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}
