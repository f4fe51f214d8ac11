package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnvInside marks the re-executed test binary that runs inside the node's
// namespaces; its value is the node's folder.
const EnvInside = "DRA_REALNODE_INSIDE"

// Addresses inside the node's network namespace. rn0 carries the node's IP
// (a veth, since this kernel has no dummy device type); its peer rn1 stays
// in the namespace too. Pods get addresses of PodSubnet on the cni0 bridge.
const (
	NodeIP    = "10.10.0.1"
	gatewayIP = "10.10.0.254"
	PodSubnet = "10.88.0.0/24"
)

// Inside reports whether this process is the re-executed copy that runs in
// the node's namespaces.
func Inside() bool { return os.Getenv(EnvInside) != "" }

// Paths the node writes to that are the machine's own: inside the node's
// mount namespace each is covered by a folder of the node's own, so that the
// kubelet, containerd, CNI and the driver keep their default paths and the
// machine's files stay as they were.
var coveredPaths = []string{"/var/lib", "/var/log", "/run"}

// kernelDefaults are the sysctls the kubelet's protectKernelDefaults checks
// (and would otherwise write): inside the mount namespace small files
// holding the expected values are bind-mounted over them, so that nothing of
// the machine changes.
var kernelDefaults = map[string]string{
	"/proc/sys/vm/overcommit_memory": "1",
	"/proc/sys/vm/panic_on_oom":      "0",
	"/proc/sys/kernel/panic":         "10",
	"/proc/sys/kernel/panic_on_oops": "1",
}

// Run is the TestMain of a package whose tests use a real node. Outside the
// node it creates a folder, re-executes the test binary in a new mount and
// network namespace, waits for it, kills whatever it left (processes are
// found by their mount namespace), checks that nothing of the node remains
// (Leftovers) and removes the folder. Inside, it prepares the namespaces and
// calls inside with the folder. The exit code is the test binary's, or 1
// when the node left something behind.
func Run(inside func(dir string) int) int { return RunWith(RunOptions{}, inside) }

// RunOptions shape RunWith.
type RunOptions struct {
	// Forward: the machine's loopback serves the loopback ports of the
	// node's network namespace that the run names with ForwardPort, for
	// as long as it runs (the demo's URLs).
	Forward bool
}

// forwardFile lists the ports ForwardPort asked for, one a line.
const forwardFile = "forward-ports"

// ForwardPort asks the process outside the node's namespaces (RunWith with
// Forward) to serve a loopback port of the namespace on the machine's
// loopback too. root is the folder Run passed.
func ForwardPort(root string, port int) error {
	f, err := os.OpenFile(filepath.Join(root, forwardFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, port); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// RunWith is Run with options.
func RunWith(o RunOptions, inside func(dir string) int) int {
	if dir := os.Getenv(EnvInside); dir != "" {
		if err := prepareNamespaces(dir); err != nil {
			fmt.Fprintln(os.Stderr, "real node: prepare namespaces:", err)
			return 1
		}
		return inside(dir)
	}
	err := CanRun()
	if err == nil {
		_, err = BinariesFromEnv()
	}
	if err != nil {
		if os.Getenv(EnvSkip) == "1" {
			fmt.Printf("real node skipped (%s=1): %v\n", EnvSkip, err)
			return 0
		}
		fmt.Fprintf(os.Stderr, "the real-node tests cannot run here: %v\n(they need root, mount + network namespaces and the node's programs: make test builds them; %s=1 skips them, CI never sets it)\n", err, EnvSkip)
		return 1
	}
	before := snapshotCovered()
	dir, err := os.MkdirTemp("", "dra-realnode-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "real node:", err)
		return 1
	}
	code, mntNS := reexec(dir, o.Forward)
	if left := Leftovers(dir, mntNS, before); len(left) > 0 {
		// What the inside did not stop (it was killed, or its teardown
		// failed) is stopped and removed here, and fails the run.
		fmt.Fprintf(os.Stderr, "real node: left behind:\n  %s\n", strings.Join(left, "\n  "))
		code = 1
		KillNamespace(mntNS)
		killCgroups(cgroupName(dir))
		if err := removeCgroups(cgroupName(dir)); err != nil {
			fmt.Fprintln(os.Stderr, "real node:", err)
		}
		if left := Leftovers(dir, mntNS, before); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "real node: still left after cleaning up:\n  %s\n", strings.Join(left, "\n  "))
		}
	} else {
		fmt.Println("real node: nothing left behind (no process in its namespaces, no mount, no cgroup, no file outside its folder)")
	}
	if code == 0 || os.Getenv("DRA_REALNODE_KEEP") == "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "real node: remove folder:", err)
			code = 1
		}
	} else {
		fmt.Fprintf(os.Stderr, "real node: folder kept for inspection: %s\n", dir)
	}
	return code
}

// EnvSkip, set to 1, lets a machine that cannot run a real node (not root,
// no namespaces) skip the real-node tests instead of failing them.
const EnvSkip = "DRA_E2E_SKIP"

// CanRun says why this machine cannot run a real node, or nil.
func CanRun() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cannot create mount and network namespaces: %w", err)
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (Debian iproute2, iptables: make node-packages)", tool)
		}
	}
	return nil
}

