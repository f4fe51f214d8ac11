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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

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

// containerdSocket is containerd's default socket, inside the covered /run.
const containerdSocket = "/run/containerd/containerd.sock"

func (n *Node) startContainerd(ctx context.Context) error {
	config := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(n.containerdConfig()), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "realnode",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "isDefaultGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]]}
  }]
}
`, PodSubnet)
	if err := os.WriteFile(filepath.Join(n.Dir, "cni/net.d/10-realnode.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	if err := n.spawn("containerd", filepath.Join(n.Bins.ContainerdDir, "containerd"), nil, "--config", config); err != nil {
		return err
	}
	return n.waitFor(ctx, "containerd", "containerd's API", 60*time.Second, func() error {
		_, err := n.Ctr(ctx, "version")
		return err
	})
}

// registryHosts is the node's containerd registry configuration directory
// (config_path): a folder per registry host holding its hosts.toml, read
// again at every pull.
func (n *Node) registryHosts() string { return filepath.Join(n.Dir, "certs.d") }

// TrustPlainHTTPRegistry tells the node's containerd, as containerd's
// docs/hosts.md says, that the registry at host (host:port, on the node's
// loopback) speaks plain HTTP: <config_path>/<host>/hosts.toml. Pulls of
// images named host/... then go to http://host; nothing else changes.
func (n *Node) TrustPlainHTTPRegistry(host string) error {
	dir := filepath.Join(n.registryHosts(), host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+host, "http://"+host)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}

// containerdConfig follows notes/realnode.md: CRI with the overlayfs
// snapshotter and the local pause image pinned, runc from Debian without the
// systemd cgroup driver, CDI specs from the driver's folder, oom_score_adj
// restricted (root cannot lower it on this kind of machine), network
// namespaces under containerd's own state folder, registry hosts from the
// node's own config_path (TrustPlainHTTPRegistry).
func (n *Node) containerdConfig() string {
	return fmt.Sprintf(`version = 3

[grpc]
  address = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %q

