// Package cluster runs a real Kubernetes control plane (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager, built from the Go
// module proxy at a pinned release by `make controlplane`, or at an older
// supported minor by `make controlplane-compat`) on loopback, for
// dra-exporter's end-to-end tests and demo. Nodes are simulated: Node objects
// with status, ResourceSlices shaped like the NVIDIA DRA driver's, and a test
// that plays the kubelet's part.
package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Env names the environment variables the harness reads.
const (
	EnvBinDir = "DRA_E2E_CONTROLPLANE_BIN" // directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager
	EnvSkip   = "DRA_E2E_SKIP"             // "1": tests may skip when the binaries are absent
)

// AdminToken is the bearer token of the harness's admin (system:masters).
const AdminToken = "dra-e2e-admin-token"

// ControlPlane is a running control plane.
type ControlPlane struct {
	Dir        string // logs, certificates, kubeconfigs
	BinDir     string
	APIServer  string // https://127.0.0.1:port
	Kubeconfig string // admin kubeconfig path
	Admin      *rest.Config
	Client     kubernetes.Interface
	// Version is the release of the binaries; the flags the harness
	// passes and the features tests may rely on follow it.
	Version Version

	etcdURL string
	opts    startOptions

	mu    sync.Mutex
	procs map[string]*process
	ports map[string]int
}

// process is a program the harness started (see Process).
type process = Process

// BinDir returns the directory of the control-plane binaries from the
// environment, checking that all four are there.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBinDir)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run the tests through `make test`, or build with `make controlplane` and export %s=.cache/controlplane/<version>/bin", EnvBinDir, EnvBinDir)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary missing (run `make controlplane`): %w", err)
		}
	}
	return dir, nil
}

// Start starts etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager in dir and waits until each is healthy.
func Start(ctx context.Context, binDir, dir string) (*ControlPlane, error) {
	return start(ctx, binDir, dir, startOptions{})
}

// StartAPI starts etcd and kube-apiserver only: with no scheduler and no
// controllers, objects stay exactly as a client writes them (the scale
// benchmark loads a whole cluster's state this way). etcdQuotaBytes is etcd's
// --quota-backend-bytes (0: 4 GiB).
func StartAPI(ctx context.Context, binDir, dir string, etcdQuotaBytes int64) (*ControlPlane, error) {
	return start(ctx, binDir, dir, startOptions{apiOnly: true, etcdQuotaBytes: etcdQuotaBytes})
}

type startOptions struct {
	apiOnly        bool
	etcdQuotaBytes int64
	node           *RealNodeOptions
}

// RealNodeOptions prepare the control plane for a real kubelet (test/node):
// the API server listens on every address of its network namespace and
// advertises the node's IP (pods reach it through the `kubernetes` Service),
// reaches kubelets by their InternalIP, and knows a token for the kubelet's
// identity (system:node:<name>, group system:nodes). With a real kubelet the
// node-lifecycle controller and the TaintNodesByCondition admission plugin
// stay on, as in a real cluster (the kubelet clears the not-ready taint),
// unless SimulatedNodes asks for the harness's defaults: simulated nodes
// send no heartbeats, and the lifecycle controller would evict their pods.
type RealNodeOptions struct {
	IP             string // the node's address, advertised by the API server
	Name           string // the Node name the kubelet registers
	SimulatedNodes bool   // simulated nodes run beside the real one
}

// KubeletToken is the bearer token of the real node's kubelet.
const KubeletToken = "dra-e2e-kubelet-token"

// StartWithRealNode starts the control plane for a real node (see
// RealNodeOptions). Call it inside the node's network namespace.
func StartWithRealNode(ctx context.Context, binDir, dir string, node RealNodeOptions) (*ControlPlane, error) {
	return start(ctx, binDir, dir, startOptions{node: &node})
}

