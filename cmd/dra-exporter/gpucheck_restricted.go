package main

// The checks of the runs under the chart's container restrictions, and
// the verdict over all checks.

import (
	"fmt"
	"slices"
	"strconv"
)

// restrictedHostCheck: this run had the chart's restrictions: no
// capability left (effective and bounding), the host's processes seen.
func restrictedHostCheck(in checkInput) check {
	c := check{Name: checkRestrictedHost}
	c.Evidence = []string{fmt.Sprintf("CapEff %s, CapBnd %s, NoNewPrivs %s, host processes visible %v, source up %v, %d GPU(s), %d process(es)",
		in.self.CapEff, in.self.CapBnd, in.self.NoNewPrivs, in.self.ProcVisible, in.view.SourceUp, len(in.self.GPUs), len(in.self.Processes))}
	switch {
	case !noCaps(in.self.CapEff) || !noCaps(in.self.CapBnd):
		c.Status = statusNotProven
		c.Evidence = append(c.Evidence, "this run kept capabilities: run the script as root with setpriv, as the chart's container runs")
	case !in.self.ProcVisible || !in.view.SourceUp:
		c.Status = statusFail
	default:
		c.Status = statusPass
	}
	return c
}

func noCaps(hex string) bool {
	v, err := strconv.ParseUint(hex, 16, 64)
	return err == nil && v == 0
}

// ownNSCheck: the run without the host PID namespace (and no
// capability) reads the same GPUs, sees no host process, and attributes
// no process to a pod: NVML's PIDs cannot be resolved there.
func ownNSCheck(in checkInput) check {
	c := check{Name: checkRestrictedOwnNS}
	if in.ownNS == nil {
		c.Status, c.Evidence = statusNotProven, []string{in.ownNSErr}
		return c
	}
	o := in.ownNS.Observed
	pids := []string{}
	for _, p := range o.Processes {
		pids = append(pids, strconv.Itoa(p.PID))
	}
	attributed := o.Pods
	c.Evidence = []string{fmt.Sprintf("CapEff %s, host processes visible %v, source %s, %d GPU(s), NVML lists %d process(es) %v (a real driver lists only the namespace's own)",
		o.CapEff, o.ProcVisible, in.ownNS.Source, len(o.GPUs), len(o.Processes), pids)}
	var problems []string
	if !slices.Equal(o.GPUs, in.self.GPUs) {
		problems = append(problems, fmt.Sprintf("it reads GPUs %v, the host-PID run %v", o.GPUs, in.self.GPUs))
	}
	if o.ProcVisible {
		problems = append(problems, "it says the host's processes are visible")
	}
	if len(attributed) > 0 {
		problems = append(problems, fmt.Sprintf("it attributes processes to pods: %v", attributed))
	}
	switch {
	case len(problems) > 0:
		c.Status, c.Evidence = statusFail, append(problems, c.Evidence...)
	case !noCaps(o.CapEff):
		c.Status, c.Evidence = statusNotProven, append(c.Evidence, "it kept capabilities")
	default:
		c.Status = statusPass
	}
	return c
}

// decide says whether the run passes: every check passes, or is not
// proven and allowed to be.
func decide(checks []check, allow []string) bool {
	for _, c := range checks {
		if c.Status == statusFail || (c.Status == statusNotProven && !slices.Contains(allow, c.Name)) {
			return false
		}
	}
	return true
}