[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = [%q]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
`, containerdSocket, PauseImage, n.registryHosts(), CDIRoot, n.Bins.Runc, n.Bins.CNIDir, filepath.Join(n.Dir, "cni/net.d"))
}

// CDIRoot is where the driver writes its CDI specs (inside the covered /run).
const CDIRoot = "/run/cdi"

// Ctr runs ctr against the node's containerd in the CRI namespace.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.Bins.ContainerdDir, "ctr"), append([]string{"--address", containerdSocket, "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// serviceRoute sends the `kubernetes` Service (the first address of the
// service range) to the API server, as kube-proxy would: pods that use the
// in-cluster config (the exporter installed by its chart) reach the API
// server through it. The rules live in the node's network namespace.
func (n *Node) serviceRoute() error {
	port := n.apiPort()
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		args := []string{"-t", "nat", "-A", chain, "-d", ServiceIP + "/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", n.IP + ":" + port}
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// ServiceIP is the `kubernetes` Service's address (the harness's service
// range is 10.96.0.0/16).
const ServiceIP = "10.96.0.1"

// StartKubelet starts the kubelet (again, after StopKubelet).
func (n *Node) StartKubelet(ctx context.Context) error {
	config := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(n.kubeletConfig()), 0o644); err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "kubelet.kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, "https://"+n.IP+":"+n.apiPort(), n.CP.CAFile(), cluster.KubeletToken); err != nil {
		return err
	}
	if err := n.spawn("kubelet", n.Bins.Kubelet, nil,
		"--config="+config, "--kubeconfig="+kubeconfig,
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--v=2",
	); err != nil {
		return err
	}
	return n.waitFor(ctx, "kubelet", "the kubelet's healthz", 60*time.Second, func() error {
		return httpOK("http://127.0.0.1:10248/healthz")
	})
}

func (n *Node) apiPort() string {
	return n.CP.APIServer[strings.LastIndex(n.CP.APIServer, ":")+1:]
}

// kubeletConfig follows notes/realnode.md: cgroup v1 accepted
// (failCgroupV1: false), the cgroupfs driver under the node's own
// cgroupRoot, protectKernelDefaults (the covered sysctls hold what it
// checks), no resolv.conf (no cluster DNS), swap tolerated, small eviction
// thresholds. /metrics and the API need a token the API server authorizes
// (webhook), as on a real node.
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
protectKernelDefaults: true
resolvConf: ""
failSwapOn: false
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
authorization:
  mode: Webhook
evictionHard:
  memory.available: 10Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, n.cgroup, containerdSocket, containerdSocket, n.IP, KubeletPort)
}

// StopKubelet stops the kubelet; the pods keep running.
func (n *Node) StopKubelet() { n.stop("kubelet") }

// DriverFeatures are dra-example-driver v0.4.0's optional features, set
// through the environment variables of its flags
// (cmd/dra-example-kubeletplugin/main.go) and published as its GPU profile
// does (internal/profiles/gpu/gpu.go, EnumerateDevices).
type DriverFeatures struct {
	// Partitions per GPU (GPU_PARTITIONS, KEP-4815): each GPU becomes a
	// counter set, Partitions devices gpu-<i>-partition-<j> and one
	// gpu-<i>-full, all drawing on its counters.
	Partitions int
	// MultipleAllocations (GPU_ALLOW_MULTIPLE_ALLOCATIONS, KEP-5075): every
	// device may be allocated to several requests, each consuming part of
	// its memory and compute capacity.
	MultipleAllocations bool
	// BindingConditions (BINDING_CONDITIONS, KEP-5007): every device carries
	// the binding condition "BindingConditions" (and failure condition
	// "BindingFailureConditions"), which the example controller satisfies.
	BindingConditions bool
}

// devices is how many devices the driver publishes with these features.
func (f DriverFeatures) devices(gpus int) int {
	if f.Partitions > 0 {
		return gpus * (f.Partitions + 1)
	}
	return gpus
}

// StartDriver starts the DRA driver (again, after StopDriver) with its
// default features and waits until its ResourceSlice is published.
func (n *Node) StartDriver(ctx context.Context) error {
	return n.StartDriverWith(ctx, DriverFeatures{})
}

// StartDriverWith starts the DRA driver with features and waits until it
// publishes the devices they give (a slice of the former driver, published
// before, does not count).
func (n *Node) StartDriverWith(ctx context.Context, f DriverFeatures) error {
	health, err := cluster.FreePort()
	if err != nil {
		return err
	}

	if err := os.MkdirAll(CDIRoot, 0o755); err != nil {
		return err
	}
	env := []string{
		"NODE_NAME=" + n.Name,
		"CDI_ROOT=" + CDIRoot,
		"NUM_DEVICES=" + strconv.Itoa(n.devices),
		"KUBECONFIG=" + n.CP.Kubeconfig,
		"DEVICE_PROFILE=gpu",
		"HEALTHCHECK_PORT=" + strconv.Itoa(health),
		"METRICS_PORT=" + strconv.Itoa(n.driverMetricsPort),
		"GPU_PARTITIONS=" + strconv.Itoa(f.Partitions),
		"GPU_ALLOW_MULTIPLE_ALLOCATIONS=" + strconv.FormatBool(f.MultipleAllocations),
		"BINDING_CONDITIONS=" + strconv.FormatBool(f.BindingConditions),
	}
	if err := n.spawn("dra-example-kubeletplugin", n.Bins.Driver, env); err != nil {
		return err
	}
	want := f.devices(n.devices)
	return n.waitFor(ctx, "dra-example-kubeletplugin", "the driver's ResourceSlice", 60*time.Second, func() error {
		slices, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(),
		})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			if s.Spec.Driver != Driver || len(s.Spec.Devices) != want {
				continue
			}
			d := s.Spec.Devices[0]
			if ptr.Deref(d.AllowMultipleAllocations, false) == f.MultipleAllocations && (len(d.BindingConditions) > 0) == f.BindingConditions {
				return nil
			}
		}
		return fmt.Errorf("no slice of %s with %d devices of features %+v yet (%d slices)", Driver, want, f, len(slices.Items))
	})
}

// DriverMetricsTarget is the address (host:port) of the driver's own
// /metrics (dra_example_driver_*), served on the node's address.
func (n *Node) DriverMetricsTarget() string {
	return net.JoinHostPort(n.IP, strconv.Itoa(n.driverMetricsPort))
}

// StopDriver stops the DRA driver; its ResourceSlice stays published.
func (n *Node) StopDriver() { n.stop("dra-example-kubeletplugin") }

// createDeviceClass creates the example driver's DeviceClass, as its Helm
// chart does.
func (n *Node) createDeviceClass(ctx context.Context) error {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: "device.driver == '" + Driver + "'"},
		}}},
	}
	_, err := n.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
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
