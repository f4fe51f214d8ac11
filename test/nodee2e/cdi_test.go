package nodee2e

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// TestCDISpecLost (kubernetes#141433): a running pod's claim loses its CDI
// spec file while the kubelet and the driver hold it prepared, as a reboot
// empties the tmpfs /run/cdi while the driver's checkpoint survives. The
// pod's container then exits (killed here, as a reboot kills it); the real
// kubelet creates it again without preparing the claim again, and the real
// containerd refuses it: "unresolvable CDI devices". The verdict is
// cdi_spec_missing (layer node), explain quotes the runtime, and the
// remedy the runbook gives (delete the pod: the kubelet unprepares the
// claim) takes the pod away.
func TestCDISpecLost(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "cdi-spec-lost")
	template(t, ns, "gpu", nil)
	create(t, workload(ns, "llm-0", "gpu"))
	pod := waitPod(t, ns, "llm-0", "Ready", 90*time.Second, ready)
	claim := claimOf(t, ns, "llm-0")
	device := allocatedDevice(t, ns, claim.Name)

	// The driver's spec for the claim (GenerateTransientSpecName: vendor,
	// class and the claim's UID), and only it: the driver writes its
	// common spec again when it starts.
	specs, err := filepath.Glob(filepath.Join(node.CDIRoot, "*"+string(claim.UID)+"*"))
	if err != nil || len(specs) == 0 {
		entries, _ := os.ReadDir(node.CDIRoot)
		t.Fatalf("no CDI spec for claim %s (uid %s) in %s (%v): %v", claim.Name, claim.UID, node.CDIRoot, err, entries)
	}
	for _, spec := range specs {
		if err := os.Remove(spec); err != nil {
			t.Fatal(err)
		}
		t.Logf("removed %s", spec)
	}
	pid, err := env.node.ContainerPID(ctx, pod, "workload")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the workload container (pid %d): %v", pid, err)
	}

	labels := map[string]string{"namespace": ns, "pod": "llm-0", "layer": "node", "reason": "cdi_spec_missing", "device": device}
	eventually(t, env.exp, 90*time.Second, "cdi_spec_missing once the container cannot be created again", func(m cluster.Metrics) error {
		return one(m, "dra_pod_blocked", labels, 1)
	})
	p := waitPod(t, ns, "llm-0", "its container not running", 5*time.Second, func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running == nil
	})
	t.Logf("container status: %+v", p.Status.ContainerStatuses[0].State)
	explain(t, ns+"/llm-0", "cdi_spec_missing", "unresolvable CDI devices")
	// It does not mend: 30 s later (the kubelet retried), still blocked on
	// the same reason.
	time.Sleep(30 * time.Second)
	if m, err := env.exp.Scrape(); err != nil {
		t.Fatal(err)
	} else if err := one(m, "dra_pod_blocked", labels, 1); err != nil {
		t.Errorf("30 s later: %v", err)
	}

	// The runbook's remedy: delete the pod; the kubelet unprepares the
	// claim (a missing spec file is no error to remove) and the pod goes.
	if err := env.cp.Client.CoreV1().Pods(ns).Delete(ctx, "llm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = cluster.WaitFor(ctx, 90*time.Second, "the pod gone once the kubelet unprepares its claim", func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, "llm-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, env.node.Logs(20))
	}
	eventually(t, env.exp, 30*time.Second, "the verdict cleared", func(m cluster.Metrics) error {
		return none(m, "dra_pod_blocked", map[string]string{"namespace": ns})
	})
}
