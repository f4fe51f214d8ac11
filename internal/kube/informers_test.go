package kube

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// fakeAPI is one resource of an API server, as a ListerWatcher sees it: it
// can be killed (calls are refused, open watches end), come back without
// the events of its past (watches from an older resourceVersion get 410
// Gone, as a restarted API server's watch cache answers), and change.
type fakeAPI struct {
	resource string
	mu       sync.Mutex
	objs     map[string]runtime.Object
	rv       int
	// since: the oldest resourceVersion a watch may resume from.
	since    int
	down     bool
	watchers []*watch.RaceFreeFakeWatcher
	lists    int
}

func newFakeAPI(resource string, objs ...runtime.Object) *fakeAPI {
	f := &fakeAPI{resource: resource, objs: map[string]runtime.Object{}}
	for _, o := range objs {
		f.rv++
		m, _ := metaOf(o)
		m.SetResourceVersion(strconv.Itoa(f.rv))
		f.objs[m.GetNamespace()+"/"+m.GetName()] = o
	}
	return f
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

func refused() error {
	return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/pods", Err: syscall.ECONNREFUSED}
}

func (f *fakeAPI) IsWatchListSemanticsUnSupported() bool { return true }

func (f *fakeAPI) List(metav1.ListOptions) (runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, refused()
	}
	f.lists++
	var items []runtime.Object
	keys := make([]string, 0, len(f.objs))
	for k := range f.objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		items = append(items, f.objs[k].DeepCopyObject())
	}
	rv := strconv.Itoa(f.rv)
	switch f.resource {
	case ResPods:
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, o := range items {
			l.Items = append(l.Items, *o.(*corev1.Pod))
		}
		return l, nil
	default:
		l := &resourceapi.ResourceClaimList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
		for _, o := range items {
			l.Items = append(l.Items, *o.(*resourceapi.ResourceClaim))
		}
		return l, nil
	}
}

func (f *fakeAPI) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, refused()
	}
	w := watch.NewRaceFreeFake()
	if from, _ := strconv.Atoi(opts.ResourceVersion); from < f.since {
		w.Error(&apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, f.since)).ErrStatus)
		return w, nil
	}
	f.watchers = append(f.watchers, w)
	return w, nil
}

// kill: the API server goes away.
func (f *fakeAPI) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for _, w := range f.watchers {
		w.Stop()
	}
	f.watchers = nil
}

// restart: it comes back without the events of its past.
func (f *fakeAPI) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
	f.since = f.rv
}

// set writes an object (created or changed); while the API server is
// down, another replica of it takes the write.
func (f *fakeAPI) set(o runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	m, _ := metaOf(o)
	m.SetResourceVersion(strconv.Itoa(f.rv))
	key := m.GetNamespace() + "/" + m.GetName()
	_, existed := f.objs[key]
	f.objs[key] = o
	for _, w := range f.watchers {
		if existed {
			w.Modify(o.DeepCopyObject())
		} else {
			w.Add(o.DeepCopyObject())
		}
	}
}

func (f *fakeAPI) remove(o runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	m, _ := metaOf(o)
	delete(f.objs, m.GetNamespace()+"/"+m.GetName())
	for _, w := range f.watchers {
		w.Delete(o.DeepCopyObject())
	}
}

// fakeRecorder records what the informers report.
type fakeRecorder struct {
	mu       sync.Mutex
	errors   map[string]int // resource/reason
	relists  map[string]int
	rejected map[string]int
	rebuilds int
	events   int
}

func newFakeRecorder() *fakeRecorder {
	return &fakeRecorder{errors: map[string]int{}, relists: map[string]int{}, rejected: map[string]int{}}
}

