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

	"github.com/dra-exporter/dra-exporter/internal/node/gpu/gpufake"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

const benchNode = "gpu-node-1"

// h100 is a busy H100's DCGM fields (testdata/node/dra-held's figures).
func h100() map[string]float64 {
	return map[string]float64{
		"DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 61440, "DCGM_FI_DEV_FB_FREE": 20119, "DCGM_FI_DEV_FB_TOTAL": 81559,
		"DCGM_FI_DEV_POWER_USAGE": 512.3, "DCGM_FI_DEV_GPU_TEMP": 71, "DCGM_FI_DEV_SM_CLOCK": 1980,
		"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
		"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.91, "DCGM_FI_PROF_SM_ACTIVE": 0.83, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.46, "DCGM_FI_PROF_DRAM_ACTIVE": 0.58,
	}
}

// holder is a pod holding one device through a claim the kubelet
// prepared, with one process, written into store, kubelet and proc.
func holder(tb testing.TB, dir string, store *staticStore, kubelet *podresourcesv1.ListPodResourcesResponse, i int, device string, pid int) {
	name, uid := fmt.Sprintf("llm-%d", i), fmt.Sprintf("1b4c0001-0000-4000-8000-%012d", i)
	pod := testobj.Ready(testobj.Running(testobj.Bound(testobj.WithClaimStatus(testobj.WithTemplateClaim(
		testobj.Pod(name, uid), "gpu", "gpu"), "gpu", name+"-gpu"), benchNode)))
	claim := testobj.ReservedFor(testobj.Allocated(testobj.OwnedBy(testobj.Claim(name+"-gpu", "c"+uid[1:], testobj.Request("gpu", testobj.GPUClassName)), pod, "gpu"),
		benchNode, testobj.T0, testobj.Result("gpu", benchNode, device)), pod)
	store.add(pod, claim)
	kubelet.PodResources = append(kubelet.PodResources, &podresourcesv1.PodResources{Name: name, Namespace: pod.Namespace,
		Containers: []*podresourcesv1.ContainerResources{{Name: "server", DynamicResources: []*podresourcesv1.DynamicResource{{
			ClaimName: claim.Name, ClaimNamespace: claim.Namespace,
			ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: testobj.Driver, PoolName: benchNode, DeviceName: device}},
		}}}}})
	cgroup := fmt.Sprintf("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n",
		strings.ReplaceAll(uid, "-", "_"), strings.Repeat(fmt.Sprint(i%10), 64))
	writeFile(tb, filepath.Join(dir, "proc", fmt.Sprint(pid), "cgroup"), []byte(cgroup))
}

// writeScenario writes the machine, the kubelet's report and the host's
// kthreadd (hostPID) into dir.
func writeScenario(tb testing.TB, dir string, spec gpufake.Spec, kubelet *podresourcesv1.ListPodResourcesResponse) {
	writeFile(tb, filepath.Join(dir, "proc", "1", "cgroup"), []byte("0::/init.scope\n"))
	writeFile(tb, filepath.Join(dir, "proc", "2", "comm"), []byte("kthreadd\n"))
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(dir, "fake.json"), raw)
	if raw, err = protojson.Marshal(kubelet); err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, filepath.Join(dir, "podresources.json"), raw)
}

// eightGPUNode writes a full 8-GPU H100 node into dir: DCGM (profiling
// watched) and NVML on the fake, one pod per GPU holding it through a
// claim the kubelet prepared and running one process on it.
func eightGPUNode(tb testing.TB, dir string) *staticStore {
	tb.Helper()
	store := newStore()
	var kubelet podresourcesv1.ListPodResourcesResponse
	spec := gpufake.Spec{Comment: "eightGPUNode", DCGM: &gpufake.DCGMSpec{}, NVML: true}
	var devices []resourceapi.Device
	for i := range 8 {
		uuid := fmt.Sprintf("GPU-8a1b2c3d-0000-4000-8000-%012d", i)
		devices = append(devices, nvidia.WithMinor(nvidia.GPUDevice(nvidia.DeviceName(i), uuid, "NVIDIA H100 80GB HBM3"), i))
		pid := 5000 + i
		holder(tb, dir, store, &kubelet, i, nvidia.DeviceName(i), pid)
		spec.GPUs = append(spec.GPUs, gpufake.GPUSpec{UUID: uuid, Product: "NVIDIA H100 80GB HBM3", Index: i, Fields: h100(),
			Processes: []gpufake.ProcessSpec{{PID: pid, UsedMemoryBytes: 60 << 30}}})
	}
	store.add(nvidia.Slice(benchNode+"-"+testobj.Driver, benchNode, 1, devices...))
	writeScenario(tb, dir, spec, &kubelet)
	return store
}

