package node

// The node's kubelet (of the control-plane build): its config, the route
// to the API server's service IP.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

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
// checks), no resolv.conf (no cluster DNS), swap tolerated, eviction
// thresholds in absolute sizes. /metrics and the API need a token the API
// server authorizes (webhook), as on a real node.
//
// The node's folders share the machine's disk, and a test machine's disk is
// shared with other machines: a CI run once found it with under 1% free
// (about 2.5 GB of 252 GB), the kubelet reported DiskPressure, tainted the
// node, evicted the pods and removed the test images (ErrImageNeverPull in
// every real-node test). Percent thresholds scale with a disk the tests do
// not own; 200Mi free is what containerd and the pods here need. Image
// garbage collection stays off (100%%): the images are imported once per run
// and pulled with policy Never.
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
  nodefs.available: 200Mi
  imagefs.available: 200Mi
  nodefs.inodesFree: "2000"
  imagefs.inodesFree: "2000"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
`, n.cgroup, containerdSocket, containerdSocket, n.IP, KubeletPort)
}

// StopKubelet stops the kubelet; the pods keep running.
func (n *Node) StopKubelet() { n.stop("kubelet") }
