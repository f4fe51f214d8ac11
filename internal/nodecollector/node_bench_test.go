package collector

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protojson"
	resourceapi "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/nodeagent"
	"github.com/dra-exporter/dra-exporter/internal/nvidia"
	"github.com/dra-exporter/dra-exporter/internal/testobj"
)

// eightGPUNode writes the scenario files of a full 8-GPU H100 node into dir
// (gpu.json, podresources.json, proc/) and returns its objects: one pod
// per GPU, each holding its GPU through a claim the kubelet prepared and
// running one process on it. The field values are those of
// testdata/node/dra-held's busy H100, the same on every GPU.
func eightGPUNode(tb testing.TB, dir string) *staticStore {
	tb.Helper()
	const node, gpus = "gpu-node-1", 8
	busy, err := gpu.ReadRecording("../testdata/node/dra-held/gpu.json")
	if err != nil {
		tb.Fatal(err)
	}
	store := &staticStore{claims: map[string]*resourceapi.ResourceClaim{}}
	rec := gpu.Recording{Comment: "eightGPUNode: testdata/node/dra-held's busy H100, eight times"}
	var kubelet podresourcesv1.ListPodResourcesResponse
	var devices []resourceapi.Device
	for i := range gpus {
		uuid := fmt.Sprintf("GPU-8a1b2c3d-0000-4000-8000-00000000000%d", i)
		devices = append(devices, nvidia.WithMinor(nvidia.GPUDevice(nvidia.DeviceName(i), uuid, "NVIDIA H100 80GB HBM3"), i))
		name, uid, pid := fmt.Sprintf("llm-%d", i), fmt.Sprintf("1b4c0001-0000-4000-8000-00000000010%d", i), 5000+i
		pod := testobj.Ready(testobj.Running(testobj.Bound(testobj.WithClaimStatus(testobj.WithTemplateClaim(
			testobj.Pod(name, uid), "gpu", "gpu"), "gpu", name+"-gpu"), node)))
		claim := testobj.ReservedFor(testobj.Allocated(testobj.OwnedBy(testobj.Claim(name+"-gpu", "c"+uid[1:], testobj.Request("gpu", testobj.GPUClassName)), pod, "gpu"),
			node, testobj.T0, testobj.Result("gpu", node, nvidia.DeviceName(i))), pod)
		store.pods = append(store.pods, pod)
		store.claims[nodeagent.ClaimKey(claim.Namespace, claim.Name)] = claim
		kubelet.PodResources = append(kubelet.PodResources, &podresourcesv1.PodResources{Name: name, Namespace: pod.Namespace,
			Containers: []*podresourcesv1.ContainerResources{{Name: "server", DynamicResources: []*podresourcesv1.DynamicResource{{
				ClaimName: claim.Name, ClaimNamespace: claim.Namespace,
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: testobj.Driver, PoolName: node, DeviceName: nvidia.DeviceName(i)}},
			}}}}})
		g := busy.GPUs[0]
		g.UUID, g.Index = uuid, i
		g.Processes = []gpu.RecordedProcess{{PID: pid, UsedMemoryBytes: g.Processes[0].UsedMemoryBytes}}
		rec.GPUs = append(rec.GPUs, g)
		cgroup := fmt.Sprintf("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n",
			strings.ReplaceAll(uid, "-", "_"), strings.Repeat(fmt.Sprint(i), 64))
		writeFile(tb, filepath.Join(dir, "proc", fmt.Sprint(pid), "cgroup"), []byte(cgroup))
	}
	// The host's init: the agent sees the host's processes (hostPID).
	writeFile(tb, filepath.Join(dir, "proc", "1", "cgroup"), []byte("0::/init.scope\n"))
	store.slices = []*resourceapi.ResourceSlice{nvidia.Slice(node+"-"+testobj.Driver, node, 1, devices...)}
	raw, err := json.Marshal(rec)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(dir, "gpu.json"), raw)
	if raw, err = protojson.Marshal(&kubelet); err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(dir, "podresources.json"), raw)
	return store
}

func writeFile(tb testing.TB, path string, data []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// TestEightGPUNode checks the benchmark's node: eight GPUs, each held in the
// dra lane by its own pod, whose process memory is attributed to it, and no
// conflict or violation (a fixture mistake would show as one).
func TestEightGPUNode(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewNode(agentWith(t, dir, eightGPUNode(t, dir)), false))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "dra_gpu_holder_info":
				if labels["lane"] == "dra" && labels["pod"] != "" && labels["claim"] != "" {
					count[mf.GetName()]++
				}
			case "dra_gpu_pod_memory_used_bytes":
				if labels["pod"] != "" {
					count[mf.GetName()]++
				}
			case "dra_node_claim_conflict", "dra_gpu_isolation_violation":
				count[mf.GetName()]++
			}
		}
	}
	want := map[string]int{"dra_gpu_holder_info": 8, "dra_gpu_pod_memory_used_bytes": 8}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("series per family %v, want %v", count, want)
	}
}

// BenchmarkNodeScrape is one scrape of the node agent on a full 8-GPU node,
// as `dra-exporter node` answers it: the kubelet's List over a real gRPC
// unix socket, the recorded GPU source (a file read and parsed per scrape,
// where DCGM would be asked), the /proc cgroup join, the claim join, and
// the text encoding. It reports the series and bytes of one scrape and the
// heap in use after GC with the agent alive.
func BenchmarkNodeScrape(b *testing.B) {
	dir := b.TempDir()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewNode(agentWith(b, dir, eightGPUNode(b, dir)), false))
	var series, size int
	start := time.Now()
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		var out strings.Builder
		series = 0
		for _, mf := range mfs {
			series += len(mf.GetMetric())
			if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
				b.Fatal(err)
			}
		}
		size = out.Len()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(series), "series/scrape")
	b.ReportMetric(float64(size), "exposition-B")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N)/float64(series), "µs/series")
}
