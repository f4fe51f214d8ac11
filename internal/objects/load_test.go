package objects_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dra-exporter/dra-exporter/internal/objects"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, name, content string) ([]runtime.Object, []objects.Problem) {
	t.Helper()
	objs, problems, err := objects.LoadFiles([]string{writeFile(t, name, content)})
	if err != nil {
		t.Fatalf("LoadFiles: %v", err)
	}
	return objs, problems
}

// describe names the objects as "Kind ns/name".
func describe(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		switch v := o.(type) {
		case *resourceapi.DeviceClass:
			out = append(out, "DeviceClass "+v.Name)
		case *resourceapi.ResourceSlice:
			out = append(out, "ResourceSlice "+v.Name)
		case *resourceapi.ResourceClaim:
			out = append(out, "ResourceClaim "+v.Namespace+"/"+v.Name)
		case *corev1.Pod:
			out = append(out, "Pod "+v.Namespace+"/"+v.Name)
		case *corev1.Node:
			out = append(out, "Node "+v.Name)
		case *corev1.Event:
			out = append(out, "Event "+v.Namespace+"/"+v.Name)
		case *eventsv1.Event:
			out = append(out, "events.k8s.io Event "+v.Namespace+"/"+v.Name)
		default:
			out = append(out, fmt.Sprintf("%T", o))
		}
	}
	return out
}

func noProblems(t *testing.T, problems []objects.Problem) {
	t.Helper()
	for _, p := range problems {
		t.Errorf("unexpected problem: %s", p)
	}
}

func sameList(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects:\n got  %q\n want %q", got, want)
	}
}

const kubectlList = `apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata:
    name: gpu.nvidia.com
  spec:
    selectors:
    - cel:
        expression: device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
    extendedResourceName: nvidia.com/gpu
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata:
    name: node-1-gpu.nvidia.com-x
  spec:
    driver: gpu.nvidia.com
    nodeName: node-1
    pool: {name: node-1, generation: 3, resourceSliceCount: 1}
    devices:
    - name: gpu-0
      attributes:
        type: {string: gpu}
        uuid: {string: GPU-0}
      capacity:
        memory: {value: 80Gi}
- apiVersion: v1
  kind: Pod
  metadata:
    name: llm-0
    namespace: prod
    uid: uid-llm-0
  spec:
    containers:
    - name: main
      image: vllm
    resourceClaims:
    - name: gpu
      resourceClaimTemplateName: llm-gpu
`

func TestLoadKubectlList(t *testing.T) {
	objs, problems := load(t, "cluster.yaml", kubectlList)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"DeviceClass gpu.nvidia.com", "ResourceSlice node-1-gpu.nvidia.com-x", "Pod prod/llm-0"})
	if len(objs) != 3 {
		return
	}
	if c := objs[0].(*resourceapi.DeviceClass); c.Spec.ExtendedResourceName == nil || *c.Spec.ExtendedResourceName != "nvidia.com/gpu" || len(c.Spec.Selectors) != 1 {
		t.Errorf("class decoded as %+v", c.Spec)
	}
	s := objs[1].(*resourceapi.ResourceSlice)
	if s.Spec.Pool.Generation != 3 || len(s.Spec.Devices) != 1 {
		t.Fatalf("slice decoded as %+v", s.Spec)
	}
	if q := s.Spec.Devices[0].Capacity["memory"].Value; q.Value() != 80<<30 {
		t.Errorf("slice decoded as %+v", s.Spec)
	}
	if p := objs[2].(*corev1.Pod); p.UID != "uid-llm-0" || len(p.Spec.ResourceClaims) != 1 {
		t.Errorf("pod decoded as %+v", p)
	}
}

func TestLoadMultiDocumentYAML(t *testing.T) {
	content := `# exported by hand
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
status:
  allocatable:
    nvidia.com/gpu: "8"
---
---
# a document with only a comment
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared-gpu
  namespace: prod
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
---
apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: llm-0.1
  namespace: prod
regarding:
  kind: Pod
  name: llm-0
  namespace: prod
reason: FailedScheduling
note: cannot allocate all claims
type: Warning
eventTime: "2026-12-01T12:00:00.000000Z"
reportingController: default-scheduler
reportingInstance: default-scheduler-1
action: Scheduling
---
null
`
	objs, problems := load(t, "multi.yaml", content)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Node node-1", "ResourceClaim prod/shared-gpu", "events.k8s.io Event prod/llm-0.1"})
}

