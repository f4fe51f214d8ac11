// Package node runs a real Kubernetes node beside the harness's control
// plane (test/cluster), for dra-exporter's end-to-end tests and demo: the
// kubelet of the control-plane build, containerd with runc and the CNI bridge
// plugin, and kubernetes-sigs' dra-example-driver as the DRA driver. The
// real scheduler allocates claims on it, the real kubelet calls the driver's
// NodePrepareResources over gRPC, CDI injects the device into the container,
// and the kubelet's pod-resources API reports what it prepared.
//
// Everything runs in a mount and network namespace of its own (Run
// re-executes the test binary there), so that the machine's settings never
// change: /var/lib, /var/log and /run are covered by folders of the node's,
// the sysctls the kubelet checks are covered by files, and the node's cgroups
// live under a cgroupRoot named after its folder. Stop stops exactly what the
// node started; Run checks that nothing is left. notes/realnode.md in the
// shared folder has the facts this builds on.
package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// Environment variables naming the node's binaries (`make test` sets them).
// The kubelet is in the control-plane build (cluster.EnvBinDir).
const (
	EnvContainerdBin = "DRA_E2E_CONTAINERD_BIN" // containerd, ctr, containerd-shim-runc-v2
	EnvDriver        = "DRA_E2E_DRA_DRIVER"     // dra-example-kubeletplugin
)

// The example driver and its DeviceClass.
const (
	Driver      = "gpu.example.com"
	DeviceClass = "gpu.example.com"
)

// PodResourcesSocket is the kubelet's pod-resources socket, at its default
// path inside the node's mount namespace.
const PodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// KubeletPort is the kubelet's authenticated port (/metrics, /pods).
const KubeletPort = 10250

// Binaries are the node's programs.
type Binaries struct {
	Kubelet       string
	ContainerdDir string // containerd, ctr, containerd-shim-runc-v2
	Driver        string
	Runc          string
	CNIDir        string
}

// BinariesFromEnv finds the node's programs: the kubelet beside the control
// plane, containerd and the driver from the environment, runc and the CNI
// plugins from Debian's packages (`make node-bins node-packages`).
func BinariesFromEnv() (Binaries, error) {
	cp, err := cluster.BinDir()
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		Kubelet:       filepath.Join(cp, "kubelet"),
		ContainerdDir: os.Getenv(EnvContainerdBin),
		Driver:        os.Getenv(EnvDriver),
		Runc:          "/usr/sbin/runc",
		CNIDir:        "/usr/lib/cni",
	}
	for _, p := range []struct{ path, what string }{
		{b.Kubelet, "kubelet (make controlplane)"},
		{filepath.Join(b.ContainerdDir, "containerd"), "containerd (make node-bins; " + EnvContainerdBin + ")"},
		{filepath.Join(b.ContainerdDir, "ctr"), "ctr (make node-bins)"},
		{filepath.Join(b.ContainerdDir, "containerd-shim-runc-v2"), "containerd-shim-runc-v2 (make node-bins)"},
		{b.Driver, "dra-example-kubeletplugin (make node-bins; " + EnvDriver + ")"},
		{b.Runc, "runc (make node-packages: Debian's runc)"},
		{filepath.Join(b.CNIDir, "bridge"), "the CNI bridge plugin (make node-packages: Debian's containernetworking-plugins)"},
		{filepath.Join(b.CNIDir, "host-local"), "the CNI host-local plugin (make node-packages)"},
	} {
		if p.path == "" || p.path == "containerd" {
			return b, fmt.Errorf("%s: not set", p.what)
		}
		if _, err := os.Stat(p.path); err != nil {
			return b, fmt.Errorf("%s: %w", p.what, err)
		}
	}
	return b, nil
}

// Options shape a node.
type Options struct {
	Name    string // the Node's name (default real-node)
	Devices int    // the driver's GPUs (default 4)
}

// Node is a running real node.
type Node struct {
	Name string
	IP   string
	Dir  string
	Bins Binaries
	CP   *cluster.ControlPlane

	client  kubernetes.Interface
	cgroup  string
	devices int
	// driverMetricsPort is where the driver serves its own metrics, the
	// same port across its restarts so that one scrape target follows it.
	driverMetricsPort int

	mu    sync.Mutex
	procs map[string]*cluster.Process
}