func (r *fakeRecorder) Event(string, string) { r.mu.Lock(); r.events++; r.mu.Unlock() }
func (r *fakeRecorder) WatchError(resource, reason string) {
	r.mu.Lock()
	r.errors[resource+"/"+reason]++
	r.mu.Unlock()
}
func (r *fakeRecorder) Relisted(resource string)                    { r.mu.Lock(); r.relists[resource]++; r.mu.Unlock() }
func (r *fakeRecorder) Rejected(resource string)                    { r.mu.Lock(); r.rejected[resource]++; r.mu.Unlock() }
func (r *fakeRecorder) IndexRebuilt()                               { r.mu.Lock(); r.rebuilds++; r.mu.Unlock() }
func (r *fakeRecorder) TrackSynced(string, func() bool)             {}
func (r *fakeRecorder) Served(string, bool)                         {}
func (r *fakeRecorder) TrackWatch(string, func() (bool, time.Time)) {}

func (r *fakeRecorder) rebuildCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rebuilds
}

func (r *fakeRecorder) count(m map[string]int, key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[key]
}

// syncBuffer is a log sink safe for the informers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func pod(name, uid, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(t0)},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func claim(name, uid string, reservedFor ...*corev1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(t0)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}},
	}
	if len(reservedFor) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}}}}
	}
	for _, p := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

type harness struct {
	inf  *Informers
	ix   *index.Index
	rec  *fakeRecorder
	gate *Gate
	logs *syncBuffer
	apis map[string]*fakeAPI
}

func startFakes(t *testing.T, sink Sink, ix *index.Index, apis ...*fakeAPI) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{ix: ix, rec: newFakeRecorder(), gate: NewGate(), logs: &syncBuffer{}, apis: map[string]*fakeAPI{}}
	var sources []source
	for _, a := range apis {
		h.apis[a.resource] = a
		obj := runtime.Object(&corev1.Pod{})
		if a.resource == ResResourceClaims {
			obj = &resourceapi.ResourceClaim{}
		}
		sources = append(sources, source{name: a.resource, obj: obj, lw: a})
	}
	h.inf = start(ctx, sources, sink, h.rec, Options{Logger: slog.New(slog.NewTextHandler(h.logs, nil)), Gate: h.gate})
	h.waitCurrent(t, 10*time.Second)
	return h
}

// waitCurrent waits until every resource is synced and current.
func (h *harness) waitCurrent(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if len(h.inf.Unsynced()) == 0 && len(h.inf.Stale()) == 0 {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("not current within %s: unsynced %v, stale %v; log:\n%s", timeout, h.inf.Unsynced(), h.inf.Stale(), h.logs)
	return 0
}

func (h *harness) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; log:\n%s", what, h.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) names(kind string) []string {
	s := h.ix.Snapshot()
	var out []string
	switch kind {
	case ResPods:
		for _, p := range s.Pods {
			out = append(out, p.Key.Name)
		}
	default:
		for _, c := range s.Claims {
			out = append(out, c.Key.Name)
		}
	}
	slices.Sort(out)
	return out
}