func TestLoadJSON(t *testing.T) {
	single := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"llm-0","namespace":"prod"},"spec":{"containers":[{"name":"main"}]}}`
	objs, problems := load(t, "pod.json", single)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Pod prod/llm-0"})

	list := `{"apiVersion":"v1","kind":"List","items":[
	  {"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"mig.nvidia.com"},"spec":{}},
	  {"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"prod"},"involvedObject":{"kind":"Pod","name":"llm-0"},"reason":"BackOff"}
	]}`
	objs, problems = load(t, "list.json", list)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"DeviceClass mig.nvidia.com", "Event prod/e"})
}

func TestLoadEmpty(t *testing.T) {
	for name, content := range map[string]string{"empty.yaml": "", "blank.yaml": "\n\n", "separators.yaml": "---\n---\n", "comment.yaml": "# nothing\n"} {
		objs, problems := load(t, name, content)
		if len(objs) != 0 || len(problems) != 0 {
			t.Errorf("%s: %d objects, %d problems, want none", name, len(objs), len(problems))
		}
	}
}

// kubectl get pods -o yaml writes a List whose items carry apiVersion and
// kind; the API itself (kubectl get --raw, client libraries) returns a
// PodList whose items do not. Both are lists of pods.
func TestLoadPodList(t *testing.T) {
	withKinds := `apiVersion: v1
kind: PodList
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a, namespace: prod}
- apiVersion: v1
  kind: Pod
  metadata: {name: b, namespace: prod}
`
	objs, problems := load(t, "pods.yaml", withKinds)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Pod prod/a", "Pod prod/b"})

	fromAPI := `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"123"},"items":[
	  {"metadata":{"name":"a","namespace":"prod","uid":"uid-a"},"spec":{"containers":[{"name":"main"}]}},
	  {"metadata":{"name":"b","namespace":"prod","uid":"uid-b"},"spec":{"containers":[{"name":"main"}]}}
	]}`
	objs, problems = load(t, "pods-raw.json", fromAPI)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Pod prod/a", "Pod prod/b"})
}

func TestLoadV1beta2AsV1(t *testing.T) {
	content := `apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1beta2
  kind: ResourceClaim
  metadata: {name: c, namespace: prod}
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          allocationMode: ExactCount
          count: 2
  status:
    allocation:
      devices:
        results:
        - {request: gpu, driver: gpu.nvidia.com, pool: node-1, device: gpu-0}
- apiVersion: resource.k8s.io/v1beta2
  kind: DeviceClass
  metadata: {name: gpu.nvidia.com}
  spec:
    selectors:
    - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
`
	objs, problems := load(t, "beta2.yaml", content)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"ResourceClaim prod/c", "DeviceClass gpu.nvidia.com"})
	if len(objs) == 2 {
		c := objs[0].(*resourceapi.ResourceClaim)
		r := c.Spec.Devices.Requests
		if len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.DeviceClassName != "gpu.nvidia.com" || r[0].Exactly.Count != 2 {
			t.Errorf("requests decoded as %+v", r)
		}
		if c.Status.Allocation == nil || c.Status.Allocation.Devices.Results[0].Device != "gpu-0" {
			t.Errorf("allocation decoded as %+v", c.Status.Allocation)
		}
	}
}

func TestLoadProblems(t *testing.T) {
	content := `apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: DeviceClass
  metadata: {name: gpu.nvidia.com}
  spec: {}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: bad, namespace: prod}
  spec:
    devices:
      requests: "gpu"
- apiVersion: resource.k8s.io/v1beta1
  kind: ResourceClaim
  metadata: {name: old, namespace: prod}
  spec: {}
- apiVersion: example.com/v1
  kind: GPUCluster
  metadata: {name: fleet}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: vllm, namespace: prod}
- kind: Pod
  metadata: {name: no-version, namespace: prod}
