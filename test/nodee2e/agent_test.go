package nodee2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestProcessJoin: the agent maps the real workload container's PID to the
// real pod's UID through the container's real cgroup (cgroup v1, the
// kubelet's cgroupfs driver). The recorded GPU source lists that PID as a
// process of the device the pod holds: the agent attributes its memory to
// the pod and raises no isolation violation. Listed on a device the pod
// does not hold, the same process is an isolation violation, and the real
// Prometheus fires the alert.
func TestProcessJoin(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "process-join")
	template(t, ns, "gpu", nil)
	created := create(t, workload(ns, "llm-0", "gpu"))
	pod := waitPod(t, ns, "llm-0", "Running", 90*time.Second, running)
	device := allocatedDevice(t, ns, claimOf(t, ns, "llm-0").Name)
	pid := containerPID(t, pod, "workload")
	defer func() {
		if err := writeRecording(ctx, nil); err != nil {
			t.Error(err)
		}
	}()

	if err := writeRecording(ctx, []GPUProcess{{Device: device, PID: pid, Bytes: 3 << 30}}); err != nil {
		t.Fatal(err)
	}
	held := deviceUUID(t, device)
	eventually(t, env.agent, 30*time.Second, "the process's memory attributed to its pod", func(m cluster.Metrics) error {
		if err := one(m, "dra_node_host_processes_visible", nil, 1); err != nil {
			return err
		}
		if err := one(m, "dra_gpu_pod_memory_used_bytes", map[string]string{"gpu_uuid": held, "namespace": ns, "pod": "llm-0", "pod_uid": string(created.UID)}, 3<<30); err != nil {
			return err
		}
		return none(m, "dra_gpu_isolation_violation", nil)
	})

	other := "gpu-0"
	if device == other {
		other = "gpu-1"
	}
	if err := writeRecording(ctx, []GPUProcess{{Device: other, PID: pid, Bytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	violation := map[string]string{"gpu_uuid": deviceUUID(t, other), "namespace": ns, "pod": "llm-0", "pod_uid": string(created.UID)}
	eventually(t, env.agent, 30*time.Second, "isolation violation", func(m cluster.Metrics) error {
		return one(m, "dra_gpu_isolation_violation", violation, 1)
	})
	waitAlert(t, "DRAGPUIsolationViolation", map[string]string{"namespace": ns, "pod": "llm-0", "pod_uid": string(created.UID)})
}

// TestKubeletRestart: the kubelet stops and starts again while pods run.
// The claims stay prepared (the kubelet's checkpoint; pod-resources lists
// them again), and no scrape of the exporter or the agent, every 250 ms
// through the restart, shows a leak or a conflict, or loses a holder: the
// kubelet deletes its node's ResourceSlices when it starts and the driver
// publishes them again only after its sync delay (about a minute), so the
// agent keeps the pool's last slices meanwhile.
//
// A restarted kubelet's readiness workers start at Failure, so it stores
// each pod with a readiness probe Ready=False until the probe's first
// success (a second here): the pods are, for that moment, not ready, and
// the exporter's `not_ready` is then the API's own record, not a false
// verdict. So the test holds every verdict against what the API stored
// (a watch on the namespace's pods): a blocked pod is allowed only as
// not_ready, and only when the API stored that pod not Ready within the
// scrape's lag; and no not-Ready stretch lasts as long as the `for:` of
// the alert it would raise, so nothing pages.
func TestKubeletRestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "kubelet-restart")
	template(t, ns, "gpu", nil)
	pods := []string{"a", "b"}
	for _, name := range pods {
		create(t, workload(ns, name, "gpu"))
	}
	for _, name := range pods {
		waitPod(t, ns, name, "Ready", 90*time.Second, ready)
	}
	eventually(t, env.agent, 30*time.Second, "both pods held", func(m cluster.Metrics) error {
		for _, name := range pods {
			if err := one(m, "dra_gpu_holder_info", map[string]string{"namespace": ns, "pod": name, "lane": "dra"}, 1); err != nil {
				return err
			}
		}
		return nil
	})
	// How far a scrape may lag the API's record: the exporter's watch
	// delivery plus the test's own (both on this machine, milliseconds
	// when idle; seconds on two busy cores).
	const lag = 5 * time.Second
	api := recordReadiness(t, ns)
	var mu sync.Mutex
	runStart := map[string]time.Time{} // pod -> first scrape of its current not_ready run
	longest := map[string]time.Duration{}
	w := watch([]*cluster.Exporter{env.exp, env.agent}, 250*time.Millisecond, func(target int, m cluster.Metrics) error {
		if target == 1 {
			if err := none(m, "dra_node_claim_conflict", nil); err != nil {
				return err
			}
			for _, name := range pods {
				if err := one(m, "dra_gpu_holder_info", map[string]string{"namespace": ns, "pod": name, "lane": "dra"}, 1); err != nil {
					return err
				}
			}
			return none(m, "dra_gpu_isolation_violation", nil)
		}
		for _, f := range []string{"dra_claim_reservation_leak", "dra_device_allocation_conflict"} {
			if err := none(m, f, map[string]string{"namespace": ns}); err != nil {
				return err
			}
		}
		now := time.Now()
		blocked := map[string]bool{}
		for _, s := range m.Find("dra_pod_blocked", map[string]string{"namespace": ns}) {
			pod := s.Labels["pod"]
			blocked[pod] = true
			if s.Labels["reason"] != "not_ready" || s.Labels["layer"] != "application" {
				return fmt.Errorf("a verdict no kubelet restart explains: %s", s)
			}
			if !api.notReadyWithin(pod, now.Add(-lag), now) {
				return fmt.Errorf("not_ready while the API stored pod %s Ready for the last %s: %s", pod, lag, s)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, pod := range pods {
			switch start, running := runStart[pod]; {
			case blocked[pod] && !running:
				runStart[pod] = now
			case blocked[pod]:
				longest[pod] = max(longest[pod], now.Sub(start))
			case running:
				delete(runStart, pod)
			}
		}
		return nil
	})
	restarted := time.Now()
	env.node.StopKubelet()
	time.Sleep(3 * time.Second)
	if err := env.node.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.node.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range pods {
		waitPod(t, ns, name, "Ready after the restart", 60*time.Second, ready)
	}
	eventually(t, env.agent, 30*time.Second, "both pods held again from pod-resources", func(m cluster.Metrics) error {
		if err := one(m, "dra_node_podresources_up", nil, 1); err != nil {
			return err
		}
		for _, name := range pods {
			if err := one(m, "dra_gpu_holder_info", map[string]string{"namespace": ns, "pod": name, "lane": "dra"}, 1); err != nil {
				return err
			}
		}
		return nil
	})
	// Until the driver publishes its slice again.
	err := cluster.WaitFor(ctx, 120*time.Second, "the driver's slice back", func(ctx context.Context) (bool, error) {
		_, err := env.node.Slice(ctx)
		return err == nil, nil
	})
	if err != nil {
		t.Error(err)
	}
	time.Sleep(2 * time.Second)
	w.Stop(t)
	end := time.Now()
	states, spans := api.Stop(t)
	t.Logf("the API's Ready conditions from %s:\n  %s", restarted.Format("15:04:05.000"), strings.Join(states, "\n  "))
	t.Logf("the kubelet's probe results after its restart:\n  %s", strings.Join(logLines(cluster.Tail(env.node.KubeletLog(), 1<<20), `"SyncLoop (probe)"`, `pod="`+ns+`/`), "\n  "))

	page := alertFor(t, "DRAPodBlockedApplication")
	for _, pod := range pods {
		for _, s := range spans[pod] {
			t.Logf("the API stored %s not Ready %s (%s)", pod, s, s.length(end).Round(time.Millisecond))
			if s.length(end) >= page {
				t.Errorf("pod %s not Ready for %s, as long as DRAPodBlockedApplication's for: %s: a kubelet restart would page", pod, s.length(end), page)
			}
		}
		t.Logf("the exporter's longest not_ready run for %s: %s", pod, longest[pod].Round(time.Millisecond))
		if longest[pod] >= page {
			t.Errorf("the exporter called %s not_ready for %s, as long as DRAPodBlockedApplication's for: %s", pod, longest[pod], page)
		}
	}
}
