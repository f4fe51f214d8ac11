package collector

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/dra-exporter/dra-exporter/internal/gpu"
	"github.com/dra-exporter/dra-exporter/internal/nodeagent"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/podresources"
	"github.com/dra-exporter/dra-exporter/internal/procmap"
)

var updateNode = flag.Bool("update", false, "rewrite testdata/node/*/metrics.prom from the current code")

// staticStore serves a file of objects, as the node-scoped informers would.
type staticStore struct {
	pods   []*corev1.Pod
	slices []*resourceapi.ResourceSlice
	claims map[string]*resourceapi.ResourceClaim
}

func (s *staticStore) Pods() []*corev1.Pod                           { return s.pods }
func (s *staticStore) Slices() []*resourceapi.ResourceSlice          { return s.slices }
func (s *staticStore) Claims() map[string]*resourceapi.ResourceClaim { return s.claims }
func (s *staticStore) Want([]string)                                 {}

func loadStore(t *testing.T, path string) *staticStore {
	t.Helper()
	objs, problems, err := objects.LoadFiles([]string{path})
	if err != nil || len(problems) > 0 {
		t.Fatalf("%s: %v %v", path, err, problems)
	}
	s := &staticStore{claims: map[string]*resourceapi.ResourceClaim{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			s.pods = append(s.pods, o)
		case *resourceapi.ResourceSlice:
			s.slices = append(s.slices, o)
		case *resourceapi.ResourceClaim:
			s.claims[nodeagent.ClaimKey(o.Namespace, o.Name)] = o
		}
	}
	return s
}

// scenarioAgent wires the agent of a testdata/node scenario with real
// parts: a pod-resources gRPC server on a unix socket (absent when the
// scenario has no podresources.json), the recorded GPU source (DCGM absent
// when there is no gpu.json) and the scenario's /proc tree.
func scenarioAgent(t *testing.T, dir string) *nodeagent.Agent {
	t.Helper()
	return agentWith(t, dir, loadStore(t, filepath.Join(dir, "objects.yaml")))
}

// agentWith wires the agent of the node whose kubelet, GPU and /proc files
// are in dir and whose API objects are store.
func agentWith(t testing.TB, dir string, store *staticStore) *nodeagent.Agent {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	if raw, err := os.ReadFile(filepath.Join(dir, "podresources.json")); err == nil {
		var resp podresourcesv1.ListPodResourcesResponse
		if err := protojson.Unmarshal(raw, &resp); err != nil {
			t.Fatalf("podresources.json: %v", err)
		}
		srv, err := podresources.Serve(socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		srv.Set(&resp)
	}
	client, err := podresources.NewClient(socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	var src gpu.Source = gpu.Unavailable{SourceName: "dcgm", Reason: errors.New("dcgm init: libdcgm.so.4 not found")}
	if _, err := os.Stat(filepath.Join(dir, "gpu.json")); err == nil {
		if src, err = gpu.NewRecorded(filepath.Join(dir, "gpu.json")); err != nil {
			t.Fatal(err)
		}
	}
	return nodeagent.New(nodeagent.Config{
		Node: "gpu-node-1", Store: store,
		Kubelet: client, GPU: src, Proc: &procmap.Mapper{Root: filepath.Join(dir, "proc")},
	})
}

// TestNodeGolden renders every scenario of testdata/node and compares the
// whole exposition (no name filter) with its metrics.prom; -update rewrites.
func TestNodeGolden(t *testing.T) {
	dirs, err := filepath.Glob("../testdata/node/*/objects.yaml")
	if err != nil || len(dirs) < 11 {
		t.Fatalf("want the eleven node scenarios, found %d: %v", len(dirs), err)
	}
	for _, d := range dirs {
		dir := filepath.Dir(d)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c := NewNode(scenarioAgent(t, dir), false)
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)
			got := gatherText(t, reg)
			golden := filepath.Join(dir, "metrics.prom")
			if *updateNode {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./collector -run TestNodeGolden -update)", err)
			}
			if err := testutil.CollectAndCompare(c, bytes.NewReader(want)); err != nil {
				t.Errorf("differs from %s (rerun with -update and review the diff): %v", golden, err)
			}
			problems, err := testutil.CollectAndLint(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

func gatherText(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return []byte(b.String())
}
