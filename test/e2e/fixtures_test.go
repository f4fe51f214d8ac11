package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestGoldenFixturesPassTheAPIServer loads the objects of every golden
// scenario (testdata/*/objects.yaml and testdata/node/*/objects.yaml), as
// the exporter's own loader reads them, into a real kube-apiserver and
// fails on any it rejects: each object is created (namespaces first, then
// classes, nodes, slices, taint rules, claims, pods, events) with strict
// field validation, and its status, which a create drops, written with
// UpdateStatus, so that the status validation runs too. The API server has
// no scheduler and no controllers (cluster.StartAPI), so nothing changes
// the objects between the writes; each scenario's objects are deleted
// before the next one's (they share names). Objects the exporter does not
// read (and the deliberately broken ones of malformed-input) are left out,
// as the loader leaves them out.
func TestGoldenFixturesPassTheAPIServer(t *testing.T) {
	requireFeature(t, cluster.FeatureDeviceTaintRules, cluster.FeatureDeviceTaints, cluster.FeaturePartitionableDevices,
		cluster.FeatureConsumableCapacity, cluster.FeatureBindingConditions, cluster.FeatureExtendedResource)
	binDir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, err := cluster.StartAPI(ctx, binDir, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()

	files, err := filepath.Glob(repoPath("testdata/*/objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	nodeFiles, err := filepath.Glob(repoPath("testdata/node/*/objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, nodeFiles...)
	if len(files) < 40 {
		t.Fatalf("only %d scenarios found", len(files))
	}
	loaded := 0
	for _, file := range files {
		scenario, _ := filepath.Rel(repoPath("testdata"), filepath.Dir(file))
		objs, _, err := objects.LoadFiles([]string{file})
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		l := newFixtureLoader(cp.Client, scenario, objs)
		for _, o := range ordered(objs) {
			if err := l.create(ctx, o); err != nil {
				t.Errorf("%s: the API server rejects %s", scenario, err)
			}
		}
		loaded += l.count
		if err := l.deleteAll(ctx); err != nil {
			t.Fatalf("%s: clean up: %v", scenario, err)
		}
	}
	t.Logf("%d objects of %d scenarios accepted", loaded, len(files))
}

// kindOrder is the order objects are created in: what others name first.
var kindOrder = []string{"DeviceClass", "Node", "ResourceSlice", "DeviceTaintRule", "ResourceClaim", "Pod", "Event", "events.k8s.io/Event"}

func kindOf(o runtime.Object) string {
	switch o.(type) {
	case *resourceapi.DeviceClass:
		return "DeviceClass"
	case *corev1.Node:
		return "Node"
	case *resourceapi.ResourceSlice:
		return "ResourceSlice"
	case *resourceapi.DeviceTaintRule:
		return "DeviceTaintRule"
	case *resourceapi.ResourceClaim:
		return "ResourceClaim"
	case *corev1.Pod:
		return "Pod"
	case *corev1.Event:
		return "Event"
	case *eventsv1.Event:
		return "events.k8s.io/Event"
	}
	return fmt.Sprintf("%T", o)
}

// ordered sorts the objects by kindOrder, keeping the file's order within a
// kind.
func ordered(objs []runtime.Object) []runtime.Object {
	out := slices.Clone(objs)
	slices.SortStableFunc(out, func(a, b runtime.Object) int {
		return slices.Index(kindOrder, kindOf(a)) - slices.Index(kindOrder, kindOf(b))
	})
	return out
}

// fixtureLoader creates one scenario's objects and remembers them.
type fixtureLoader struct {
	c        kubernetes.Interface
	scenario string
	created  []runtime.Object
	count    int
	// adminNamespaces are the namespaces with a claim that asks for
	// admin access: a cluster labels them, or the claim is refused.
	adminNamespaces map[string]bool
	// priorityClasses are those the scenario's pods name.
	priorityClasses []string
}

// newFixtureLoader prepares a loader for one scenario's objects: the
// namespaces that must allow admin access, which a dump does not hold.
func newFixtureLoader(c kubernetes.Interface, scenario string, objs []runtime.Object) *fixtureLoader {
	l := &fixtureLoader{c: c, scenario: scenario, adminNamespaces: map[string]bool{}}
	for _, o := range objs {
		c, ok := o.(*resourceapi.ResourceClaim)
		if !ok {
			continue
		}
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil && ptr.Deref(r.Exactly.AdminAccess, false) {
				l.adminNamespaces[c.Namespace] = true
			}
		}
	}
	return l
}

func name(o runtime.Object) string {
	m, _ := meta.Accessor(o)
	if m.GetNamespace() != "" {
		return kindOf(o) + " " + m.GetNamespace() + "/" + m.GetName()
	}
	return kindOf(o) + " " + m.GetName()
}

// create creates the object as the fixture has it (less what only the
// server sets) and then writes its status.
func (l *fixtureLoader) create(ctx context.Context, o runtime.Object) error {
	o = o.DeepCopyObject()
	m, err := meta.Accessor(o)
	if err != nil {
		return err
	}
	if ns := m.GetNamespace(); ns != "" {
		// The namespace and, for a pod, its service account, which the
		// ServiceAccount admission plugin looks up (no controller makes
		// them here).
		_, err := l.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		if l.adminNamespaces[ns] {
			// Admin access is allowed only in a namespace so labelled.
			patch := []byte(`{"metadata":{"labels":{"resource.kubernetes.io/admin-access":"true"}}}`)
			if _, err := l.c.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
		}
		if p, ok := o.(*corev1.Pod); ok && p.Spec.PriorityClassName != "" {
			// The Priority admission plugin resolves the class the pod
			// names to the priority the pod carries.
			pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: p.Spec.PriorityClassName}, Value: ptr.Deref(p.Spec.Priority, 0),
				PreemptionPolicy: p.Spec.PreemptionPolicy}
			if _, err := l.c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("priority class %s: %w", pc.Name, err)
			}
			l.priorityClasses = append(l.priorityClasses, pc.Name)
		}
		if p, ok := o.(*corev1.Pod); ok {
			account := p.Spec.ServiceAccountName
			if account == "" {
				account = "default"
			}
			_, err := l.c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("service account %s/%s: %w", ns, account, err)
			}
		}
	}
	// The server sets these on create; a dump carries the old cluster's.
	m.SetResourceVersion("")
	m.SetUID("")
	m.SetCreationTimestamp(metav1.Time{})
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetGeneration(0)
	opts := metav1.CreateOptions{FieldValidation: "Strict"}
	what := name(o)
	// created is what the server made (a typed client hands back an empty
	// object with an error); err is the create's or the status update's.
	var created runtime.Object
	keep := func(c runtime.Object, cerr error) bool {
		if cerr != nil {
			err = cerr
			return false
		}
		created = c
		return true
	}
	switch obj := o.(type) {
	case *resourceapi.DeviceClass:
		keep(l.c.ResourceV1().DeviceClasses().Create(ctx, obj, opts))
	case *corev1.Node:
		n, cerr := l.c.CoreV1().Nodes().Create(ctx, obj, opts)
		if keep(n, cerr) {
			n.Status = obj.Status
			err = l.status(what, func() error {
				_, err := l.c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldValidation: "Strict"})
				return err
			})
		}
	case *resourceapi.ResourceSlice:
		keep(l.c.ResourceV1().ResourceSlices().Create(ctx, obj, opts))
	case *resourceapi.DeviceTaintRule:
		r, cerr := l.c.ResourceV1().DeviceTaintRules().Create(ctx, obj, opts)
		if keep(r, cerr) && len(obj.Status.Conditions) > 0 {
			r.Status = obj.Status
			err = l.status(what, func() error {
				_, err := l.c.ResourceV1().DeviceTaintRules().UpdateStatus(ctx, r, metav1.UpdateOptions{FieldValidation: "Strict"})
				return err
			})
		}
	case *resourceapi.ResourceClaim:
		c, cerr := l.c.ResourceV1().ResourceClaims(obj.Namespace).Create(ctx, obj, opts)
		if keep(c, cerr) && (obj.Status.Allocation != nil || len(obj.Status.ReservedFor) > 0 || len(obj.Status.Devices) > 0) {
			c.Status = obj.Status
			err = l.status(what, func() error {
				_, err := l.c.ResourceV1().ResourceClaims(obj.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{FieldValidation: "Strict"})
				return err
			})
		}
	case *corev1.Pod:
		p, cerr := cluster.CreatePod(ctx, l.c, obj, opts)
		if keep(p, cerr) {
			p.Status = obj.Status
			err = l.status(what, func() error {
				_, err := l.c.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldValidation: "Strict"})
				return err
			})
		}
	case *corev1.Event:
		keep(l.c.CoreV1().Events(obj.Namespace).Create(ctx, obj, opts))
	case *eventsv1.Event:
		keep(l.c.EventsV1().Events(obj.Namespace).Create(ctx, obj, opts))
	default:
		return fmt.Errorf("%s: a kind the test does not load", what)
	}
	if created != nil {
		l.created = append(l.created, created)
		l.count++
		return err // the status update's
	}
	return fmt.Errorf("%s: %w", what, err)
}

// status runs an UpdateStatus and names the object in its error.
func (l *fixtureLoader) status(what string, update func() error) error {
	if err := update(); err != nil {
		return fmt.Errorf("the status of %s: %w", what, err)
	}
	return nil
}

// deleteAll deletes what create made, finalizers removed and without grace
// (no kubelet or controller would finish a deletion), and waits until it is
// gone.
func (l *fixtureLoader) deleteAll(ctx context.Context) error {
	noFinalizers := []byte(`{"metadata":{"finalizers":null}}`)
	now := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	for _, o := range slices.Backward(l.created) {
		m, _ := meta.Accessor(o)
		ns, n := m.GetNamespace(), m.GetName()
		var err error
		switch o.(type) {
		case *resourceapi.DeviceClass:
			err = l.c.ResourceV1().DeviceClasses().Delete(ctx, n, now)
		case *corev1.Node:
			err = l.c.CoreV1().Nodes().Delete(ctx, n, now)
		case *resourceapi.ResourceSlice:
			err = l.c.ResourceV1().ResourceSlices().Delete(ctx, n, now)
		case *resourceapi.DeviceTaintRule:
			err = l.c.ResourceV1().DeviceTaintRules().Delete(ctx, n, now)
		case *resourceapi.ResourceClaim:
			if len(m.GetFinalizers()) > 0 {
				_, err = l.c.ResourceV1().ResourceClaims(ns).Patch(ctx, n, types.MergePatchType, noFinalizers, metav1.PatchOptions{})
			}
			if err == nil {
				err = l.c.ResourceV1().ResourceClaims(ns).Delete(ctx, n, now)
			}
		case *corev1.Pod:
			if len(m.GetFinalizers()) > 0 {
				_, err = l.c.CoreV1().Pods(ns).Patch(ctx, n, types.MergePatchType, noFinalizers, metav1.PatchOptions{})
			}
			if err == nil {
				err = l.c.CoreV1().Pods(ns).Delete(ctx, n, now)
			}
		case *corev1.Event:
			err = l.c.CoreV1().Events(ns).Delete(ctx, n, now)
		case *eventsv1.Event:
			err = l.c.EventsV1().Events(ns).Delete(ctx, n, now)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name(o), err)
		}
	}
	for _, pc := range l.priorityClasses {
		if err := l.c.SchedulingV1().PriorityClasses().Delete(ctx, pc, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete priority class %s: %w", pc, err)
		}
	}
	// Pods and claims go at once without grace or finalizers; wait for
	// the last of them all the same.
	return cluster.WaitFor(ctx, 30*time.Second, "the scenario's objects gone", func(ctx context.Context) (bool, error) {
		pods, err := l.c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		claims, err := l.c.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
}
