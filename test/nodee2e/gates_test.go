package nodee2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// The evidence gates on the real node: the real Prometheus of the harness
// scrapes the exporter and the node agent and evaluates rules/gates.yaml,
// and `kubectl dra-exporter gates` (the exporter binary started as kubectl-dra_exporter)
// reads the verdict from it.

// gatesOutput is what one run of the gates command gave.
type gatesOutput struct {
	rc   int
	text string
	// report is the -o json run's, when asked for.
	report struct {
		Pods []struct {
			Pod   string `json:"pod"`
			Gates []struct {
				Gate         string `json:"gate"`
				State        string `json:"state"`
				Reason       string `json:"reason"`
				PassedWindow bool   `json:"passedWindow"`
			} `json:"gates"`
		} `json:"pods"`
		Controls []struct {
			Pod    string `json:"pod"`
			Holds  bool   `json:"holds"`
			Reason string `json:"reason"`
		} `json:"negativeControls"`
		Verdict struct {
			Pass  bool   `json:"pass"`
			Gate  string `json:"gate"`
			Owner string `json:"owner"`
		} `json:"verdict"`
	}
}

// kubectlDRA is the exporter binary under the name kubectl runs it by.
func kubectlDRA(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(env.exporter)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "kubectl-dra_exporter")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// runGates runs `kubectl dra-exporter gates` with args, text then JSON.
func runGates(t *testing.T, plugin string, args ...string) gatesOutput {
	t.Helper()
	var g gatesOutput
	run := func(extra ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, plugin, append(append([]string{"gates"}, args...), extra...)...)
		out, err := cmd.Output()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			// 0 PASS, 1 FAIL, 3 CANNOT_JUDGE (no pod yet, rules not
			// recorded yet: gatesUntil asks again), 4 PARTIAL; 2 is a usage
			// error.
			if exit.ExitCode() == 2 || exit.ExitCode() > 4 {
				t.Fatalf("kubectl dra-exporter gates %v: exit %d: %s\n%s", args, exit.ExitCode(), exit.Stderr, out)
			}
			return string(out), exit.ExitCode()
		case err != nil:
			t.Fatalf("kubectl dra-exporter gates %v: %v", args, err)
		}
		return string(out), 0
	}
	g.text, g.rc = run()
	js, _ := run("-o", "json")
	if err := json.Unmarshal([]byte(js), &g.report); err != nil {
		t.Fatalf("gates -o json: %v\n%s", err, js)
	}
	return g
}

// gatesUntil runs gates until cond holds, and returns that run.
func gatesUntil(t *testing.T, timeout time.Duration, what string, plugin string, cond func(gatesOutput) error, args ...string) gatesOutput {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		g := runGates(t, plugin, args...)
		err := cond(g)
		if err == nil {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v\n%s", what, timeout, err, g.text)
		}
		time.Sleep(2 * time.Second)
	}
}

func (g gatesOutput) gate(pod, gate string) (state, reason string) {
	for _, p := range g.report.Pods {
		if p.Pod != pod {
			continue
		}
		for _, x := range p.Gates {
			if x.Gate == gate {
				return x.State, x.Reason
			}
		}
	}
	return "", ""
}

// passedWindow reports whether the pod's gate passed for the whole window.
func (g gatesOutput) passedWindow(pod, gate string) bool {
	for _, p := range g.report.Pods {
		for _, x := range p.Gates {
			if p.Pod == pod && x.Gate == gate {
				return x.PassedWindow
			}
		}
	}
	return false
}

// negativeControlPod is a workload pod marked as a negative control.
func negativeControlPod(ns, name, template string) *corev1.Pod {
	return cluster.NegativeControl(workload(ns, name, template))
}