// The API server is killed while pods and claims change through another
// replica, and comes back without the events it had (410 Gone): every
// resource is stale from the break until its relist is in the index, every
// refused call and 410 is counted and logged, calls wait at the gate
// instead of backing off, and the informers are current again within a
// couple of seconds of the gate opening (client-go's backoff alone took
// 20-65 s after a 30 s outage).
func TestOutageStaleCountedAndQuicklyCurrent(t *testing.T) {
	a, b := pod("a", "uid-a", "ca"), pod("b", "uid-b", "cb")
	pods := newFakeAPI(ResPods, a, b)
	claims := newFakeAPI(ResResourceClaims, claim("ca", "uid-ca", a), claim("cb", "uid-cb", b))
	ix := index.New(index.Config{})
	h := startFakes(t, ix, ix, pods, claims)
	time.Sleep(1100 * time.Millisecond) // a watch that ends sooner is relisted at once

	pods.kill()
	claims.kill()
	h.waitFor(t, "both resources stale", func() bool { return len(h.inf.Stale()) == 2 })
	h.waitFor(t, "the refused calls counted", func() bool {
		return h.rec.count(h.rec.errors, ResPods+"/unreachable") > 0 && h.rec.count(h.rec.errors, ResResourceClaims+"/unreachable") > 0
	})
	if h.gate.IsOpen() {
		t.Error("the gate is open while the API server refuses calls")
	}
	// Meanwhile, through another replica: b and its claim go, c comes.
	c := pod("c", "uid-c", "cc")
	pods.set(c)
	pods.remove(b)
	claims.remove(claim("cb", "uid-cb", b))
	claims.set(claim("cc", "uid-cc", c))
	time.Sleep(2 * time.Second) // a few of the reflector's backoff steps
	refusedDuringOutage := h.rec.count(h.rec.errors, ResPods+"/unreachable")

	pods.restart()
	claims.restart()
	h.gate.Open() // what the probe does when /readyz answers
	took := h.waitCurrent(t, 10*time.Second)
	t.Logf("current %s after the API server answered", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("current %s after the API server answered, want within 3s", took)
	}
	if got := h.names(ResPods); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("pods after the relist: %v", got)
	}
	if got := h.names(ResResourceClaims); !slices.Equal(got, []string{"ca", "cc"}) {
		t.Errorf("claims after the relist: %v", got)
	}
	for _, r := range []string{ResPods, ResResourceClaims} {
		if h.rec.count(h.rec.errors, r+"/expired") == 0 {
			t.Errorf("%s: the 410 Gone was not counted (errors %v)", r, h.rec.errors)
		}
		if h.rec.count(h.rec.relists, r) != 1 {
			t.Errorf("%s: relists %d, want 1", r, h.rec.count(h.rec.relists, r))
		}
	}
	if refusedDuringOutage > 4 {
		t.Errorf("%d refused calls in 2s: calls must wait at the gate, not retry", refusedDuringOutage)
	}
	for _, want := range []string{"reason=unreachable", "reason=expired", "relisted", "watching again"} {
		if !strings.Contains(h.logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, h.logs)
		}
	}
}

// blockingSink holds relisted objects until released: a relist the index
// has not all received yet.
type blockingSink struct {
	*index.Index
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSink) UpsertLate(obj any) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.Index.UpsertLate(obj)
}

// A resource whose watch is open again is still stale until the index
// has every object of the relist it resumed from.
func TestStaleUntilRelistApplied(t *testing.T) {
	pods := newFakeAPI(ResPods, pod("a", "uid-a", "ca"))
	ix := index.New(index.Config{})
	sink := &blockingSink{Index: ix, entered: make(chan struct{}), release: make(chan struct{})}
	h := startFakes(t, sink, ix, pods)
	pods.kill()
	pods.set(pod("b", "uid-b", "cb"))
	pods.restart()
	h.gate.Open()
	<-sink.entered
	time.Sleep(100 * time.Millisecond)
	if st := h.inf.Stale(); !slices.Equal(st, []string{ResPods}) {
		t.Errorf("stale %v while the relist is being applied, want pods", st)
	}
	close(sink.release)
	h.waitCurrent(t, 5*time.Second)
	if got := h.names(ResPods); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("pods: %v", got)
	}
}

// panicky is an index observer that panics when armed, inside the index's
// write, after the claim maps changed.
type panicky struct {
	mu    sync.Mutex
	armed bool
}

func (p *panicky) ObserveAllocation(string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed {
		p.armed = false
		panic("observer broke")
	}
}
func (p *panicky) ObserveRelease(string, string, time.Duration)    {}
func (p *panicky) ObservePodStartup(string, string, time.Duration) {}

// gatedRebuild lets the test look at the informers while the index is
// being rebuilt.
type gatedRebuild struct {
	*index.Index
	during func()
}

func (s gatedRebuild) Rebuild(fill func(add func(obj any) error) error) error {
	s.during()
	return s.Index.Rebuild(fill)
}