---
key: [unclosed
---
apiVersion: v1
kind: Node
metadata: {name: node-9}
`
	path := writeFile(t, "bundle.yaml", content)
	objs, problems, err := objects.LoadFiles([]string{path})
	if err != nil {
		t.Fatalf("LoadFiles: %v", err)
	}
	sameList(t, describe(objs), []string{"DeviceClass gpu.nvidia.com", "Node node-9"})

	type want struct {
		doc, item int
		what      string
		text      string
	}
	wants := []want{
		{1, 2, "ResourceClaim prod/bad", "malformed object"},
		{1, 3, "ResourceClaim prod/old", "resource.k8s.io/v1beta1 is not supported"},
		{1, 4, "GPUCluster fleet", "unknown kind"},
		{1, 5, "Deployment prod/vllm", objects.ErrIgnoredKind.Error()},
		{1, 6, "Pod prod/no-version", "no apiVersion or kind"},
		{2, 0, "", "malformed YAML"},
	}
	if len(problems) != len(wants) {
		for _, p := range problems {
			t.Logf("problem: %s", p)
		}
		t.Fatalf("%d problems, want %d", len(problems), len(wants))
	}
	for i, w := range wants {
		p := problems[i]
		if p.File != path || p.Doc != w.doc || p.Item != w.item || p.What != w.what {
			t.Errorf("problem %d = {File %s Doc %d Item %d What %q}, want {Doc %d Item %d What %q}", i, p.File, p.Doc, p.Item, p.What, w.doc, w.item, w.what)
		}
		s := p.String()
		loc := fmt.Sprintf("%s: document %d", path, w.doc)
		if w.item > 0 {
			loc += fmt.Sprintf(", item %d", w.item)
		}
		if w.what != "" {
			loc += " (" + w.what + ")"
		}
		if !strings.HasPrefix(s, loc+": ") || !strings.Contains(s, w.text) {
			t.Errorf("problem %d String() = %q, want %q... containing %q", i, s, loc, w.text)
		}
	}
	if !errors.Is(problems[3].Err, objects.ErrIgnoredKind) {
		t.Errorf("the Deployment problem is not ErrIgnoredKind: %v", problems[3].Err)
	}
	if errors.Is(problems[1].Err, objects.ErrIgnoredKind) || errors.Is(problems[2].Err, objects.ErrIgnoredKind) {
		t.Errorf("an unknown or unsupported object is reported as merely ignored")
	}
}

func TestLoadFilesUnreadable(t *testing.T) {
	good := writeFile(t, "good.yaml", kubectlList)
	objs, problems, err := objects.LoadFiles([]string{good, filepath.Join(t.TempDir(), "missing.yaml")})
	if err == nil {
		t.Fatalf("LoadFiles of a missing file: no error (%d objects, %d problems)", len(objs), len(problems))
	}
	if !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("error %q does not name the file", err)
	}
	if _, _, err := objects.LoadFiles([]string{t.TempDir()}); err == nil {
		t.Errorf("LoadFiles of a directory: no error")
	}
}

func TestLoadSeveralFiles(t *testing.T) {
	a := writeFile(t, "a.yaml", kubectlList)
	b := writeFile(t, "b.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: node-2}\n")
	objs, problems, err := objects.LoadFiles([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	noProblems(t, problems)
	if len(objs) != 4 {
		t.Errorf("%d objects from two files, want 4", len(objs))
	}
}

func TestSupported(t *testing.T) {
	for _, o := range []runtime.Object{&resourceapi.DeviceClass{}, &resourceapi.ResourceSlice{}, &resourceapi.ResourceClaim{}, &corev1.Pod{}, &corev1.Node{}, &corev1.Event{}, &eventsv1.Event{}} {
		if !objects.Supported(o) {
			t.Errorf("Supported(%T) = false", o)
		}
	}
	for _, o := range []runtime.Object{&appsv1.Deployment{}, &corev1.ConfigMap{}, &resourceapi.ResourceClaimTemplate{}} {
		if objects.Supported(o) {
			t.Errorf("Supported(%T) = true", o)
		}
	}
}

// The shapes JSON takes when people collect it by hand: appended kubectl
// output, JSON Lines from jq -c, a bare array.
func TestLoadJSONStreams(t *testing.T) {
	pod := func(name string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","namespace":"prod"},"spec":{"containers":[{"name":"main"}]}}`
	}
	list := `{"apiVersion":"v1","kind":"List","items":[` + pod("llm-1") + `]}`
	for name, content := range map[string]string{
		"concat.json": pod("llm-0") + "\n" + list + "\n",
		"lines.jsonl": pod("llm-0") + "\n" + pod("llm-1") + "\n",
		"array.json":  "[" + pod("llm-0") + ",\n" + pod("llm-1") + "]",
	} {
		t.Run(name, func(t *testing.T) {
			objs, problems := load(t, name, content)
			noProblems(t, problems)
			sameList(t, describe(objs), []string{"Pod prod/llm-0", "Pod prod/llm-1"})
		})
	}
}

// A syntax error in a JSON stream keeps what came before and says where
// the rest was lost.
func TestLoadJSONStreamTruncated(t *testing.T) {
	objs, problems := load(t, "cut.json", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu-node-1"}}
{"apiVersion":"v1","kind":"Node","metadata":{"name":`)
	sameList(t, describe(objs), []string{"Node gpu-node-1"})
	if len(problems) != 1 || problems[0].Doc != 2 || !strings.Contains(problems[0].String(), "rest of the file is skipped") {
		t.Errorf("problems: %v", problems)
	}
}

// Windows PowerShell 5 writes `kubectl get -o yaml > f` as UTF-16LE with a BOM.
func TestLoadUTF16(t *testing.T) {
	text := "apiVersion: v1\r\nkind: Node\r\nmetadata:\r\n  name: gpu-node-1\r\n"
	b := []byte{0xff, 0xfe}
	for _, r := range text {
		b = append(b, byte(r), 0)
	}
	objs, problems := load(t, "utf16.yaml", string(b))
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Node gpu-node-1"})
}

func TestLoadYAMLDocumentEndAndNullItems(t *testing.T) {
	objs, problems := load(t, "ends.yaml", `apiVersion: v1
kind: Node
metadata:
  name: gpu-node-1
...
---
apiVersion: v1
kind: PodList
items: null
...
`)
	noProblems(t, problems)
	sameList(t, describe(objs), []string{"Node gpu-node-1"})
}