// reexec runs this test binary again inside new mount and network
// namespaces, forwards the ports it names (when asked), and returns its exit
// code and mount namespace.
func reexec(dir string, forwarding bool) (int, string) {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "real node:", err)
		return 1, ""
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), EnvInside+"="+dir)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "real node: start in namespaces:", err)
		return 1, ""
	}
	mntNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
	// An interrupt (Ctrl-C reaches both processes; kill reaches this one)
	// must let the inside stop the node cleanly: the outside waits for it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			_ = cmd.Process.Signal(sig)
		}
	}()
	if forwarding {
		f := newForwarder(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
		stop := make(chan struct{})
		go f.follow(filepath.Join(dir, forwardFile), stop)
		defer func() { close(stop); f.close() }()
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, mntNS
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		return exit.ExitCode(), mntNS
	default:
		fmt.Fprintln(os.Stderr, "real node: tests:", err)
		return 1, mntNS
	}
}

// prepareNamespaces runs first inside: private mount propagation, the
// node's network, the covered paths and the kernel defaults.
func prepareNamespaces(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// This process outlives what it starts: orphaned shims and container
	// processes are reparented to it, so that Stop finds them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "rn0", "type", "veth", "peer", "name", "rn1"},
		{"addr", "add", NodeIP + "/24", "dev", "rn0"},
		{"link", "set", "rn0", "up"},
		{"link", "set", "rn1", "up"},
		{"route", "add", "default", "via", gatewayIP, "dev", "rn0", "onlink"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, p := range coveredPaths {
		own := filepath.Join(dir, "fs", p)
		if err := os.MkdirAll(own, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(own, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover %s: %w", p, err)
		}
	}
	sysctls := filepath.Join(dir, "sysctl")
	if err := os.MkdirAll(sysctls, 0o755); err != nil {
		return err
	}
	for path, value := range kernelDefaults {
		if _, err := os.Stat(path); err != nil {
			continue // a key this kernel does not have
		}
		f := filepath.Join(sysctls, strings.ReplaceAll(strings.TrimPrefix(path, "/proc/sys/"), "/", "."))
		if err := os.WriteFile(f, []byte(value+"\n"), 0o444); err != nil {
			return err
		}
		if err := unix.Mount(f, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover %s: %w", path, err)
		}
	}
	return nil
}

// snapshotCovered records which of the machine's paths the node could write
// to exist before it starts.
func snapshotCovered() map[string]bool {
	out := map[string]bool{}
	for _, p := range watchedPaths {
		_, err := os.Lstat(p)
		out[p] = err == nil
	}
	return out
}

// watchedPaths are where a kubelet, containerd, CNI and a DRA driver write
// by default; none may appear on the machine because of the node.
var watchedPaths = []string{
	"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/var/lib/dra-example-driver",
	"/var/log/pods", "/var/log/containers", "/run/containerd", "/run/cdi", "/var/run/cdi",
	"/etc/cni/net.d", "/opt/cni/bin", "/etc/cdi",
}

// KillNamespace kills every process whose mount namespace is mntNS (what the
// node started and left running: shims, containers) and returns how many
// there were.
func KillNamespace(mntNS string) int {
	if mntNS == "" {
		return 0
	}
	killed := 0
	for round := 0; round < 50; round++ {
		pids := namespacePIDs(mntNS)
		if len(pids) == 0 {
			return killed
		}
		if round == 0 {
			killed = len(pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return killed
}

func namespacePIDs(mntNS string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == mntNS {
			out = append(out, pid)
		}
	}
	return out
}

// Leftovers lists what the node left on the machine: processes in its mount
// namespace, mounts of its folder in this namespace, its cgroups, and any of
// the default paths that appeared since before.
func Leftovers(dir, mntNS string, before map[string]bool) []string {
	var out []string
	for _, pid := range namespacePIDs(mntNS) {
		out = append(out, fmt.Sprintf("process %d: %s", pid, describeProcess(strconv.Itoa(pid))))
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), dir) {
				out = append(out, "mount: "+sc.Text())
			}
		}
		f.Close()
	}
	for _, cg := range cgroupDirs(cgroupName(dir)) {
		if _, err := os.Stat(cg); err == nil {
			out = append(out, "cgroup: "+cg)
		}
	}
	for _, pid := range cgroupPIDs(cgroupName(dir)) {
		out = append(out, fmt.Sprintf("process %s in the node's cgroups: %s", pid, describeProcess(pid)))
	}
	for _, p := range watchedPaths {
		if _, err := os.Lstat(p); err == nil && !before[p] {
			out = append(out, "file: "+p)
		}
	}
	return out
}

// describeProcess names a process by its command line, or by its comm in
// brackets (as ps does) when the command line is empty: a kernel thread, a
// zombie, or a process caught inside execve, whose new arguments are not
// mapped yet even though its parent already saw the exec succeed.
func describeProcess(pid string) string {
	if cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline"); err == nil && len(cmdline) > 0 {
		return strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	comm, _ := os.ReadFile("/proc/" + pid + "/comm")
	return "[" + strings.TrimSpace(string(comm)) + "]"
}
