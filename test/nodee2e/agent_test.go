package nodee2e

import (
	"context"
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
// through the restart, shows a blocked pod, a leak or a conflict, or loses a
// holder: the kubelet deletes its node's ResourceSlices when it starts and
// the driver publishes them again only after its sync delay (about a
// minute), so the agent keeps the pool's last slices meanwhile.
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
		for _, f := range []string{"dra_pod_blocked", "dra_claim_reservation_leak", "dra_device_allocation_conflict"} {
			if err := none(m, f, map[string]string{"namespace": ns}); err != nil {
				return err
			}
		}
		return nil
	})
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
}
