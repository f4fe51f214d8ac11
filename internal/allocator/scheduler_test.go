package allocator_test

// The exporter computes "free" with its own arithmetic over shared counters
// and consumed capacity (a scrape cannot afford an allocator run per
// device). These tests hold that arithmetic to the scheduler's own
// allocator, k8s.io/dynamic-resource-allocation/structured, on the shapes
// the features produce: for every device, a claim pinned to it must be
// allocatable exactly when the snapshot says the device is available; for
// a count of partitions, exactly when the selection counts that many free.

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// The allocator features of a v1.37 scheduler with its default gates
// (DRAPartitionableDevices and DRAConsumableCapacity are beta, on).
var schedulerFeatures = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true,
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}

// pinDomain is an attribute domain the tests add to every device so that a
// selector can name one device (CEL sees no device name).
const pinDomain = "pin.dra-exporter.test"

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	return slices.Collect(maps.Values(l)), nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("deviceclass %s not found", name)
}

// scheduler is the scheduler's allocator over a set of objects, with a
// class "pin" that selects every device.
type scheduler struct {
	t     *testing.T
	alloc structured.Allocator
}

func newScheduler(t *testing.T, objs []any) *scheduler {
	t.Helper()
	classes := classLister{"pin": {ObjectMeta: metav1.ObjectMeta{Name: "pin"}}}
	var sl []*resourceapi.ResourceSlice
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *resourceapi.DeviceClass:
			classes[o.Name] = o
		case *resourceapi.ResourceSlice:
			c := o.DeepCopy()
			for i := range c.Spec.Devices {
				d := &c.Spec.Devices[i]
				if d.Attributes == nil {
					d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
				}
				d.Attributes[pinDomain+"/name"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Name)}
			}
			sl = append(sl, c)
		case *resourceapi.ResourceClaim:
			if o.Status.Allocation == nil {
				continue
			}
			// As the scheduler's foreachAllocatedDevice does.
			for _, r := range o.Status.Allocation.Devices.Results {
				if ptr.Deref(r.AdminAccess, false) {
					continue
				}
				id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
				if r.ShareID != nil {
					state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
					if r.ConsumedCapacity != nil {
						state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
					}
					continue
				}
				state.AllocatedDevices.Insert(id)
			}
		}
	}
	a, err := structured.NewAllocator(context.Background(), schedulerFeatures, state, classes, sl,
		cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatalf("NewAllocator: %v", err)
	}
	return &scheduler{t: t, alloc: a}
}

// allocates reports whether the allocator finds an allocation of the claim
// on the node.
func (a *scheduler) allocates(node string, claim *resourceapi.ResourceClaim) bool {
	a.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}}}
	res, err := a.alloc.Allocate(context.Background(), n, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		// Invalid pools surface as an error for the node: nothing is
		// allocated there.
		return false
	}
	return len(res) == 1
}

// pinnedClaim asks for the one device, and of a shareable device's
// capacity the least its policy allows (one unit when any amount may be
// asked): Available's question.
func pinnedClaim(d *index.Device) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{
		DeviceClassName: "pin",
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
		Selectors:       CEL(fmt.Sprintf("device.attributes[%q].name == %q", pinDomain, d.Key.Device)),
	}
	if d.Shareable && len(d.Capacity) > 0 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for name, c := range d.Capacity {
			q := resource.MustParse("1")
			switch p := c.RequestPolicy; {
			case p != nil && p.ValidRange != nil && p.ValidRange.Min != nil:
				q = *p.ValidRange.Min
			case p != nil && len(p.ValidValues) > 0:
				q = p.ValidValues[0]
			}
			req.Capacity.Requests[name] = q
		}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: "pin-" + d.Key.Device, UID: types.UID("uid-pin-" + d.Key.Device)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: req}}}},
	}
}

// countClaim asks for count devices of the class, with these capacity
// requests.
func countClaim(class string, count int64, capacity map[resourceapi.QualifiedName]resource.Quantity) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if capacity != nil {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: capacity}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: NS, Name: "count", UID: "uid-count"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: req}}}},
	}
}

// checkDevicesAgree compares Available with the allocator for every device.
func checkDevicesAgree(t *testing.T, objs []any) {
	t.Helper()
	s := Build(t, index.Config{}, objs...).Snapshot()
	a := newScheduler(t, objs)
	for _, d := range s.Devices {
		if d.Node == "" {
			continue // the cross-check places claims on a device's node
		}
		want := a.allocates(d.Node, pinnedClaim(d))
		if got := allocator.Of(s).Available(d); got != want {
			t.Errorf("%s: Available = %v, the scheduler's allocator says %v", d.Key, got, want)
		}
	}
}

// TestScenariosAgreeWithAllocator runs the cross-check on the golden
// scenarios of both features: every device's verdict, and for every
// pending claim whether some node could allocate it now (the scenarios
// have no constraints or node affinity, so counts of free devices decide).
func TestScenariosAgreeWithAllocator(t *testing.T) {
	for _, dir := range []string{"partitionable", "consumable-capacity", "mig"} {
		t.Run(dir, func(t *testing.T) {
			loaded, problems, err := objects.LoadFiles([]string{filepath.Join("../../testdata", dir, "objects.yaml")})
			if err != nil || len(problems) > 0 {
				t.Fatalf("load: %v %v", err, problems)
			}
			var objs []any
			var nodes []string
			for _, o := range loaded {
				objs = append(objs, o)
				if n, ok := o.(*corev1.Node); ok {
					nodes = append(nodes, n.Name)
				}
			}
			if dir == "mig" {
				// Its mig-node-2 slice has devices and shared counters in
				// one slice, which the API rejects and the allocator reads
				// as a counter slice only; mig-node-1 is plain.
				objs = slices.DeleteFunc(objs, func(o any) bool {
					s, ok := o.(*resourceapi.ResourceSlice)
					return ok && len(s.Spec.SharedCounters) > 0
				})
			}
			checkDevicesAgree(t, objs)
			s := Build(t, index.Config{}, objs...).Snapshot()
			a := newScheduler(t, objs)
			for _, c := range s.Claims {
				if c.Allocated() {
					continue
				}
				want := slices.ContainsFunc(nodes, func(n string) bool { return a.allocates(n, c.Obj) })
				got := true
				for _, r := range c.Obj.Spec.Devices.Requests {
					e := r.Exactly
					sel := allocator.Of(s).Select(e.DeviceClassName, e.Selectors, allocator.Demand{Tolerations: e.Tolerations, Capacity: e.Capacity})
					got = got && int64(sel.BestNodeFree) >= max(e.Count, 1)
				}
				if got != want {
					t.Errorf("claim %s: enough free on one node = %v, the scheduler's allocator: allocatable = %v", c.Key, got, want)
				}
			}
		})
	}
}