func start(ctx context.Context, binDir, dir string, opts startOptions) (*ControlPlane, error) {
	v, err := BinaryVersion(binDir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, BinDir: binDir, Version: v, opts: opts, procs: map[string]*process{}, ports: map[string]int{}}
	if err := cp.start(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// PID returns the process id of a running component ("etcd",
// "kube-apiserver", ...), or 0.
func (cp *ControlPlane) PID(name string) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if p := cp.procs[name]; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

func (cp *ControlPlane) start(ctx context.Context) error {
	for _, d := range []string{"etcd", "certs"} {
		if err := os.MkdirAll(filepath.Join(cp.Dir, d), 0o700); err != nil {
			return err
		}
	}
	for _, name := range []string{"etcd-client", "etcd-peer", "apiserver", "scheduler", "controller-manager"} {
		p, err := freePort()
		if err != nil {
			return err
		}
		cp.ports[name] = p
	}
	if err := cp.writeCredentials(); err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", cp.ports["etcd-client"])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", cp.ports["etcd-peer"])
	quota := cp.opts.etcdQuotaBytes
	if quota <= 0 {
		quota = 4 << 30
	}
	if err := cp.spawn("etcd",
		"--name=e2e", "--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--quota-backend-bytes="+strconv.FormatInt(quota, 10),
		"--log-level=warn",
	); err != nil {
		return err
	}
	if err := cp.waitHTTP(ctx, "etcd", etcdURL+"/health", ""); err != nil {
		return err
	}

	cp.etcdURL = etcdURL
	host := "127.0.0.1"
	if cp.opts.node != nil {
		// The self-signed serving certificate names the advertised
		// address (and the `kubernetes` Service's), not loopback, once
		// the API server binds every address.
		host = cp.opts.node.IP
	}
	cp.APIServer = fmt.Sprintf("https://%s:%d", host, cp.ports["apiserver"])
	if err := cp.StartAPIServer(ctx); err != nil {
		return err
	}
	if err := cp.writeAdminKubeconfig(); err != nil {
		return err
	}
	if cp.opts.apiOnly {
		return nil
	}
	if err := cp.startScheduler(ctx); err != nil {
		return err
	}
	return cp.StartControllerManager(ctx)
}

func (cp *ControlPlane) startScheduler(ctx context.Context) error {
	port := strconv.Itoa(cp.ports["scheduler"])
	if err := cp.spawn("kube-scheduler", append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig, "--authorization-kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + port, "--v=1",
	}, cp.versionFlags(false)...)...); err != nil {
		return err
	}
	return cp.waitHTTP(ctx, "kube-scheduler", "https://127.0.0.1:"+port+"/healthz", "")
}

// StartControllerManager starts kube-controller-manager (again, after
// StopControllerManager).
func (cp *ControlPlane) StartControllerManager(ctx context.Context) error {
	port := strconv.Itoa(cp.ports["controller-manager"])
	certs := filepath.Join(cp.Dir, "certs")
	if err := cp.spawn("kube-controller-manager", append([]string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--authentication-kubeconfig=" + cp.Kubeconfig, "--authorization-kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=" + port,
		"--service-account-private-key-file=" + filepath.Join(certs, "sa.key"),
		"--root-ca-file=" + filepath.Join(certs, "apiserver.crt"),
		"--controllers=" + cp.controllers(),
		"--v=1",
	}, cp.versionFlags(false)...)...); err != nil {
		return err
	}
	return cp.waitHTTP(ctx, "kube-controller-manager", "https://127.0.0.1:"+port+"/healthz", "")
}

// controllers is kube-controller-manager's --controllers.
func (cp *ControlPlane) controllers() string {
	if cp.opts.node != nil && !cp.opts.node.SimulatedNodes {
		return "*"
	}
	// Without a kubelet the node-lifecycle controller would taint the
	// simulated nodes and evict their pods.
	return "*,-node-lifecycle-controller"
}

