package collector

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dra-exporter/dra-exporter/internal/dra"
	nodeagent "github.com/dra-exporter/dra-exporter/internal/node/agent"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
	"github.com/dra-exporter/dra-exporter/internal/node/gpu/gpufake"
	"github.com/dra-exporter/dra-exporter/internal/node/podresources"
	"github.com/dra-exporter/dra-exporter/internal/node/procmap"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

var update = flag.Bool("update", false, "rewrite testdata/node/*/metrics*.prom from the current code")

// staticStore serves a file of objects, trimmed as the node-scoped
// informers trim them.
type staticStore struct {
	pods   []*corev1.Pod
	slices []*objects.Slice
	claims map[string]*resourceapi.ResourceClaim
}

func (s *staticStore) Pods() []*corev1.Pod                           { return s.pods }
func (s *staticStore) Slices() []*objects.Slice                      { return s.slices }
func (s *staticStore) Claims() map[string]*resourceapi.ResourceClaim { return s.claims }
func (s *staticStore) Want([]string)                                 {}

func newStore() *staticStore {
	return &staticStore{claims: map[string]*resourceapi.ResourceClaim{}}
}

func (s *staticStore) add(objs ...any) {
	var t objects.Trimmer
	for _, o := range objs {
		switch o := t.Trim(o).(type) {
		case *corev1.Pod:
			s.pods = append(s.pods, o)
		case *objects.Slice:
			s.slices = append(s.slices, o)
		case *resourceapi.ResourceClaim:
			s.claims[nodeagent.ClaimKey(o.Namespace, o.Name)] = o
		}
	}
}

func loadStore(t testing.TB, path string) *staticStore {
	t.Helper()
	objs, problems, err := objects.LoadFiles([]string{path})
	if err != nil || len(problems) > 0 {
		t.Fatalf("%s: %v %v", path, err, problems)
	}
	s := newStore()
	for _, o := range objs {
		s.add(o)
	}
	return s
}

// node is a scenario's agent with its parts.
type node struct {
	agent   *nodeagent.Agent
	machine *gpufake.Machine // nil with a recorded source
	clock   *gpufake.Clock
	store   *staticStore
	kubelet *podresources.Server // nil: the socket is absent
}

// step moves the machine to its next step and the clock a minute on; the
// step's directory (step<N>/) may replace the API objects and the
// kubelet's report.
func (n *node) step(t testing.TB, dir string, i int) bool {
	if n.machine == nil {
		return false
	}
	if _, ok := n.machine.Step(); !ok {
		return false
	}
	n.clock.Add(time.Minute)
	stepDir := filepath.Join(dir, fmt.Sprintf("step%d", i))
	if objs := filepath.Join(stepDir, "objects.yaml"); exists(objs) {
		*n.store = *loadStore(t, objs)
	}
	if exists(filepath.Join(stepDir, "podresources.json")) && n.kubelet != nil {
		n.kubelet.Set(readPodResources(t, stepDir))
	}
	return true
}

func readPodResources(t testing.TB, dir string) *podresourcesv1.ListPodResourcesResponse {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "podresources.json"))
	if err != nil {
		t.Fatal(err)
	}
	var resp podresourcesv1.ListPodResourcesResponse
	if err := protojson.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("%s/podresources.json: %v", dir, err)
	}
	return &resp
}

// agentWith wires the agent of the node whose kubelet, GPU and /proc files
// are in dir and whose API objects are store, with real parts: a
// pod-resources gRPC server on a unix socket (absent when dir has no
// podresources.json), the GPU source (fake.json: the DCGM and NVML sources
// with --gpu.source=auto over the fake libraries; gpu.json: the recorded
// source) and the scenario's /proc tree.
func agentWith(t testing.TB, dir string, store *staticStore) *node {
	t.Helper()
	n := &node{clock: gpufake.NewClock(time.Unix(1_800_000_000, 0)), store: store}
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	if exists(filepath.Join(dir, "podresources.json")) {
		srv, err := podresources.Serve(socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		srv.Set(readPodResources(t, dir))
		n.kubelet = srv
	}
	client, err := podresources.NewClient(socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	var src gpu.Source
	switch {
	case exists(filepath.Join(dir, "fake.json")):
		if n.machine, err = gpufake.Open(filepath.Join(dir, "fake.json")); err != nil {
			t.Fatal(err)
		}
		dcgm, nvml := n.machine.Libraries()
		src = gpu.NewAuto(dcgm, nvml, gpu.Options{HostEngine: n.machine.Address(), Now: n.clock.Now, Timeout: 2 * time.Second})
	case exists(filepath.Join(dir, "gpu.json")):
		if src, err = gpu.NewRecorded(filepath.Join(dir, "gpu.json")); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("%s: a scenario needs fake.json or gpu.json", dir)
	}
	t.Cleanup(func() { _ = src.Close() })
	cfg := nodeagent.Config{
		Node: "gpu-node-1", Store: store, Kubelet: client, GPU: src,
		Proc: &procmap.Mapper{Root: filepath.Join(dir, "proc")}, DevicePluginResources: dra.Resources{"nvidia.com/gpu"},
	}
	if cp := filepath.Join(dir, "checkpoint.json"); exists(cp) {
		cfg.DriverCheckpoint = cp // the NVIDIA driver's, --nvidia.checkpoint-file
	}
	n.agent = nodeagent.New(cfg)
	return n
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestNodeGolden renders every scenario of testdata/node and compares the
// whole exposition (no name filter) with its metrics.prom, and after each
// step of its fake machine with metrics.step<N>.prom; -update rewrites.
func TestNodeGolden(t *testing.T) {
	dirs, err := filepath.Glob("../../../testdata/node/*/objects.yaml")
	if err != nil || len(dirs) < 18 {
		t.Fatalf("want the eighteen node scenarios, found %d: %v", len(dirs), err)
	}
	for _, d := range dirs {
		dir := filepath.Dir(d)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			n := agentWith(t, dir, loadStore(t, filepath.Join(dir, "objects.yaml")))
			c := New(n.agent, false)
			compareGolden(t, c, filepath.Join(dir, "metrics.prom"))
			for i := 1; n.step(t, dir, i); i++ {
				compareGolden(t, c, filepath.Join(dir, fmt.Sprintf("metrics.step%d.prom", i)))
			}
		})
	}
}

// compareGolden scrapes once (a scrape reads the GPU source, which a
// step's reconnect depends on) and compares and lints that scrape.
func compareGolden(t *testing.T, c prometheus.Collector, golden string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := familiesText(t, mfs)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/node/collector -run TestNodeGolden -update)", err)
	}
	same := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil })
	if err := testutil.GatherAndCompare(same, bytes.NewReader(want)); err != nil {
		t.Errorf("differs from %s (rerun with -update and review the diff): %v", golden, err)
	}
	problems, err := testutil.GatherAndLint(same)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func familiesText(t testing.TB, mfs []*dto.MetricFamily) []byte {
	t.Helper()
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return []byte(b.String())
}
