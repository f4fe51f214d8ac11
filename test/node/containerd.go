package node

// The node's containerd: its config, registries and ctr.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

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
