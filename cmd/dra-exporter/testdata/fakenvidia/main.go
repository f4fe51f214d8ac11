// Command fakenvidia stands in for the NVIDIA tools gpu-check.sh runs, on
// the simulated node of $GPUFAKE_FILE (internal/node/gpu/gpufake's JSON, the
// same file the agent reads with --gpu.fake-file). It acts by the name it
// is called as:
//
//	nvidia-smi ARGS              what gpufake's NvidiaSMI prints for ARGS
//	gpu-burn [-i INDEX] -d SECONDS
//	                             a load: adds itself (its real PID) as a process holding 1 GiB
//	                             on the GPU of that index (a MIG GPU's first instance), busy at
//	                             100%, rewrites the file, then runs SECONDS
//	nvidia-driver-proc DIR       writes the kernel driver's /proc/driver/nvidia tree under DIR
//
// It lives under testdata: `make gpu-check FAKE=...` and the tests build it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu/gpufake"
)

func main() {
	if err := run(filepath.Base(os.Args[0]), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(9)
	}
}

func run(name string, args []string) error {
	file := os.Getenv("GPUFAKE_FILE")
	if file == "" {
		return fmt.Errorf("%s (fake): GPUFAKE_FILE names no simulated node", name)
	}
	switch name {
	case "nvidia-smi":
		m, err := gpufake.Open(file)
		if err != nil {
			return err
		}
		out, err := m.NvidiaSMI(args)
		if err != nil {
			return err
		}
		fmt.Print(out)
		return nil
	case "nvidia-driver-proc":
		if len(args) != 1 {
			return fmt.Errorf("usage: nvidia-driver-proc DIR")
		}
		m, err := gpufake.Open(file)
		if err != nil {
			return err
		}
		return m.DriverProc(args[0])
	case "gpu-burn":
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		d := fs.Int("d", 20, "seconds to run")
		i := fs.Int("i", 0, "the GPU's index")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if err := burn(file, *i); err != nil {
			return err
		}
		time.Sleep(time.Duration(*d) * time.Second)
		return nil
	}
	return fmt.Errorf("fakenvidia: called as %q: want nvidia-smi, gpu-burn or nvidia-driver-proc", name)
}

// burn puts this process on the machine's GPU of that index as a CUDA
// burn would show: a compute process holding 1 GiB, the GPU 100% busy.
func burn(file string, index int) error {
	spec, err := gpufake.Load(file)
	if err != nil {
		return err
	}
	var g *gpufake.GPUSpec
	for i := range spec.GPUs {
		if spec.GPUs[i].Index == index {
			g = &spec.GPUs[i]
		}
	}
	if g == nil {
		return fmt.Errorf("gpu-burn (fake): %s has no GPU of index %d", file, index)
	}
	const mib = 1024
	p := gpufake.ProcessSpec{PID: os.Getpid(), UsedMemoryBytes: mib << 20}
	fields := &g.Fields
	if g.MIGEnabled && len(g.MIG) > 0 {
		g.MIG[0].Processes = append(g.MIG[0].Processes, p)
		fields = &g.MIG[0].Fields
	} else {
		g.Processes = append(g.Processes, p)
	}
	if *fields == nil {
		*fields = map[string]float64{}
	}
	if !g.MIGEnabled {
		(*fields)["DCGM_FI_DEV_GPU_UTIL"] = 100
	}
	(*fields)["DCGM_FI_DEV_FB_USED"] += mib
	(*fields)["DCGM_FI_DEV_FB_FREE"] -= mib
	raw, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