// migNode writes an H100 with seven 1g.10gb MIG instances into dir, each
// held by its own pod with one process.
func migNode(tb testing.TB, dir string) *staticStore {
	tb.Helper()
	store := newStore()
	var kubelet podresourcesv1.ListPodResourcesResponse
	parent := "GPU-7a1b2c3d-0000-4000-8000-000000000000"
	board := h100()
	delete(board, "DCGM_FI_DEV_GPU_UTIL")
	g := gpufake.GPUSpec{UUID: parent, Product: "NVIDIA H100 80GB HBM3", Index: 0, MIGEnabled: true, Fields: board}
	devices := []resourceapi.Device{nvidia.WithMinor(nvidia.GPUDevice(nvidia.DeviceName(0), parent, "NVIDIA H100 80GB HBM3"), 0)}
	for i := range 7 {
		uuid := fmt.Sprintf("MIG-7a1b2c3d-0000-4000-8000-%012d", i)
		name := nvidia.MIGName(0, "1g.10gb", nvidia.ProfileID(nvidia.H100, "1g.10gb"), i)
		devices = append(devices, nvidia.MIGDevice(name, uuid, parent, "1g.10gb", "NVIDIA H100 80GB HBM3", "9984Mi"))
		pid := 6000 + i
		holder(tb, dir, store, &kubelet, i, name, pid)
		g.MIG = append(g.MIG, gpufake.MIGSpec{UUID: uuid, GI: 7 + i, Profile: "1g.10gb", Placement: i,
			Fields:    map[string]float64{"DCGM_FI_DEV_FB_USED": 7200, "DCGM_FI_DEV_FB_FREE": 2784, "DCGM_FI_DEV_FB_TOTAL": 9984, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.78, "DCGM_FI_PROF_SM_ACTIVE": 0.66, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.32, "DCGM_FI_PROF_DRAM_ACTIVE": 0.44},
			Processes: []gpufake.ProcessSpec{{PID: pid, UsedMemoryBytes: 7 << 30}}})
	}
	store.add(nvidia.Slice(benchNode+"-"+testobj.Driver, benchNode, 1, devices...))
	writeScenario(tb, dir, gpufake.Spec{Comment: "migNode", DCGM: &gpufake.DCGMSpec{Address: "nvidia-dcgm.gpu-operator.svc:5555"}, NVML: true, GPUs: []gpufake.GPUSpec{g}}, &kubelet)
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

// count gathers once and counts the series of the families that a fixture
// mistake would show in.
func count(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "dra_gpu_holder_info":
				if labels["lane"] == "dra" && labels["pod"] != "" && labels["claim"] != "" {
					out[mf.GetName()]++
				}
			case "dra_gpu_pod_memory_used_bytes", "dra_gpu_graphics_engine_active_ratio":
				if labels["pod"] != "" {
					out[mf.GetName()]++
				}
			case "dra_node_claim_conflict", "dra_gpu_isolation_violation":
				out[mf.GetName()]++
			case "dra_gpu_power_watts":
				out[mf.GetName()]++
			}
		}
	}
	return out
}

// TestBenchmarkNodes checks the benchmarks' nodes: every GPU or instance
// held in the dra lane by its own pod, its process memory and profiling
// attributed to it, no conflict or violation (a fixture mistake would show
// as one), and power on the boards only.
func TestBenchmarkNodes(t *testing.T) {
	for name, c := range map[string]struct {
		build func(testing.TB, string) *staticStore
		want  map[string]int
	}{
		"eight-gpus": {eightGPUNode, map[string]int{"dra_gpu_holder_info": 8, "dra_gpu_pod_memory_used_bytes": 8, "dra_gpu_graphics_engine_active_ratio": 8, "dra_gpu_power_watts": 8}},
		"seven-migs": {migNode, map[string]int{"dra_gpu_holder_info": 7, "dra_gpu_pod_memory_used_bytes": 7, "dra_gpu_graphics_engine_active_ratio": 7, "dra_gpu_power_watts": 1}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(New(agentWith(t, dir, c.build(t, dir)).agent, false))
			if got := count(t, reg); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("series per family %v, want %v", got, c.want)
			}
		})
	}
}

// BenchmarkNodeScrape is one scrape of the node agent as `dra-exporter
// node` answers it: the kubelet's List over a real gRPC unix socket, the
// DCGM source's reads (hierarchy, latest values of GPUs and instances) and
// NVML's (MIG handles, processes) on the fake libraries, the /proc cgroup
// join, the claim join, and the text encoding. It reports the series and
// bytes of one scrape and the heap in use after GC with the agent alive.
func BenchmarkNodeScrape(b *testing.B) {
	for _, c := range []struct {
		name  string
		build func(testing.TB, string) *staticStore
	}{{"8-gpus", eightGPUNode}, {"7-mig-instances", migNode}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			reg := prometheus.NewRegistry()
			reg.MustRegister(New(agentWith(b, dir, c.build(b, dir)).agent, false))
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
		})
	}
}
