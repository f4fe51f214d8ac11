package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
)

// GPUProcessAnnotation on a running pod of a simulated node gives the pod a
// process on the GPU of that index, whether it holds the GPU or not: the
// article's container that got all of /dev/nvidia* (an isolation violation).
const GPUProcessAnnotation = "sim.dra-exporter.io/gpu-process"

// NodeAgentAccount is the ServiceAccount the simulated nodes' agents run as,
// the chart's, bound to deploy/manifests/node-agent-clusterrole.yaml.
const NodeAgentAccount = "dra-exporter-node-agent"

// NodeAgents runs one `dra-exporter node` per simulated node, and plays for
// each node what the agent reads on a real one: the kubelet's pod-resources
// API (a real gRPC server on a unix socket, serving what a kubelet would
// have prepared), the node's GPUs (a recorded source whose field values are
// those of DCGMExposition, so that the agent and the rules' join over
// dcgm-exporter see the same GPUs) and the host's /proc (one process per pod
// on each GPU it holds, its cgroup naming the pod's UID). Both follow the
// API every 500 ms: the "kubelet" prepares a claim once it is allocated and
// reserved for a pod bound to the node (unless the pod has a
// FailedPrepareDynamicResources event), and assigns device-plugin GPUs to
// the pods asking for nvidia.com/gpu on a node that advertises them.
// GPUProcessAnnotation puts a pod's process on a GPU it does not hold.
type NodeAgents struct {
	Agents []*Exporter // one per node, in the order of the nodes given
	sims   []*nodeSim
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// StartNodeAgents starts the simulation and the agents of nodes. roleFile is
// the node agent's ClusterRole (deploy/manifests/node-agent-clusterrole.yaml).
func StartNodeAgents(ctx context.Context, cp *ControlPlane, binary, roleFile, dir string, nodes []GPUNode) (*NodeAgents, error) {
	kubeconfig, err := AccountKubeconfig(ctx, cp, roleFile, NodeAgentAccount)
	if err != nil {
		return nil, err
	}
	loopCtx, stop := context.WithCancel(context.Background())
	a := &NodeAgents{stop: stop}
	for _, n := range nodes {
		s, err := newNodeSim(filepath.Join(dir, "node-"+n.Name), n)
		if err != nil {
			a.Stop()
			return nil, err
		}
		a.sims = append(a.sims, s)
		if err := s.refresh(ctx, cp.Client); err != nil {
			a.Stop()
			return nil, fmt.Errorf("simulate node %s: %w", n.Name, err)
		}
		a.done.Add(1)
		go func() {
			defer a.done.Done()
			for {
				select {
				case <-loopCtx.Done():
					return
				case <-time.After(500 * time.Millisecond):
					_ = s.refresh(loopCtx, cp.Client) // the next round retries
				}
			}
		}()
		agent, err := StartNodeAgent(ctx, binary, kubeconfig, dir, n.Name,
			"--gpu.source=recorded", "--gpu.recorded-file="+s.recording,
			"--kubelet.pod-resources-socket="+s.server.Socket, "--proc-root="+s.proc,
			"--claim.refresh-interval=2s")
		if err != nil {
			a.Stop()
			return nil, fmt.Errorf("node agent of %s: %w", n.Name, err)
		}
		a.Agents = append(a.Agents, agent)
	}
	return a, nil
}

// Targets are the agents' host:port scrape targets.
func (a *NodeAgents) Targets() []string {
	out := make([]string, 0, len(a.Agents))
	for _, e := range a.Agents {
		out = append(out, strings.TrimPrefix(e.URL, "http://"))
	}
	return out
}

// Stop stops the agents and the simulation.
func (a *NodeAgents) Stop() {
	for _, e := range a.Agents {
		e.Stop()
	}
	a.stop()
	a.done.Wait()
	for _, s := range a.sims {
		s.server.Stop()
	}
}

// nodeSim is one simulated node's kubelet, GPUs and /proc.
type nodeSim struct {
	node      GPUNode
	recording string // gpu.json
	proc      string // the fake /proc root
	server    *podresources.Server
	base      []gpu.RecordedGPU // the node's GPUs as DCGMExposition has them

	mu       sync.Mutex
	pids     map[string]int   // pod UID + "/" + GPU UUID -> PID
	assigned map[string][]int // device-plugin pod UID -> GPU indexes
}

func newNodeSim(dir string, n GPUNode) (*nodeSim, error) {
	base, err := DCGMRecording(n.Name)
	if err != nil {
		return nil, err
	}
	// The host's /proc as the agent sees it with hostPID: init, and the
	// kernel's kthreadd as PID 2 (how the agent tells the host's PID
	// namespace from its own).
	for _, pid := range []string{"1", "2"} {
		if err := os.MkdirAll(filepath.Join(dir, "proc", pid), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "proc", "1", "cgroup"), []byte("0::/init.scope\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "proc", "2", "comm"), []byte("kthreadd\n"), 0o644); err != nil {
		return nil, err
	}
	srv, err := podresources.Serve(filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		return nil, err
	}
	return &nodeSim{
		node: n, recording: filepath.Join(dir, "gpu.json"), proc: filepath.Join(dir, "proc"), server: srv,
		base: base.GPUs, pids: map[string]int{}, assigned: map[string][]int{},
	}, nil
}

// refresh reads the node's pods and the claims, and rewrites what the
// kubelet reports, the GPUs' process lists and /proc.
func (s *nodeSim) refresh(ctx context.Context, c kubernetes.Interface) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", s.node.Name).String(),
	})
	if err != nil {
		return err
	}
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	failed, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "FailedPrepareDynamicResources").String(),
	})
	if err != nil {
		return err
	}
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims.Items {
		cl := &claims.Items[i]
		byName[cl.Namespace+"/"+cl.Name] = cl
	}
	prepareFailed := map[string]bool{}
	for _, ev := range failed.Items {
		prepareFailed[string(ev.InvolvedObject.UID)] = true
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		a, b := pods.Items[i], pods.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})

	procs := map[int][]string{} // GPU index -> UIDs of the pods with a process on it
	live := map[string]bool{}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		uid := string(p.UID)
		live[uid] = true
		pr := &podresourcesv1.PodResources{Name: p.Name, Namespace: p.Namespace}
		var dynamic []*podresourcesv1.DynamicResource
		for _, name := range claimNames(p) {
			cl := byName[p.Namespace+"/"+name]
			if cl == nil || cl.Status.Allocation == nil || !reserves(cl, uid) {
				continue
			}
			// A real kubelet lists a claim whose preparation failed with
			// its name and no devices.
			if prepareFailed[uid] {
				dynamic = append(dynamic, &podresourcesv1.DynamicResource{ClaimName: cl.Name, ClaimNamespace: cl.Namespace})
				continue
			}
			dr := &podresourcesv1.DynamicResource{ClaimName: cl.Name, ClaimNamespace: cl.Namespace}
			for _, r := range cl.Status.Allocation.Devices.Results {
				if r.Pool != s.node.Name {
					continue
				}
				dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{
					DriverName: r.Driver, PoolName: r.Pool, DeviceName: r.Device,
					CdiDevices: []*podresourcesv1.CDIDevice{{Name: "k8s." + r.Driver + "/device=" + r.Device}},
				})
				if idx, ok := minorOf(r.Device); ok {
					procs[idx] = append(procs[idx], uid)
				}
			}
			if len(dr.ClaimResources) > 0 {
				dynamic = append(dynamic, dr)
			}
		}
		var plugin []*podresourcesv1.ContainerDevices
		if want := gpuRequest(p); want > 0 && s.node.DevicePluginGPUs > 0 {
			for _, idx := range s.assign(uid, want) {
				plugin = append(plugin, &podresourcesv1.ContainerDevices{ResourceName: GPUResource, DeviceIds: []string{GPUUUID(s.node.Name, idx)}})
				procs[idx] = append(procs[idx], uid)
			}
		}
		if v, ok := p.Annotations[GPUProcessAnnotation]; ok && p.Status.Phase == corev1.PodRunning {
			if idx, err := strconv.Atoi(v); err == nil {
				procs[idx] = append(procs[idx], uid)
			}
		}
		for j, ctr := range p.Spec.Containers {
			cr := &podresourcesv1.ContainerResources{Name: ctr.Name}
			if j == 0 { // the simulated pods' devices go to their first container
				cr.DynamicResources, cr.Devices = dynamic, plugin
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	for uid := range s.assigned {
		if !live[uid] {
			delete(s.assigned, uid)
		}
	}
	s.server.Set(resp)
	return s.writeGPUs(procs)
}

// assign gives a device-plugin pod its GPUs, as the kubelet's device manager
// does once: the lowest free indexes, kept for the pod's life.
func (s *nodeSim) assign(uid string, want int) []int {
	if got, ok := s.assigned[uid]; ok {
		return got
	}
	taken := map[int]bool{}
	for _, idx := range s.assigned {
		for _, i := range idx {
			taken[i] = true
		}
	}
	var got []int
	for i := 0; i < s.node.DevicePluginGPUs && len(got) < want; i++ {
		if !taken[i] {
			got = append(got, i)
		}
	}
	s.assigned[uid] = got
	return got
}

// writeGPUs writes the recording with one process per pod on each GPU it
// holds or (GPUProcessAnnotation) uses, the GPU's used memory split between
// them, and the processes' cgroup files.
func (s *nodeSim) writeGPUs(procs map[int][]string) error {
	rec := gpu.Recording{Comment: "simulated node " + s.node.Name + ": the field values of test/cluster/testdata/dcgm-exporter.prom"}
	for _, g := range s.base {
		g.Processes = nil
		pods := procs[g.Index]
		for _, uid := range pods {
			key := uid + "/" + g.UUID
			pid, ok := s.pids[key]
			if !ok {
				pid = 1000 + len(s.pids)
				s.pids[key] = pid
				cgroup := fmt.Sprintf("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-containerd-%08x.scope\n",
					strings.ReplaceAll(uid, "-", "_"), pid)
				if err := writeAtomic(filepath.Join(s.proc, strconv.Itoa(pid), "cgroup"), []byte(cgroup)); err != nil {
					return err
				}
			}
			used := g.Fields["DCGM_FI_DEV_FB_USED"] * (1 << 20) / float64(len(pods))
			g.Processes = append(g.Processes, gpu.RecordedProcess{PID: pid, UsedMemoryBytes: used})
		}
		rec.GPUs = append(rec.GPUs, g)
	}
	raw, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(s.recording, raw)
}

// DCGMRecording is the recorded GPU source of one of DemoNodes: its GPUs
// with every DCGM field of DCGMExposition the agent knows.
func DCGMRecording(node string) (*gpu.Recording, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(DCGMExposition))
	if err != nil {
		return nil, fmt.Errorf("parse the recorded dcgm-exporter page: %w", err)
	}
	byUUID := map[string]*gpu.RecordedGPU{}
	for name, mf := range families {
		if _, ok := gpu.FieldByName(name); !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["Hostname"] != node {
				continue
			}
			g := byUUID[labels["UUID"]]
			if g == nil {
				idx, err := strconv.Atoi(labels["gpu"])
				if err != nil {
					return nil, fmt.Errorf("%s: gpu label %q: %w", name, labels["gpu"], err)
				}
				g = &gpu.RecordedGPU{UUID: labels["UUID"], Index: idx, Product: labels["modelName"], Fields: map[string]float64{}}
				byUUID[g.UUID] = g
			}
			g.Fields[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	rec := &gpu.Recording{}
	for _, g := range byUUID {
		rec.GPUs = append(rec.GPUs, *g)
	}
	sort.Slice(rec.GPUs, func(i, j int) bool { return rec.GPUs[i].Index < rec.GPUs[j].Index })
	if len(rec.GPUs) == 0 {
		return nil, fmt.Errorf("the recorded dcgm-exporter page has no GPU of node %s", node)
	}
	return rec, nil
}

func claimNames(p *corev1.Pod) []string {
	var out []string
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			out = append(out, *rc.ResourceClaimName)
		}
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			out = append(out, *st.ResourceClaimName)
		}
	}
	if st := p.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out = append(out, st.ResourceClaimName)
	}
	return out
}

func reserves(c *resourceapi.ResourceClaim, uid string) bool {
	for _, r := range c.Status.ReservedFor {
		if string(r.UID) == uid {
			return true
		}
	}
	return false
}

// gpuRequest is the nvidia.com/gpu the pod's containers ask for.
func gpuRequest(p *corev1.Pod) int {
	n := 0
	for _, ctr := range p.Spec.Containers {
		if q, ok := ctr.Resources.Limits[GPUResource]; ok {
			n += int(q.Value())
		} else if q, ok := ctr.Resources.Requests[GPUResource]; ok {
			n += int(q.Value())
		}
	}
	return n
}

func minorOf(device string) (int, bool) {
	i, err := strconv.Atoi(strings.TrimPrefix(device, "gpu-"))
	return i, err == nil && strings.HasPrefix(device, "gpu-")
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