// Start starts containerd, imports the test images, starts the kubelet and
// waits for its Node to be Ready, then starts the driver and waits for its
// ResourceSlice, and creates the driver's DeviceClass. Call it inside Run,
// after cluster.StartWithRealNode, with Run's folder: the node keeps its
// configuration and logs in root/node, and names its cgroups after root.
func Start(ctx context.Context, cp *cluster.ControlPlane, bins Binaries, root string, o Options) (*Node, error) {
	if o.Name == "" {
		o.Name = "real-node"
	}
	if o.Devices == 0 {
		o.Devices = 4
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	n := &Node{Name: o.Name, IP: NodeIP, Dir: filepath.Join(root, "node"), Bins: bins, CP: cp, client: cp.Client,
		cgroup: cgroupName(root), devices: o.Devices, driverMetricsPort: metrics, procs: map[string]*cluster.Process{}}
	if err := n.start(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	for _, d := range []string{"cni/net.d", "logs"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := createCgroups(n.cgroup); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	archives, err := buildImages(ctx, n.Dir)
	if err != nil {
		return err
	}
	for _, a := range archives {
		if out, err := n.Ctr(ctx, "images", "import", a); err != nil {
			return fmt.Errorf("import %s: %v: %s", filepath.Base(a), err, out)
		}
	}
	if err := n.serviceRoute(); err != nil {
		return err
	}
	if err := n.StartKubelet(ctx); err != nil {
		return err
	}
	if err := n.WaitReady(ctx); err != nil {
		return err
	}
	if err := n.StartDriver(ctx); err != nil {
		return err
	}
	return n.createDeviceClass(ctx)
}

// WaitReady waits until the node's Ready condition is True and the
// not-ready taint is gone.
func (n *Node) WaitReady(ctx context.Context) error {
	return n.waitFor(ctx, "kubelet", "node "+n.Name+" Ready", 90*time.Second, func() error {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return fmt.Errorf("tainted %s", t.Key)
			}
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s", c.Status, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// Slice returns the driver's current ResourceSlice of the node.
func (n *Node) Slice(ctx context.Context) (*resourceapi.ResourceSlice, error) {
	slices, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(),
	})
	if err != nil {
		return nil, err
	}
	for i := range slices.Items {
		if slices.Items[i].Spec.Driver == Driver {
			return &slices.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no ResourceSlice of %s on %s", Driver, n.Name)
}

// KubeletLog is the kubelet's log file (every start appends to it).
func (n *Node) KubeletLog() string { return filepath.Join(n.Dir, "logs", "kubelet.log") }

// Logs returns the tail of each component's log, for a failing test.
func (n *Node) Logs(lines int) string {
	var b strings.Builder
	for _, name := range []string{"containerd", "kubelet", "dra-example-kubeletplugin"} {
		path := filepath.Join(n.Dir, "logs", name+".log")
		fmt.Fprintf(&b, "----- %s (%s)\n%s\n", name, path, cluster.Tail(path, lines))
	}
	return b.String()
}

// Stop stops the driver, the kubelet, every pod's processes and the
// runtime's shims, then containerd, and removes the node's cgroups. It
// stops only what the node started: its own processes by PID, the pods'
// processes found in the node's cgroups, the shims among this process's
// children (it is their subreaper).
func (n *Node) Stop() error {
	n.StopDriver()
	n.StopKubelet()
	killCgroups(n.cgroup)
	n.stop("containerd")
	killShims()
	return removeCgroups(n.cgroup)
}

// killShims kills the containerd shims among this process's children
// (orphaned shims are reparented to it: it is a subreaper) and reaps them.
func killShims() {
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(stat)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 || f[1] != self {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "containerd-shim") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
}

func httpOK(url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func (n *Node) spawn(name, binary string, env []string, args ...string) error {
	// The shim must be on containerd's PATH; runc is named in its config.
	env = append([]string{"PATH=" + n.Bins.ContainerdDir + ":" + os.Getenv("PATH")}, env...)
	p, err := cluster.StartProcess(name, binary, filepath.Join(n.Dir, "logs", name+".log"), env, args...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.procs[name] = p
	n.mu.Unlock()
	return nil
}

func (n *Node) stop(name string) {
	n.mu.Lock()
	p := n.procs[name]
	delete(n.procs, name)
	n.mu.Unlock()
	if p != nil {
		p.Stop(15 * time.Second)
	}
}

// running reports why a started component is not running, or nil.
func (n *Node) running(name string) error {
	n.mu.Lock()
	p := n.procs[name]
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Exited()
}

// waitFor polls check until it passes, the component dies or the timeout
// passes.
func (n *Node) waitFor(ctx context.Context, component, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if dead := n.running(component); dead != nil {
			return dead
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %v", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
