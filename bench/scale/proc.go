package main

// What /proc says about a process: CPU seconds and resident memory.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns the user + system CPU time of a process.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return float64(utime+stime) / clockTicks, nil
}

// rssBytes returns the resident set size of a process (VmRSS).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status VmRSS %q: %w", pid, rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// settle waits until the control plane is quiet: etcd and kube-apiserver
// together below quietCPU of a core over a second, or maxSettle passed. A
// sync measured while the API server still works off the last one's
// aftermath (its garbage collection, watch cache and compaction after the
// load or the floor's lists) counts that work, and its CPU, against the
// exporter being measured. It returns how long it waited.
func settle(ctx context.Context, pids ...int) (time.Duration, error) {
	const (
		quietCPU  = 0.1
		maxSettle = 90 * time.Second
	)
	start := time.Now()
	total := func() (float64, error) {
		var sum float64
		for _, pid := range pids {
			s, err := cpuSeconds(pid)
			if err != nil {
				return 0, err
			}
			sum += s
		}
		return sum, nil
	}
	last, err := total()
	if err != nil {
		return 0, err
	}
	for time.Since(start) < maxSettle {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := total()
		if err != nil {
			return 0, err
		}
		if now-last < quietCPU {
			break
		}
		last = now
	}
	return time.Since(start), nil
}
