package classify_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/nvidia"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// fuzzBytes reads choices from the fuzz input; past its end every choice
// is 0, so short inputs still make small, valid worlds.
type fuzzBytes struct {
	data []byte
	i    int
}

func (g *fuzzBytes) byte() byte {
	if g.i >= len(g.data) {
		return 0
	}
	b := g.data[g.i]
	g.i++
	return b
}

func (g *fuzzBytes) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return int(g.byte()) % n
}

func (g *fuzzBytes) coin() bool { return g.byte()&1 == 1 }

// oneIn is true with probability 1/n (never once the input is exhausted).
func (g *fuzzBytes) oneIn(n int) bool { return g.intn(n) == n-1 }

func pick[T any](g *fuzzBytes, list []T) T { return list[g.intn(len(list))] }

var fuzzClasses = []struct{ name, expr string }{
	{GPUClassName, nvidia.GPUClassSelector},
	{MIGClassName, nvidia.MIGClassSelector},
	{"h100", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"},
	{"profiled", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}, // runtime error on full GPUs
	{"broken", "device.driver =="},                                          // compile error
	{"big", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"},
}

var fuzzRequestSelectors = []string{
	"",
	"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0",
	"device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')",
	"device.attributes['gpu.nvidia.com'].profile == '3g.20gb'",
	"device.attributes['gpu.nvidia.com'].uuid.startsWith('GPU-0')",
	"device.driver ==",
}

var fuzzExtendedResources = []string{"", GPUResource, "example.com/big-gpu", resourceapi.ResourceDeviceClassPrefix + GPUClassName}

// fuzzWorld is a well-formed set of objects, plus what a second build
// feeds around them: older versions of some objects (stale) and objects
// added then deleted (decoys).
type fuzzWorld struct {
	final  []any
	stale  map[int][]any // index in final -> versions to upsert before it
	decoys []any
}

func (w *fuzzWorld) add(obj any, stale ...any) {
	if len(stale) > 0 {
		w.stale[len(w.final)] = stale
	}
	w.final = append(w.final, obj)
}

func genWorld(g *fuzzBytes) *fuzzWorld {
	w := &fuzzWorld{stale: map[int][]any{}}
	var classNames []string
	for _, fc := range fuzzClasses {
		if !g.coin() {
			continue
		}
		c := DeviceClass(fc.name, fc.expr)
		if ext := pick(g, fuzzExtendedResources[:3]); ext != "" {
			c.Spec.ExtendedResourceName = Ptr(ext)
		}
		classNames = append(classNames, fc.name)
		var stale []any
		if g.oneIn(4) {
			stale = append(stale, DeviceClass(fc.name, "device.driver == 'other.example.com'"))
		}
		w.add(c, stale...)
	}
	requestClasses := append(slices.Clone(classNames), "missing-class")

	nNodes := 1 + g.intn(3)
	nodeNames := make([]string, nNodes)
	for i := range nodeNames {
		nodeNames[i] = fmt.Sprintf("node-%d", i)
		if g.coin() {
			w.add(Node(nodeNames[i], int64(g.intn(3))))
		}
	}
	if g.coin() {
		w.add(Node("dp-node", int64(1+g.intn(8))))
	}
	pools := append(slices.Clone(nodeNames), "fabric")

	for i, nn := range nodeNames {
		for j, n := 0, 1+g.intn(2); j < n; j++ {
			s := genSlice(g, fmt.Sprintf("%s-s%d", nn, j), nn, i)
			var stale []any
			if g.oneIn(4) {
				old := genSlice(g, s.Name, pick(g, nodeNames), i)
				stale = append(stale, old)
			}
			w.add(s, stale...)
		}
	}

	// Pods.
	type podInfo struct {
		obj       *corev1.Pod
		templates []int // pod claim entries from a template
		extended  bool
	}
	var pods []podInfo
	for k, n := 0, g.intn(7); k < n; k++ {
		name := fmt.Sprintf("p-%d", k)
		p := Pod(name, "uid-"+name)
		info := podInfo{}
		for j, n := 0, g.intn(3); j < n; j++ {
			if g.coin() {
				p = WithTemplateClaim(p, fmt.Sprintf("c%d", j), "tmpl")
				info.templates = append(info.templates, j)
				switch g.intn(3) {
				case 1:
					p = WithClaimStatus(p, fmt.Sprintf("c%d", j), fmt.Sprintf("%s-c%d", name, j))
				case 2:
					p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: fmt.Sprintf("c%d", j)})
				}
			} else {
				p = WithNamedClaim(p, fmt.Sprintf("c%d", j), fmt.Sprintf("shared-%d", g.intn(3)))
			}
		}
		if g.coin() {
			res := pick(g, fuzzExtendedResources[1:])
			p = WithLimit(p, res, int64(1+g.intn(2)))
			info.extended = true
			if g.oneIn(3) {
				p = WithExtendedClaimStatus(p, name+"-ext")
			}
		}
		if r := g.intn(nNodes + 2); r < nNodes {
			p = Bound(p, nodeNames[r])
		} else if r == nNodes {
			p = Bound(p, "dp-node")
		}
		switch g.intn(6) {
		case 1:
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		case 2:
			p = Running(p)
		case 3:
			p = Ready(p)
		case 4:
			p = Finished(p, corev1.PodSucceeded)
		case 5:
			p = Finished(p, corev1.PodFailed)
		}
		if g.coin() {
			p.Labels = map[string]string{"app": pick(g, []string{"llm", "batch"}), "other": "x"}
		}
		if g.oneIn(5) {
			p.DeletionTimestamp = Ptr(metav1.NewTime(T0))
		}
		var stale []any
		switch g.intn(4) {
		case 1: // seen earlier, before it was bound or started
			old := Pod(name, "uid-"+name)
			old.Spec = *p.Spec.DeepCopy()
			old.Spec.NodeName = ""
			stale = append(stale, old)
		case 2: // a previous pod of the same name
			stale = append(stale, WithTemplateClaim(Pod(name, "uid-"+name+"-previous"), "c0", "tmpl"))
		}
		info.obj = p
		pods = append(pods, info)
		w.add(p, stale...)
	}

	// Claims: generated for pod claim entries, shared by name, and made
	// by the scheduler for extended resources.
	addClaim := func(c *resourceapi.ResourceClaim) {
		c = genClaimState(g, c, requestClasses, pools, nodeNames, pods2objs(pods, func(p podInfo) *corev1.Pod { return p.obj }))
		var stale []any
		switch g.intn(5) {
		case 1: // an earlier version, before allocation
			stale = append(stale, Deallocated(c))
		case 2: // a deleted claim of the same name
			old := c.DeepCopy()
			old.UID = types.UID(string(c.UID) + "-previous")
			stale = append(stale, old)
		}
		w.add(c, stale...)
	}
	for _, p := range pods {
		for _, j := range p.templates {
			if !g.coin() {
				continue
			}
			owner := p.obj
			if g.oneIn(5) {
				owner = Pod(owner.Name, "uid-gone-"+owner.Name)
			}
			addClaim(OwnedBy(Claim(fmt.Sprintf("%s-c%d", p.obj.Name, j), fmt.Sprintf("uid-claim-%s-c%d", p.obj.Name, j), genRequests(g, requestClasses)...), owner, fmt.Sprintf("c%d", j)))
		}
		if p.extended && g.coin() {
			addClaim(ExtendedFor(Claim(p.obj.Name+"-ext", "uid-claim-"+p.obj.Name+"-ext", Request("container-0-request-0", pick(g, requestClasses))), p.obj))
		}
	}
	for k := 0; k < 3; k++ {
		if g.coin() {
			addClaim(Claim(fmt.Sprintf("shared-%d", k), fmt.Sprintf("uid-shared-%d", k), genRequests(g, requestClasses)...))
		}
	}
	if g.oneIn(3) {
		// An orphan generated claim whose pod is long gone.
		addClaim(OwnedBy(Claim("orphan", "uid-orphan"), Pod("gone", "uid-gone"), "c0"))
	}

	// Events.
	reasons := []struct{ reason, message string }{
		{vocab.FailedScheduling, "0/3 nodes are available: cannot allocate all claims"},
		{vocab.FailedPrepareDynamicResources, "NodePrepareResources failed"},
		{vocab.FailedResourceClaimCreation, "template not found"},
		{"FailedCreatePodSandBox", "failed to inject CDI devices"},
		{"BackOff", "Back-off restarting failed container"},
	}
	if len(pods) > 0 {
		for k, n := 0, g.intn(5); k < n; k++ {
			p := pick(g, pods).obj
			r := pick(g, reasons)
			at := T0.Add(-time.Duration(g.intn(30)) * time.Minute)
			if g.oneIn(3) {
				p = Pod(p.Name, "uid-previous")
			}
			name := fmt.Sprintf("ev-%d", k)
			if g.oneIn(3) {
				w.add(&eventsv1.Event{
					ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: name},
					Regarding:  corev1.ObjectReference{Kind: "Pod", Namespace: NS, Name: p.Name, UID: p.UID},
					Reason:     r.reason, Note: r.message, Type: corev1.EventTypeWarning,
					EventTime: metav1.NewMicroTime(at), ReportingController: "default-scheduler",
				})
			} else {
				w.add(Event(name, p, r.reason, r.message, at))
			}
		}
	}

	// Decoys: added, then deleted, in the shuffled build only.
	if g.coin() {
		// A newer generation of node-0's pool, later withdrawn.
		w.decoys = append(w.decoys, genSlice(g, "decoy-slice", nodeNames[0], 0, 9))
	}
	if g.coin() {
		w.decoys = append(w.decoys, Allocated(Claim("decoy-claim", "uid-decoy-claim"), nodeNames[0], T0, Result("gpu", nodeNames[0], "gpu-0")))
	}
	if g.coin() {
		w.decoys = append(w.decoys, DeviceClass("decoy-class", "device.driver == 'gpu.nvidia.com'"))
	}
	if g.coin() {
		w.decoys = append(w.decoys, WithTemplateClaim(Pod("decoy-pod", "uid-decoy-pod"), "c0", "tmpl"), Node("decoy-node", 4))
	}
	return w
}

