package nodee2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
	"golang.org/x/sys/unix"
)

// namespace creates a namespace for one test and deletes its pods at the
// end, waiting until they are gone, so that the node's devices are free for
// the next test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	c := env.cp.Client
	if err := cluster.CreateNamespace(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		err := cluster.WaitFor(ctx, 60*time.Second, "pods of "+name+" gone", func(ctx context.Context) (bool, error) {
			pods, err := c.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			return err == nil && len(pods.Items) == 0, nil
		})
		if err != nil {
			// A pod the kubelet cannot stop (its devices never prepared)
			// is removed by force: the next test needs the devices.
			pods, _ := c.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			for _, p := range pods.Items {
				_ = cluster.ForceDelete(ctx, c, name, p.Name)
			}
		}
		_ = c.ResourceV1().ResourceClaims(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return name
}

// template creates a ResourceClaimTemplate asking for one device of the
// example driver's class (node.ClaimTemplate).
func template(t *testing.T, ns, name string, config *resourceapi.OpaqueDeviceConfiguration, selectors ...string) {
	t.Helper()
	tmpl := node.ClaimTemplate(ns, name, config, selectors...)
	if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// workload is node.WorkloadPod.
var workload = node.WorkloadPod

func create(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := env.cp.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return got
}

// waitPod waits until cond holds for the pod and returns it.
func waitPod(t *testing.T, ns, name, what string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := cluster.WaitFor(context.Background(), timeout, ns+"/"+name+" "+what, func(ctx context.Context) (bool, error) {
		p, err := env.cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, describe(pod))
	}
	return pod
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func describe(p *corev1.Pod) string {
	if p == nil {
		return "(no pod)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s phase %s node %q\n", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "  container %s ready=%t state=%+v\n", c.Name, c.Ready, c.State)
	}
	events, _ := env.cp.Client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	for _, e := range events.Items {
		if e.InvolvedObject.Name == p.Name {
			fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
	}
	describeNode(&b)
	return b.String()
}

// describeNode adds what the node itself says when it is the cause: a
// pressure condition, its taints, and the disk the node's folders share.
func describeNode(b *strings.Builder) {
	n, err := env.cp.Client.CoreV1().Nodes().Get(context.Background(), "real-node", metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(b, "  node: %v\n", err)
		return
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady && c.Status == corev1.ConditionTrue {
			fmt.Fprintf(b, "  node condition %s=True %s %s\n", c.Type, c.Reason, c.Message)
		}
	}
	for _, t := range n.Spec.Taints {
		fmt.Fprintf(b, "  node taint %s=%s:%s\n", t.Key, t.Value, t.Effect)
	}
	fmt.Fprintf(b, "  %s\n", diskFree(env.root))
}

// claimOf returns the claim generated for the pod's claim "gpu".
func claimOf(t *testing.T, ns, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	p := waitPod(t, ns, pod, "has its claim", 30*time.Second, func(p *corev1.Pod) bool {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == "gpu" && s.ResourceClaimName != nil {
				return true
			}
		}
		return false
	})
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == "gpu" && s.ResourceClaimName != nil {
			c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(context.Background(), *s.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	panic("unreachable")
}

// allocatedDevice waits until the claim is allocated and returns its one
// device.
func allocatedDevice(t *testing.T, ns, claim string) string {
	t.Helper()
	var device string
	err := cluster.WaitFor(context.Background(), 30*time.Second, "claim "+ns+"/"+claim+" allocated", func(ctx context.Context) (bool, error) {
		c, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
			return false, nil
		}
		device = c.Status.Allocation.Devices.Results[0].Device
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return device
}

// deviceUUID is the uuid attribute the driver publishes for a device.
func deviceUUID(t *testing.T, device string) string {
	t.Helper()
	slice, err := env.node.Slice(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range slice.Spec.Devices {
		if d.Name == device {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				return *a.StringValue
			}
		}
	}
	t.Fatalf("device %s has no uuid in %s", device, slice.Name)
	return ""
}

// containerLog reads what the pod's container printed, from the kubelet's
// log file (/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log, CRI format:
// "<time> <stream> <tag> <line>"), waiting until it has "devices: ".
func containerLog(t *testing.T, p *corev1.Pod, container string) []string {
	t.Helper()
	path := filepath.Join("/var/log/pods", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container, "0.log")
	var lines []string
	err := cluster.WaitFor(context.Background(), 20*time.Second, "output of "+p.Name, func(context.Context) (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, nil
		}
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if f := strings.SplitN(l, " ", 4); len(f) == 4 {
				lines = append(lines, f[3])
			}
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "devices: ") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// containerPID is the host PID of the pod's container's main process, from
// containerd's task list (the container ID from the pod's status).
func containerPID(t *testing.T, p *corev1.Pod, container string) int {
	t.Helper()
	pid, err := env.node.ContainerPID(context.Background(), p, container)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// eventually scrapes the exporter or agent until check passes.
func eventually(t *testing.T, target *cluster.Exporter, timeout time.Duration, what string, check func(m cluster.Metrics) error) cluster.Metrics {
	t.Helper()
	m, err := target.Await(timeout, 250*time.Millisecond, check)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return m
}

// one expects exactly one series matching labels, with value v.
func one(m cluster.Metrics, name string, labels map[string]string, v float64) error {
	return m.One(name, labels, v)
}

func none(m cluster.Metrics, name string, labels map[string]string) error {
	return m.None(name, labels)
}

// watcher scrapes targets every interval until stopped and records every
// scrape at which check failed: a condition that must hold at every scrape
// during a sequence (no leak while a claim is released, no false verdict
// while the kubelet restarts).
type watcher struct {
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	scrapes int
	errs    []string
}

func watch(targets []*cluster.Exporter, interval time.Duration, check func(target int, m cluster.Metrics) error) *watcher {
	w := &watcher{stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for {
			for i, target := range targets {
				m, err := target.Scrape()
				if err == nil {
					err = check(i, m)
				}
				w.mu.Lock()
				w.scrapes++
				if err != nil && len(w.errs) < 20 {
					w.errs = append(w.errs, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(interval):
			}
		}
	}()
	return w
}

// Stop stops the watcher and fails the test with the scrapes that failed.
func (w *watcher) Stop(t *testing.T) int {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	if len(w.errs) > 0 {
		t.Errorf("%d of %d scrapes failed the check:\n  %s", len(w.errs), w.scrapes, strings.Join(w.errs, "\n  "))
	}
	return w.scrapes
}

// explain runs `dra-exporter explain` with the exporter's read-only
// credentials and checks that the output contains every want.
func explain(t *testing.T, target string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := cluster.Explain(ctx, env.exporter, env.kubeconfig, target)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("explain %s: want %q in:\n%s", target, w, out)
		}
	}
	return out
}

// waitGone waits until a claim no longer exists.
func waitGone(t *testing.T, ns, claim string) {
	t.Helper()
	err := cluster.WaitFor(context.Background(), 60*time.Second, "claim "+ns+"/"+claim+" deleted", func(ctx context.Context) (bool, error) {
		_, err := env.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// diskFree says how much of the filesystem holding dir is free: the kubelet
// reports DiskPressure below its thresholds (test/node/kubelet.go).
func diskFree(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "disk free unknown: " + err.Error()
	}
	free := st.Bavail * uint64(st.Bsize)
	total := st.Blocks * uint64(st.Bsize)
	return fmt.Sprintf("disk %.1f GiB free of %.1f GiB, %d inodes free", float64(free)/(1<<30), float64(total)/(1<<30), st.Ffree)
}