// A write that panics half-way (the index had changed its claim maps, not
// its version) is rejected: the informer cache is put back, the index
// rebuilt from the caches, readiness fails meanwhile, and the index then
// reads exactly as a fresh one of the same objects. The next version of
// the object is accepted.
func TestWritePanicRebuildsTheIndex(t *testing.T) {
	a := pod("a", "uid-a", "ca")
	pods := newFakeAPI(ResPods, a)
	claims := newFakeAPI(ResResourceClaims, claim("ca", "uid-ca"))
	obs := &panicky{}
	ix := index.New(index.Config{Observer: obs})
	var rebuildingSeen, consistentSeen bool
	var h *harness
	sink := gatedRebuild{Index: ix, during: func() {
		rebuildingSeen = h.inf.Rebuilding()
		consistentSeen = ix.Consistent()
	}}
	h = startFakes(t, sink, ix, pods, claims)
	before := ix.Snapshot()

	obs.mu.Lock()
	obs.armed = true
	obs.mu.Unlock()
	claims.set(claim("ca", "uid-ca", a)) // allocated: the observer panics
	h.waitFor(t, "the index rebuilt", func() bool { return h.rec.rebuildCount() == 1 })
	if !rebuildingSeen || consistentSeen {
		t.Errorf("during the rebuild: Rebuilding()=%v Consistent()=%v, want true, false", rebuildingSeen, consistentSeen)
	}
	if h.inf.Rebuilding() || !ix.Consistent() {
		t.Errorf("after the rebuild: Rebuilding()=%v Consistent()=%v", h.inf.Rebuilding(), ix.Consistent())
	}
	if h.rec.count(h.rec.rejected, ResResourceClaims) != 1 {
		t.Errorf("rejected %v, want the claim's update", h.rec.rejected)
	}
	s := ix.Snapshot()
	if s == before {
		t.Error("the rebuilt index hands out the snapshot from before")
	}
	if len(s.Claims) != 1 || s.Claims[0].Allocated() {
		t.Errorf("claims after the rebuild: %v, want ca as before the rejected update", s.Claims)
	}
	fresh := index.New(index.Config{})
	for _, o := range []any{a, claim("ca", "uid-ca")} {
		if err := fresh.Upsert(o, false); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := describeIndex(s), describeIndex(fresh.Snapshot()); got != want {
		t.Errorf("rebuilt index:\n%s\nwant a fresh index of the same objects:\n%s", got, want)
	}
	// The next version is accepted.
	claims.set(claim("ca", "uid-ca", a))
	h.waitFor(t, "the next version accepted", func() bool {
		s := ix.Snapshot()
		return len(s.Claims) == 1 && s.Claims[0].Allocated()
	})
	if !strings.Contains(h.logs.String(), "index update panicked") {
		t.Errorf("the panic is not logged:\n%s", h.logs)
	}
}

// describeIndex writes the joins a verdict reads: each claim's allocation
// and reservations, each pod, and which claims reserve which pod.
func describeIndex(s *index.Snapshot) string {
	var lines []string
	for _, c := range s.Claims {
		lines = append(lines, fmt.Sprintf("claim %s allocated=%v reserved=%d", c.Key, c.Allocated(), len(c.Obj.Status.ReservedFor)))
	}
	for _, p := range s.Pods {
		found := 0
		for _, pc := range s.ResolvePodClaims(p) {
			if pc.Claim != nil {
				found++
			}
		}
		lines = append(lines, fmt.Sprintf("pod %s claims found=%d", p.Key, found))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestErrorReason(t *testing.T) {
	gr := schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused(), ReasonUnreachable},
		{&url.Error{Op: "Get", URL: "https://x", Err: fmt.Errorf("dial tcp: i/o timeout")}, ReasonUnreachable},
		{apierrors.NewResourceExpired("too old resource version: 1 (5)"), ReasonExpired},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonGone}}, ReasonExpired},
		{apierrors.NewUnauthorized("token rejected"), ReasonUnauthorized},
		{apierrors.NewForbidden(gr, "", fmt.Errorf("RBAC")), ReasonForbidden},
		{apierrors.NewNotFound(gr, ""), ReasonNotFound},
		{apierrors.NewTooManyRequests("slow down", 1), ReasonThrottled},
		{apierrors.NewInternalError(fmt.Errorf("etcd")), ReasonServerError},
		{apierrors.NewServiceUnavailable("starting"), ReasonServerError},
		{fmt.Errorf("something else"), ReasonOther},
	} {
		if got := errorReason(tc.err); got != tc.want {
			t.Errorf("errorReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
