package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

const (
	realNodeName = "real-node"
	realNS       = "real-node"
)

// realNode is the demo's real node, its node agent and its pods.
type realNode struct {
	node  *node.Node
	agent *cluster.Exporter
	// recording is the agent's GPU source: the canary's container process
	// (canaryPID) on its device (canaryDevice).
	recording    string
	canaryPID    int
	canaryDevice string
}

// startRealNode starts the real node beside the simulated ones, its node
// agent (the real kubelet's pod-resources, the real /proc, a recording of
// the driver's devices) and three pods that show the article's gates on the
// real thing: canary (allocated, prepared, Ready), negative-control (its
// selector matches no device: Pending) and prepare-failure (the driver
// rejects its config: node_prepare_failed).
func startRealNode(ctx context.Context, cp *cluster.ControlPlane, root, exporter string) (*realNode, error) {
	bins, err := node.BinariesFromEnv()
	if err != nil {
		return nil, err
	}
	n, err := node.Start(ctx, cp, bins, root, node.Options{Name: realNodeName})
	if err != nil {
		return nil, err
	}
	r := &realNode{node: n}
	if err := r.seed(ctx, cp); err != nil {
		r.stop()
		return nil, err
	}
	slice, err := n.Slice(ctx)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.recording = filepath.Join(root, "gpu.json")
	if err := r.recordCanary(ctx, cp, slice); err != nil {
		r.stop()
		return nil, err
	}
	account, err := cluster.AccountKubeconfig(ctx, cp, "deploy/manifests/node-agent-clusterrole.yaml", cluster.NodeAgentAccount)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.agent, err = cluster.StartNodeAgent(ctx, exporter, account, root, realNodeName,
		"--gpu.source=recorded", "--gpu.recorded-file="+r.recording,
		"--kubelet.pod-resources-socket="+node.PodResourcesSocket, "--proc-root=/proc")
	if err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

func (r *realNode) seed(ctx context.Context, cp *cluster.ControlPlane) error {
	c := cp.Client
	if err := cluster.CreateNamespace(ctx, c, realNS); err != nil {
		return err
	}
	for _, t := range []*resourceapi.ResourceClaimTemplate{
		node.ClaimTemplate(realNS, "gpu", nil),
		node.ClaimTemplate(realNS, "no-such-gpu", nil, node.NoSuchModel),
		node.ClaimTemplate(realNS, "bogus-config", node.BogusSharing()),
	} {
		if _, err := c.ResourceV1().ResourceClaimTemplates(realNS).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, p := range [][2]string{{"canary", "gpu"}, {"negative-control", "no-such-gpu"}, {"prepare-failure", "bogus-config"}} {
		pod := node.WorkloadPod(realNS, p[0], p[1])
		if p[0] == "negative-control" {
			pod = cluster.NegativeControl(pod)
		}
		if _, err := c.CoreV1().Pods(realNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return cluster.WaitFor(ctx, 90*time.Second, "the real node's canary Ready", func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(realNS).Get(ctx, "canary", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// scrapeJobs are the real node's agent and its kubelet's own /metrics.
func (r *realNode) scrapeJobs() []cluster.ScrapeJob {
	return []cluster.ScrapeJob{
		{Name: "dra-node-agent-real", Target: r.agentTarget(), HonorLabels: true},
		{Name: "kubelet", Target: fmt.Sprintf("%s:%d", r.node.IP, node.KubeletPort),
			BearerToken: cluster.AdminToken, Labels: map[string]string{"node": realNodeName}},
	}
}

func (r *realNode) agentTarget() string { return strings.TrimPrefix(r.agent.URL, "http://") }

func (r *realNode) stop() {
	if r.agent != nil {
		r.agent.Stop()
	}
	if err := r.node.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop the real node:", err)
	}
}

// recordCanary writes the agent's GPU recording with the canary's container
// process on the device its claim was allocated, busy and holding memory,
// as a GPU would report a workload that loaded its model: the workload gate
// can then pass on the agent's evidence, as on a GPU node.
func (r *realNode) recordCanary(ctx context.Context, cp *cluster.ControlPlane, slice *resourceapi.ResourceSlice) error {
	pod, err := cp.Client.CoreV1().Pods(realNS).Get(ctx, "canary", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(pod.Status.ResourceClaimStatuses) == 0 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return fmt.Errorf("the canary has no claim in its status: %+v", pod.Status.ResourceClaimStatuses)
	}
	claim, err := cp.Client.ResourceV1().ResourceClaims(realNS).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) == 0 {
		return fmt.Errorf("the canary's claim %s is not allocated", claim.Name)
	}
	r.canaryDevice = claim.Status.Allocation.Devices.Results[0].Device
	if r.canaryPID, err = r.node.ContainerPID(ctx, pod, "workload"); err != nil {
		return err
	}
	return node.WriteRecording(r.recording, slice, []node.GPUProcess{{Device: r.canaryDevice, PID: r.canaryPID, Bytes: 5 << 30}})
}

// forwardURL asks for the port of a loopback URL inside the node's
// namespaces to be served on the machine's loopback too.
func forwardURL(root, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		return nil // not a URL: Prometheus not started
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return err
	}
	return node.ForwardPort(root, port)
}

// localhostKubeconfig writes a copy of a kubeconfig whose server is
// https://localhost:<port> (the forwarded API server; its serving
// certificate names localhost) beside it, *.localhost.kubeconfig, and
// returns the server.
func localhostKubeconfig(path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	var server string
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return "", err
		}
		u.Host = "localhost:" + u.Port()
		c.Server = u.String()
		server = c.Server
	}
	return server, clientcmd.WriteToFile(*cfg, strings.TrimSuffix(path, ".kubeconfig")+".localhost.kubeconfig")
}