// TestGatesCanaryPasses: a canary that the scheduler allocates, the real
// kubelet prepares and CDI gives its device, whose readiness passes and
// whose GPU moves (the agent's recording puts the container's real PID on
// its device), passes the api, node and workload gates, beside a negative
// control that stays Pending: `kubectl dra-exporter gates` exits 0. The evidence
// bundle of the same cluster, with the agent's /metrics, passes the api and
// node gates offline.
func TestGatesCanaryPasses(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "gates-pass")
	template(t, ns, "gpu", nil)
	template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
	create(t, workload(ns, "canary", "gpu"))
	create(t, negativeControlPod(ns, "control", "no-such-gpu"))
	pod := waitPod(t, ns, "canary", "Ready", 90*time.Second, ready)
	device := allocatedDevice(t, ns, claimOf(t, ns, "canary").Name)
	defer func() {
		if err := writeRecording(ctx, nil); err != nil {
			t.Error(err)
		}
	}()
	if err := writeRecording(ctx, []GPUProcess{{Device: device, PID: containerPID(t, pod, "workload"), Bytes: 5 << 30}}); err != nil {
		t.Fatal(err)
	}
	plugin := kubectlDRA(t)
	args := []string{ns, "-l", "app=canary", "--prometheus.url", env.prom.URL, "--window", "15s", "--step", "1s", "--kubeconfig", env.kubeconfig}
	g := gatesUntil(t, 90*time.Second, "the canary passes its gates for the window", plugin, func(g gatesOutput) error {
		if g.rc != 0 {
			return fmt.Errorf("exit %d", g.rc)
		}
		return nil
	}, args...)
	t.Logf("kubectl dra-exporter gates %s:\n%s", strings.Join(args, " "), g.text)
	for _, gate := range []string{"api", "node", "workload"} {
		if state, reason := g.gate("canary", gate); state != "PASS" {
			t.Errorf("gate %s: %s %s, want PASS", gate, state, reason)
		}
	}
	if len(g.report.Controls) != 1 || !g.report.Controls[0].Holds || g.report.Controls[0].Reason != "selector_matches_nothing" {
		t.Errorf("negative controls %+v, want control holding with selector_matches_nothing", g.report.Controls)
	}
	for _, want := range []string{"the kubelet prepared GPU " + deviceUUID(t, device), "up to 93% busy in the window (node agent)", "Verdict: PASS"} {
		if !strings.Contains(g.text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The same evidence, saved and read offline.
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	out, err := exec.CommandContext(ctx, plugin, "bundle", "-o", path, "--kubeconfig", env.kubeconfig,
		"--agent.selector=", "--agent.url", env.agent.URL+"/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl dra-exporter bundle: %v\n%s", err, out)
	}
	for _, want := range []string{"saved:   pods", "saved:   resourceslices", "saved:   /metrics of node agent " + env.agent.URL + "/metrics (4)", "skipped: clusterpolicies.nvidia.com"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bundle output lacks %q:\n%s", want, out)
		}
	}
	// Offline there is no window and no workload evidence: at best
	// PARTIAL, exit 4, never a pass.
	offline, err := exec.CommandContext(ctx, plugin, "gates", ns, "--from", path, "-l", "app=canary").Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 {
		t.Fatalf("kubectl dra-exporter gates --from: want exit 4 (PARTIAL), got %v\n%s", err, offline)
	}
	for _, want := range []string{"  api       PASS", "  node      PASS", "  workload  NOT_EVALUATED", "HOLDS selector_matches_nothing", "Verdict: PARTIAL"} {
		if !strings.Contains(string(offline), want) {
			t.Errorf("offline gates lack %q:\n%s", want, offline)
		}
	}
	t.Logf("kubectl dra-exporter gates %s --from bundle.tar.gz -l app=canary:\n%s", ns, offline)
}

// TestGatesPrepareFailure: the real kubelet's NodePrepareResources fails on
// the driver's rejection of the claim's config. The claim is allocated and
// reserved and the pod bound: the api gate passes. The node gate owns the
// failure (the article's "kubelet called NodePrepareResources, plugin
// healthy, CDI applied"), and the verdict names the node/runtime owner.
func TestGatesPrepareFailure(t *testing.T) {
	ns := namespace(t, "gates-prepare")
	template(t, ns, "bogus", bogusSharing())
	template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
	create(t, workload(ns, "canary", "bogus"))
	create(t, negativeControlPod(ns, "control", "no-such-gpu"))
	allocatedDevice(t, ns, claimOf(t, ns, "canary").Name)
	args := []string{ns, "--prometheus.url", env.prom.URL, "--window", "5s", "--step", "1s"}
	g := gatesUntil(t, 90*time.Second, "the api gate passes for the window and the node gate fails with prepare_failed", kubectlDRA(t), func(g gatesOutput) error {
		if state, reason := g.gate("canary", "node"); g.rc != 1 || state != "FAIL" || reason != "prepare_failed" || !g.passedWindow("canary", "api") {
			return fmt.Errorf("exit %d, node gate %s %s, api passed the window: %v", g.rc, state, reason, g.passedWindow("canary", "api"))
		}
		return nil
	}, args...)
	t.Logf("kubectl dra-exporter gates %s:\n%s", strings.Join(args, " "), g.text)
	if state, _ := g.gate("canary", "api"); state != "PASS" {
		t.Errorf("api gate %s, want PASS: the claim is allocated and reserved, the pod bound", state)
	}
	if v := g.report.Verdict; v.Pass || v.Gate != "node" || !strings.Contains(v.Owner, "node/runtime owner") {
		t.Errorf("verdict %+v, want the node gate, owned by the node/runtime owner", v)
	}
	if !strings.Contains(g.text, "Owner: node/runtime owner") {
		t.Errorf("the text does not name the owner:\n%s", g.text)
	}
}

