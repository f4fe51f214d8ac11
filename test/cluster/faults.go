package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
)

// Faults the reliability tests inject: a second kube-apiserver over the
// same etcd that can be killed and restarted while the first keeps the
// scheduler, the controllers and the test writing, and etcd compaction.

// APIServerReplica is another kube-apiserver over the control plane's etcd,
// with its own port and serving certificate, as an HA control plane has.
// An exporter pointed at it loses the cluster when it is killed, while the
// cluster goes on changing through the first.
type APIServerReplica struct {
	cp   *ControlPlane
	name string
	port int
	// args are the first API server's, on another port and cert dir.
	args []string
	// URL is https://127.0.0.1:port.
	URL string
	// CAFile is its self-signed serving certificate.
	CAFile string
}

// StartAPIServerReplica starts a replica named name (a log file
// name.log) and waits for its /readyz. It runs with the flags the running
// kube-apiserver was started with, on its own port and serving
// certificate.
func (cp *ControlPlane) StartAPIServerReplica(ctx context.Context, name string) (*APIServerReplica, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(cp.Dir, "certs-"+name)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	first := cp.procs["kube-apiserver"]
	cp.mu.Unlock()
	if first == nil {
		return nil, fmt.Errorf("kube-apiserver is not running")
	}
	args := slices.Clone(first.cmd.Args[1:])
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--secure-port="):
			args[i] = "--secure-port=" + strconv.Itoa(port)
		case strings.HasPrefix(a, "--cert-dir="):
			args[i] = "--cert-dir=" + certDir
		}
	}
	r := &APIServerReplica{cp: cp, name: name, port: port, args: args, URL: fmt.Sprintf("https://127.0.0.1:%d", port),
		CAFile: filepath.Join(certDir, "apiserver.crt")}
	return r, r.Start(ctx)
}

// Start starts the replica (again, after Kill) on the same port and waits
// for its /readyz.
func (r *APIServerReplica) Start(ctx context.Context) error {
	if r.Running() {
		return fmt.Errorf("%s is already running", r.name)
	}
	if err := r.cp.spawnBinary(r.name, "kube-apiserver", r.args...); err != nil {
		return err
	}
	return r.cp.waitHTTP(ctx, r.name, r.URL+"/readyz", r.cp.Admin.BearerToken)
}

// Running reports whether the replica's process is running.
func (r *APIServerReplica) Running() bool {
	r.cp.mu.Lock()
	p := r.cp.procs[r.name]
	r.cp.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill kills the replica with SIGKILL: its clients' connections are reset
// at once, as when the node or the process dies.
func (r *APIServerReplica) Kill() { r.cp.kill(r.name) }

// Kubeconfig writes a kubeconfig for the replica with the token of
// another kubeconfig (an account's, from AccountKubeconfig).
func (r *APIServerReplica) Kubeconfig(from string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return "", err
	}
	var token string
	for _, a := range cfg.AuthInfos {
		token = a.Token
	}
	if token == "" {
		return "", fmt.Errorf("%s has no token", from)
	}
	path := strings.TrimSuffix(from, ".kubeconfig") + "-" + r.name + ".kubeconfig"
	return path, WriteKubeconfig(path, r.URL, r.CAFile, token)
}

// kill ends a component with SIGKILL and waits for it.
func (cp *ControlPlane) kill(name string) {
	if p := cp.take(name); p != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Revision returns etcd's current revision: the resourceVersion of the
// newest write.
func (cp *ControlPlane) Revision(ctx context.Context) (int64, error) {
	var resp struct {
		Header struct {
			Revision json.Number `json:"revision"`
		} `json:"header"`
	}
	key := base64.StdEncoding.EncodeToString([]byte("/registry/health"))
	if err := cp.etcdPost(ctx, "/v3/kv/range", map[string]any{"key": key, "count_only": true}, &resp); err != nil {
		return 0, err
	}
	return resp.Header.Revision.Int64()
}

// CompactEtcd compacts etcd's history up to its current revision (as the
// API server does every 5 minutes, here at once) and returns it: a watch
// from an older resourceVersion then meets 410 Gone wherever no cache
// still holds its events, and its client must relist.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	rev, err := cp.Revision(ctx)
	if err != nil {
		return 0, err
	}
	if err := cp.etcdPost(ctx, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil); err != nil {
		return 0, fmt.Errorf("compact at %d: %w", rev, err)
	}
	return rev, nil
}

// etcdPost calls etcd's JSON gateway.
func (cp *ControlPlane) etcdPost(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.etcdURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