// StartAPIServer starts kube-apiserver (again, after StopAPIServer) on the
// same port, over the same etcd.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	certs := filepath.Join(cp.Dir, "certs")
	bind, advertise := "127.0.0.1", "127.0.0.1"
	var nodeFlags []string
	// Without a kubelet every new Node would stay tainted not-ready.
	admission := "--disable-admission-plugins=TaintNodesByCondition"
	if n := cp.opts.node; n != nil {
		bind, advertise = "0.0.0.0", n.IP
		nodeFlags = []string{"--kubelet-preferred-address-types=InternalIP"}
		if !n.SimulatedNodes {
			admission = "--disable-admission-plugins="
		}
	}
	if err := cp.spawn("kube-apiserver", append([]string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=" + bind, "--advertise-address=" + advertise,
		"--secure-port=" + strconv.Itoa(cp.ports["apiserver"]),
		"--cert-dir=" + certs,
		"--token-auth-file=" + filepath.Join(certs, "tokens.csv"),
		"--service-account-key-file=" + filepath.Join(certs, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(certs, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		admission,
		"--v=1",
	}, append(cp.versionFlags(true), nodeFlags...)...)...); err != nil {
		return err
	}
	return cp.waitHTTP(ctx, "kube-apiserver", cp.APIServer+"/readyz", AdminToken)
}

// StopAPIServer stops kube-apiserver: every client loses the cluster.
func (cp *ControlPlane) StopAPIServer() { cp.stop("kube-apiserver") }

// StopControllerManager stops kube-controller-manager: nothing then removes
// reservations of deleted pods or deletes their generated claims.
func (cp *ControlPlane) StopControllerManager() { cp.stop("kube-controller-manager") }

func (cp *ControlPlane) spawn(name string, args ...string) error {
	return cp.spawnBinary(name, name, args...)
}

// spawnBinary starts the binary under another name (a replica of a
// component), logging to name.log.
func (cp *ControlPlane) spawnBinary(name, binary string, args ...string) error {
	p, err := StartProcess(name, filepath.Join(cp.BinDir, binary), filepath.Join(cp.Dir, name+".log"), nil, args...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.procs[name] = p
	cp.mu.Unlock()
	return nil
}

// take removes a component from the running ones and returns it (nil when
// it is not running).
func (cp *ControlPlane) take(name string) *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p := cp.procs[name]
	delete(cp.procs, name)
	return p
}

func (cp *ControlPlane) stop(name string) {
	if p := cp.take(name); p != nil {
		p.Stop(10 * time.Second)
	}
}

// Stop stops every process, the API server's clients first and etcd
// last.
func (cp *ControlPlane) Stop() {
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kube-apiserver"} {
		cp.stop(name)
	}
	cp.mu.Lock()
	var others []string
	for name := range cp.procs {
		if name != "etcd" {
			others = append(others, name)
		}
	}
	cp.mu.Unlock()
	for _, name := range others {
		cp.stop(name)
	}
	cp.stop("etcd")
}

// waitHTTP polls a health endpoint until it answers 200, failing early when
// the process exits.
func (cp *ControlPlane) waitHTTP(ctx context.Context, name, url, token string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
	}}
	cp.mu.Lock()
	p := cp.procs[name]
	cp.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); log:\n%s", name, p.err, Tail(p.log, 30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not healthy at %s after 90s: %s; log:\n%s", name, url, last, Tail(p.log, 30))
}

// Logs returns the tail of every process log, for a failing test.
func (cp *ControlPlane) Logs(lines int) string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		fmt.Fprintf(&b, "----- %s (%s)\n%s\n", name, filepath.Join(cp.Dir, name+".log"), Tail(filepath.Join(cp.Dir, name+".log"), lines))
	}
	return b.String()
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ComponentMetrics returns the /metrics exposition of "kube-scheduler" or
// "kube-controller-manager" (text format), read with the admin's token.
func (cp *ControlPlane) ComponentMetrics(ctx context.Context, name string) (string, error) {
	ports := map[string]string{"kube-scheduler": "scheduler", "kube-controller-manager": "controller-manager"}
	port, ok := cp.ports[ports[name]]
	if !ok {
		return "", fmt.Errorf("no component %q with /metrics (kube-scheduler, kube-controller-manager)", name)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, self-signed
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s /metrics: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("%s /metrics: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s /metrics: %s: %s", name, resp.Status, bytes.TrimSpace(body))
	}
	return string(body), nil
}