// TestGatesReadinessFailure: the workload's readiness probe fails
// (NOT_READY=1) after the real kubelet prepared its device: the api and
// node gates pass, the workload gate fails with not_ready, owned by the
// inference owner.
func TestGatesReadinessFailure(t *testing.T) {
	ns := namespace(t, "gates-readiness")
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "canary", "gpu", corev1.EnvVar{Name: "NOT_READY", Value: "1"}))
	waitPod(t, ns, "canary", "Running", 90*time.Second, running)
	args := []string{ns, "--prometheus.url", env.prom.URL, "--window", "5s", "--step", "1s", "--require-negative-control=false"}
	g := gatesUntil(t, 90*time.Second, "the workload gate fails with not_ready and the others pass", kubectlDRA(t), func(g gatesOutput) error {
		api, _ := g.gate("canary", "api")
		nodeState, nodeReason := g.gate("canary", "node")
		state, reason := g.gate("canary", "workload")
		if g.rc != 1 || api != "PASS" || nodeState != "PASS" || state != "FAIL" || reason != "not_ready" || !g.passedWindow("canary", "api") || !g.passedWindow("canary", "node") {
			return fmt.Errorf("exit %d, api %s, node %s %s, workload %s %s", g.rc, api, nodeState, nodeReason, state, reason)
		}
		return nil
	}, args...)
	t.Logf("kubectl dra-exporter gates %s:\n%s", strings.Join(args, " "), g.text)
	if v := g.report.Verdict; v.Gate != "workload" || !strings.Contains(v.Owner, "inference owner") {
		t.Errorf("verdict %+v, want the workload gate, owned by the inference owner", v)
	}
}

// TestGatesNegativeControlAllocated: a pod marked as a negative control
// whose selector matches a device is allocated one and runs: the selector
// does not enforce the boundary. dra_negative_control says so and the real
// Prometheus fires DRANegativeControlAllocated with the device.
func TestGatesNegativeControlAllocated(t *testing.T) {
	ns := namespace(t, "gates-control")
	template(t, ns, "gpu", nil)
	created := create(t, negativeControlPod(ns, "control", "gpu"))
	waitPod(t, ns, "control", "Running", 90*time.Second, running)
	device := allocatedDevice(t, ns, claimOf(t, ns, "control").Name)
	eventually(t, env.exp, 30*time.Second, "the control broken", func(m cluster.Metrics) error {
		return one(m, "dra_negative_control", map[string]string{"namespace": ns, "pod": "control", "reason": "started", "device": device, "node": env.node.Name}, 0)
	})
	a := waitAlert(t, "DRANegativeControlAllocated", map[string]string{"namespace": ns, "pod": "control", "pod_uid": string(created.UID), "device": device, "severity": "critical"})
	if !strings.Contains(a.Annotations["description"], "got device "+device) {
		t.Errorf("description does not name the device: %q", a.Annotations["description"])
	}
	g := runGates(t, kubectlDRA(t), ns, "--prometheus.url", env.prom.URL, "--window", "5s", "--step", "1s")
	if g.rc != 1 || !strings.Contains(g.text, "BROKEN ") || g.report.Verdict.Gate != "api" || !strings.Contains(g.text, "negative control "+ns+"/control is broken") {
		t.Errorf("gates: exit %d, want 1 with the control broken:\n%s", g.rc, g.text)
	}
	t.Logf("kubectl dra-exporter gates %s:\n%s", ns, g.text)
}