func pods2objs[T any](in []T, f func(T) *corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

func genSlice(g *fuzzBytes, name, nodeName string, nodeIdx int, generation ...int64) *resourceapi.ResourceSlice {
	gen := int64(1 + g.intn(2))
	if len(generation) > 0 {
		gen = generation[0]
	}
	s := Slice(name, nodeName, gen)
	if g.oneIn(5) {
		s.Spec.NodeName = nil
		s.Spec.AllNodes = Ptr(true)
		s.Spec.Pool.Name = "fabric"
	}
	if g.oneIn(3) {
		s.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "cs-0", Counters: map[string]resourceapi.Counter{"memory": {Value: resource.MustParse("40Gi")}}}}
	}
	used := map[string]bool{}
	for k, n := 0, 1+g.intn(4); k < n; k++ {
		dname := fmt.Sprintf("gpu-%d", g.intn(4))
		if used[dname] {
			continue
		}
		used[dname] = true
		uuid := fmt.Sprintf("GPU-%d-%s", nodeIdx, dname)
		var d resourceapi.Device
		if g.coin() {
			d = GPUDevice(dname, uuid)
			d.Attributes["productName"] = StrAttr(pick(g, []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"}))
		} else {
			d = MIGDevice(dname, "MIG"+uuid[3:], uuid, pick(g, []string{"1g.5gb", "3g.20gb"}), pick(g, []string{"5Gi", "20Gi"}))
		}
		d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse(pick(g, []string{"5Gi", "20Gi", "40Gi", "80Gi"}))}
		if g.oneIn(3) {
			d = Consumes(d, pick(g, []string{"cs-0", "cs-unpublished"}), pick(g, []string{"20Gi", "40Gi"}))
		}
		if g.oneIn(5) {
			d.Taints = []resourceapi.DeviceTaint{{Key: "xid", Effect: pick(g, []resourceapi.DeviceTaintEffect{
				resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone})}}
		}
		if g.oneIn(6) {
			d.AllowMultipleAllocations = Ptr(true)
		}
		if g.oneIn(4) {
			// Qualified attribute names, as some drivers publish them.
			attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
			for k, v := range d.Attributes {
				attrs[resourceapi.QualifiedName(Driver+"/"+string(k))] = v
			}
			d.Attributes = attrs
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

func genRequests(g *fuzzBytes, classes []string) []resourceapi.DeviceRequest {
	var out []resourceapi.DeviceRequest
	for r, n := 0, 1+g.intn(2); r < n; r++ {
		name := fmt.Sprintf("r%d", r)
		if g.oneIn(4) {
			var subs []resourceapi.DeviceSubRequest
			for _, sub := range []string{"a", "b"} {
				sr := resourceapi.DeviceSubRequest{Name: sub, DeviceClassName: pick(g, classes), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
				if sel := pick(g, fuzzRequestSelectors); sel != "" {
					sr.Selectors = CEL(sel)
				}
				subs = append(subs, sr)
			}
			out = append(out, resourceapi.DeviceRequest{Name: name, FirstAvailable: subs})
			continue
		}
		req := Request(name, pick(g, classes))
		if sel := pick(g, fuzzRequestSelectors); sel != "" {
			req.Exactly.Selectors = CEL(sel)
		}
		if g.oneIn(4) {
			req.Exactly.AllocationMode, req.Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
		} else {
			req.Exactly.Count = int64(1 + g.intn(2))
		}
		if g.oneIn(6) {
			req.Exactly.AdminAccess = Ptr(true)
		}
		out = append(out, req)
	}
	return out
}

// genClaimState allocates and reserves the claim at random, referencing
// devices that may or may not be published and pods that may or may not
// exist.
func genClaimState(g *fuzzBytes, c *resourceapi.ResourceClaim, classes, pools, nodes []string, pods []*corev1.Pod) *resourceapi.ResourceClaim {
	if !g.coin() {
		return c
	}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Spec.Devices.Requests {
		reqName := r.Name
		admin := false
		if r.Exactly != nil {
			admin = r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess
		} else {
			reqName += "/" + pick(g, []string{"a", "b"})
		}
		for k, n := 0, 1+g.intn(2); k < n; k++ {
			res := Result(reqName, pick(g, pools), fmt.Sprintf("gpu-%d", g.intn(4)))
			if admin {
				res.AdminAccess = Ptr(true)
			}
			results = append(results, res)
		}
	}
	var at time.Time
	if g.coin() {
		at = T0.Add(-time.Duration(g.intn(60)) * time.Minute)
	}
	nodeName := ""
	if g.coin() {
		nodeName = pick(g, nodes)
	}
	c = Allocated(c, nodeName, at, results...)
	var holders []*corev1.Pod
	for _, p := range pods {
		if g.oneIn(3) {
			if g.oneIn(4) {
				p = Pod(p.Name, "uid-"+p.Name+"-previous")
			}
			holders = append(holders, p)
		}
	}
	if g.oneIn(4) {
		holders = append(holders, Pod("ghost", "uid-ghost"))
	}
	return ReservedFor(c, holders...)
}

// op is one index change.
type op struct {
	obj    any
	delete bool
}

// shuffledOps interleaves the objects in a random order; an object's older
// versions stay before it, and each decoy is deleted some time after it was
// added.
func shuffledOps(w *fuzzWorld, rng *rand.Rand) []op {
	var queues [][]op
	for i, obj := range w.final {
		var q []op
		for _, s := range w.stale[i] {
			q = append(q, op{obj: s})
		}
		queues = append(queues, append(q, op{obj: obj}))
	}
	for _, d := range w.decoys {
		queues = append(queues, []op{{obj: d}, {obj: d, delete: true}})
	}
	var out []op
	for len(queues) > 0 {
		i := rng.IntN(len(queues))
		out = append(out, queues[i][0])
		if queues[i] = queues[i][1:]; len(queues[i]) == 0 {
			queues = slices.Delete(queues, i, i+1)
		}
	}
	return out
}

// recordingHandler keeps every log record: a collector that fails or
// panics is logged by the Exporter, which otherwise hides it.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// checkingObserver fails on observations outside the contract.
type checkingObserver struct {
	t   *testing.T
	now func() time.Time
}

func (o checkingObserver) ObserveAllocation(class string, d time.Duration) {
	if class == "" || d < 0 {
		o.t.Errorf("ObserveAllocation(%q, %v)", class, d)
	}
}

func (o checkingObserver) ObserveRelease(class, stage string, d time.Duration) {
	if class == "" || d < 0 || (stage != index.StageUnreserved && stage != index.StageDeallocated) {
		o.t.Errorf("ObserveRelease(%q, %q, %v)", class, stage, d)
	}
}

func (o checkingObserver) ObservePodStartup(lane, stage string, d time.Duration) {
	if d < 0 || !slices.Contains(index.StartupStages, stage) ||
		(lane != index.LaneDRA && lane != index.LaneDRAExtended && lane != index.LaneDevicePlugin) {
		o.t.Errorf("ObservePodStartup(%q, %q, %v)", lane, stage, d)
	}
}

var fuzzTrimmer = objects.Trimmer{PodLabels: []string{"app"}}

func fuzzCollectors() []engine.Collector {
	return []engine.Collector{
		collector.NewDeviceCollector(collector.DefaultAttributeLabels),
		collector.NewDeviceClassCollector(),
		collector.NewClaimCollector(),
		collector.NewBlockedCollector(),
		collector.NewLeakCollector(5 * time.Minute),
		collector.NewLaneCollector(),
		collector.NewPodCollector([]string{"app"}),
	}
}

func apply(t *testing.T, ix *index.Index, o op, live bool) {
	t.Helper()
	obj := fuzzTrimmer.Trim(o.obj)
	var err error
	if o.delete {
		err = ix.Delete(obj)
	} else {
		err = ix.Upsert(obj, live)
	}
	if err != nil {
		t.Fatalf("index: %v", err)
	}
}

func render(t *testing.T, ix *index.Index, what string) string {
	t.Helper()
	h := &recordingHandler{}
	out, err := engine.Render(engine.NewExporter(ix, func() time.Time { return T0 }, false, slog.New(h), fuzzCollectors()...))
	if err != nil {
		t.Fatalf("%s: render: %v", what, err)
	}
	for _, m := range h.msgs {
		t.Errorf("%s: exporter logged: %s", what, m)
	}
	return string(out)
}

func checkSnapshot(t *testing.T, s *index.Snapshot) {
	t.Helper()
	for _, v := range classify.Blocked(s) {
		if !slices.Contains(classify.Reasons, v.Reason) {
			t.Errorf("pod %s: reason %q is not in classify.Reasons", v.Pod.Key, v.Reason)
		}
		if v.Layer != v.Reason.Layer() || v.Layer == "" {
			t.Errorf("pod %s: layer %q, reason %s belongs to %q", v.Pod.Key, v.Layer, v.Reason, v.Reason.Layer())
		}
		if !v.DRA || (v.Lane != index.LaneDRA && v.Lane != index.LaneDRAExtended) {
			t.Errorf("pod %s: blocked but not a DRA pod (lane %q)", v.Pod.Key, v.Lane)
		}
		if v.Pod.Ready() || v.Pod.Terminal() || v.Pod.Obj.DeletionTimestamp != nil {
			t.Errorf("pod %s: blocked although Ready=%v Terminal=%v deleting=%v", v.Pod.Key, v.Pod.Ready(), v.Pod.Terminal(), v.Pod.Obj.DeletionTimestamp != nil)
		}
	}
	for _, p := range s.Pods {
		v := classify.Pod(s, p)
		if v.Blocked && !slices.Contains(classify.Reasons, v.Reason) {
			t.Errorf("pod %s: reason %q", p.Key, v.Reason)
		}
		if err := classify.Format(&bytes.Buffer{}, v); err != nil {
			t.Errorf("Format: %v", err)
		}
	}
	for _, l := range classify.Leaks(s, T0, 5*time.Minute) {
		if !slices.Contains(classify.LeakReasons, l.Reason) {
			t.Errorf("claim %s: leak reason %q", l.Claim.Key, l.Reason)
		}
	}
	perClass := map[string]int{}
	for _, row := range allocator.Of(s).ClassCapacity() {
		if row.Total < 0 || row.Allocated < 0 || row.Free < 0 || row.Allocated+row.Free > row.Total {
			t.Errorf("ClassCapacity row %+v: want 0 <= allocated+free <= total", row)
		}
		perClass[row.DeviceClass] += row.Total
	}
	for _, c := range s.Classes {
		if n := len(s.ClassDevices(c.Name)); perClass[c.Name] != n {
			t.Errorf("class %s: ClassCapacity totals %d, the class selects %d devices", c.Name, perClass[c.Name], n)
		}
	}
	type cell struct{ class, node string }
	dra := map[cell]allocator.Capacity{}
	ext := map[cell]int{}
	for _, row := range allocator.Of(s).LaneCapacity() {
		if row.Total < 0 || row.Allocated < 0 || row.Free < 0 {
			t.Errorf("LaneCapacity row %+v is negative", row)
		}
		switch row.Lane {
		case index.LaneDRA:
			dra[cell{row.DeviceClass, row.Node}] = row
		case index.LaneDRAExtended:
			ext[cell{row.DeviceClass, row.Node}] += row.Allocated
		case index.LaneDevicePlugin:
			if row.Free > row.Total {
				t.Errorf("LaneCapacity row %+v: free > total", row)
			}
		default:
			t.Errorf("LaneCapacity row with lane %q", row.Lane)
		}
	}
	for k, row := range dra {
		if row.Allocated+row.Free+ext[k] > row.Total {
			t.Errorf("lanes on %v: dra allocated %d + free %d + dra-extended allocated %d > total %d", k, row.Allocated, row.Free, ext[k], row.Total)
		}
	}
	for k, n := range ext {
		if _, ok := dra[k]; !ok {
			t.Errorf("dra-extended allocated %d on %v without a dra row", n, k)
		}
	}
}

func runFuzzIndex(t *testing.T, data []byte) {
	g := &fuzzBytes{data: data}
	w := genWorld(g)
	h := fnv.New64a()
	h.Write(data)
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x5eed))
	cfg := index.Config{Now: func() time.Time { return T0 }, DevicePluginResources: []string{GPUResource}}

	// A: the final objects in generation order, as an initial list.
	a := index.New(cfg)
	for _, obj := range w.final {
		apply(t, a, op{obj: obj}, false)
	}
	// B: shuffled, with older versions and decoys.
	ops := shuffledOps(w, rng)
	b := index.New(cfg)
	for _, o := range ops {
		apply(t, b, o, false)
	}

	sa := a.Snapshot()
	checkSnapshot(t, sa)
	checkSnapshot(t, b.Snapshot())
	ra, rb := render(t, a, "in order"), render(t, b, "shuffled")
	if ra != rb {
		t.Errorf("the metrics depend on the order objects arrived in:\n%s", diffLines(ra, rb))
	}

	// C: the same changes live, with a ticking clock and the latency
	// tracker on; then everything is deleted.
	now := T0.Add(-time.Hour)
	clock := func() time.Time { return now }
	c := index.New(index.Config{Now: clock, Observer: checkingObserver{t: t, now: clock}, DevicePluginResources: []string{GPUResource}})
	for _, o := range ops {
		now = now.Add(time.Duration(1+rng.IntN(3000)) * time.Millisecond)
		apply(t, c, o, true)
	}
	checkSnapshot(t, c.Snapshot())
	render(t, c, "live")
	final := slices.Clone(w.final)
	rng.Shuffle(len(final), func(i, j int) { final[i], final[j] = final[j], final[i] })
	for _, obj := range final {
		now = now.Add(time.Second)
		apply(t, c, op{obj: obj, delete: true}, true)
	}
	if s := c.Snapshot(); len(s.Classes)+len(s.Devices)+len(s.Claims)+len(s.Pods)+len(s.Nodes)+len(s.Events) != 0 {
		t.Errorf("after deleting every object: %d classes, %d devices, %d claims, %d pods, %d nodes, %d events",
			len(s.Classes), len(s.Devices), len(s.Claims), len(s.Pods), len(s.Nodes), len(s.Events))
	}
}

func diffLines(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range la {
		if !slices.Contains(lb, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range lb {
		if !slices.Contains(la, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 40 {
		out = append(out[:40], "...")
	}
	return strings.Join(out, "\n")
}

// FuzzIndex builds random, well-formed clusters and checks the index,
// classifier and collectors against their contracts. `make fuzz` runs it.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("dra-exporter"))
	seq := make([]byte, 256)
	for i := range seq {
		seq[i] = byte(i)
	}
	f.Add(seq)
	f.Add(bytes.Repeat([]byte{1, 3, 5, 7, 9, 11, 13, 2, 4, 6}, 40))
	f.Add(bytes.Repeat([]byte{255, 1, 2, 254, 3, 0, 7}, 60))
	f.Add(bytes.Repeat([]byte{1}, 300))
	f.Fuzz(runFuzzIndex)
}
