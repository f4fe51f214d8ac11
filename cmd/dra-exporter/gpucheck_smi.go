package main

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// smiQuery is the nvidia-smi columns gpu-check asks for (uuid first).
var smiQuery = []string{"uuid", "name", "memory.total", "memory.used", "power.draw", "temperature.gpu", "clocks.sm",
	"utilization.gpu", "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total"}

// smiReport is what nvidia-smi says: GPU columns by UUID, MIG devices.
type smiReport struct {
	gpus map[string]map[string]string
	migs map[string]smiMIG // by MIG UUID
	// apps is --query-compute-apps; q is -q by GPU UUID; mem is the
	// memory query (reserved apart) by GPU UUID. Each *Err says why one
	// is missing (an older driver lacks memory.reserved).
	apps    []smiApp
	appsErr string
	q       map[string]smiQ
	qErr    string
	mem     map[string]smiMem
	memErr  string
}

type smiApp struct {
	PID int
	GPU string
	// MiB is -1 when nvidia-smi prints [N/A].
	MiB int
}

type smiQ struct {
	minor int
	bus   string
}

type smiMem struct{ reserved, used float64 }

type smiMIG struct{ parent, profile string }

func runSMI(path string, gf gpuFlags) (smiReport, error) {
	run := func(args ...string) (string, error) {
		if path == "fake" {
			if gf.machine == nil {
				return "", errors.New("--nvidia-smi=fake needs --gpu.fake-file")
			}
			return gf.machine.NvidiaSMI(args)
		}
		out, err := exec.Command(path, args...).Output()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", path, strings.Join(args, " "), err)
		}
		return string(out), nil
	}
	csv, err := run("--query-gpu="+strings.Join(smiQuery, ","), "--format=csv,noheader,nounits")
	if err != nil {
		return smiReport{}, err
	}
	list, err := run("-L")
	if err != nil {
		return smiReport{}, err
	}
	r, err := parseSMI(csv, list)
	if err != nil {
		return r, err
	}
	if out, err := run("--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"); err != nil {
		r.appsErr = err.Error()
	} else if r.apps, err = parseComputeApps(out); err != nil {
		return r, err
	}
	if out, err := run("-q"); err != nil {
		r.qErr = err.Error()
	} else if r.q, err = parseSMIQuery(out); err != nil {
		return r, err
	}
	if out, err := run("--query-gpu=uuid,memory.reserved,memory.used", "--format=csv,noheader,nounits"); err != nil {
		r.memErr = err.Error()
	} else if r.mem, err = parseSMIMemory(out); err != nil {
		return r, err
	}
	return r, nil
}

// parseComputeApps reads --query-compute-apps=pid,gpu_uuid,used_memory.
func parseComputeApps(out string) ([]smiApp, error) {
	var apps []smiApp
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "No running processes found" {
			continue
		}
		cols := strings.Split(line, ",")
		if len(cols) != 3 {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps printed %q, want pid, gpu_uuid, used_memory", line)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(cols[0]))
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-compute-apps: pid %q", cols[0])
		}
		a := smiApp{PID: pid, GPU: strings.TrimSpace(cols[1]), MiB: -1}
		if m, err := strconv.Atoi(strings.TrimSpace(cols[2])); err == nil {
			a.MiB = m
		}
		apps = append(apps, a)
	}
	return apps, nil
}

// parseSMIQuery reads nvidia-smi -q: per "GPU <bus>" section its "GPU
// UUID", "Minor Number" and the PCI section's "Bus Id".
func parseSMIQuery(out string) (map[string]smiQ, error) {
	res := map[string]smiQ{}
	var uuid string
	var cur smiQ
	flush := func() error {
		if uuid == "" {
			return nil
		}
		if cur.minor < 0 || cur.bus == "" {
			return fmt.Errorf("nvidia-smi -q: GPU %s without a Minor Number or Bus Id", uuid)
		}
		res[uuid] = cur
		return nil
	}
	for _, line := range strings.Split(out, "\n") {
		if smiGPUHeader.MatchString(line) {
			if err := flush(); err != nil {
				return nil, err
			}
			uuid, cur = "", smiQ{minor: -1}
			continue
		}
		k, v, ok := strings.Cut(line, " : ")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "GPU UUID":
			if uuid == "" {
				uuid = v
			}
		case "Minor Number":
			if cur.minor < 0 {
				n, err := strconv.Atoi(v)
				if err != nil {
					n = -2 // N/A: the driver tells no minor
				}
				cur.minor = n
			}
		case "Bus Id":
			if cur.bus == "" {
				cur.bus = v
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return res, nil
}

var smiGPUHeader = regexp.MustCompile(`^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$`)

// parseSMIMemory reads --query-gpu=uuid,memory.reserved,memory.used.
func parseSMIMemory(out string) (map[string]smiMem, error) {
	res := map[string]smiMem{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		cols := strings.Split(line, ",")
		if len(cols) != 3 {
			return nil, fmt.Errorf("nvidia-smi --query-gpu=uuid,memory.reserved,memory.used printed %q", line)
		}
		reserved, err1 := strconv.ParseFloat(strings.TrimSpace(cols[1]), 64)
		used, err2 := strconv.ParseFloat(strings.TrimSpace(cols[2]), 64)
		if err1 != nil || err2 != nil {
			continue // [N/A]: a MIG-enabled GPU, a driver without it
		}
		res[strings.TrimSpace(cols[0])] = smiMem{reserved: reserved, used: used}
	}
	return res, nil
}

func parseSMI(csv, list string) (smiReport, error) {
	r := smiReport{gpus: map[string]map[string]string{}, migs: map[string]smiMIG{}}
	for _, line := range strings.Split(strings.TrimSpace(csv), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		cols := strings.Split(line, ",")
		if len(cols) != len(smiQuery) {
			return r, fmt.Errorf("nvidia-smi printed %d columns, want %d: %q", len(cols), len(smiQuery), line)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[smiQuery[i]] = strings.TrimSpace(c)
		}
		r.gpus[row["uuid"]] = row
	}
	parent := ""
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		_, uuid, ok := strings.Cut(line, "(UUID: ")
		if !ok {
			continue
		}
		uuid = strings.TrimSuffix(uuid, ")")
		switch {
		case strings.HasPrefix(line, "GPU "):
			parent = uuid
		case strings.HasPrefix(line, "MIG "):
			fields := strings.Fields(line)
			r.migs[uuid] = smiMIG{parent: parent, profile: fields[1]}
		}
	}
	return r, nil
}
