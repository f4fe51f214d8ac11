package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
)

// TestKeptFamiliesMatchAFreshScrape replays every golden scenario into a
// live index one object at a time, in file order and shuffled, then
// deletes the objects again, and scrapes after every step: the exporter
// that keeps families and rows across scrapes (each collector's, while the
// kinds of objects it reads did not change), over snapshots that keep the
// joins of unchanged kinds, must write exactly what a fresh exporter
// renders from a snapshot built from scratch. The rewrites include, for
// every entry of the fan-out table (collector.FanOut), a change of an
// object that another object's row reads through it (linkRewrites), and
// the test fails unless each of them changed that row's family somewhere.
// A row that reads an object its collector's links do not name, or a join
// kept past a change it depends on, shows here as a stale family. The text
// exporter's families are written in protobuf too after every step, from
// the encodings its kept chunks keep, and must match the fresh ones'.
func TestKeptFamiliesMatchAFreshScrape(t *testing.T) {
	now, _ := time.Parse(time.RFC3339, goldenNow)
	clock := func() time.Time { return now }
	steps := 0
	exercised := map[string]bool{} // the fan-out entries whose rewrite changed their family
	for _, dir := range scenarios(t) {
		cfg, err := defaultConfig()
		if err != nil {
			t.Fatal(err)
		}
		objs, _, err := objects.LoadFiles([]string{filepath.Join(dir, "objects.yaml")})
		if err != nil {
			t.Fatal(err)
		}
		trimmer := cfg.trimmer()
		exporter := func(src engine.Source) *engine.Exporter {
			collectors, err := cfg.collectors()
			if err != nil {
				t.Fatal(err)
			}
			return engine.NewExporter(src, clock, false, nil, collectors...)
		}
		for pass, order := range [][]int{rand.New(rand.NewPCG(0, 0)).Perm(len(objs)), identity(len(objs))} {
			ix := index.New(cfg.indexConfig(clock, nil))
			// One kept exporter per format: a scrape in the other format
			// renders everything again.
			kept := map[bool]*engine.Exporter{false: exporter(ix), true: exporter(ix)}
			// check compares the kept and the fresh scrape and returns
			// the fresh one (text format).
			check := func(what string, obj any) []byte {
				steps++
				var fresh []byte
				for _, om := range []bool{true, false} {
					keptFamilies, freshFamilies := kept[om].TextFamilies(om), exporter(scratch{ix}).TextFamilies(om)
					got, want := join(keptFamilies), join(freshFamilies)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s pass %d: after %s %s the kept families differ from a fresh scrape (openmetrics %v):\n%s",
							filepath.Base(dir), pass, what, describe(obj), om, firstDiff(got, want))
					}
					// Protobuf from the kept chunks' kept encodings.
					if !om && !bytes.Equal(joinProto(t, keptFamilies), joinProto(t, freshFamilies)) {
						t.Fatalf("%s pass %d: after %s %s the kept families' protobuf differs from a fresh scrape's",
							filepath.Base(dir), pass, what, describe(obj))
					}
					fresh = want
				}
				return fresh
			}
			var last []byte
			for _, i := range order {
				obj := trimmer.Trim(objs[i])
				if err := ix.Upsert(obj, true); err != nil {
					t.Fatal(err)
				}
				last = check("upserting", obj)
			}
			// Writes to objects already there: the frequent ones that
			// change no placement (readiness, a driver's device status),
			// then ones that do, then ones that another object's row
			// reads, then the object as it was.
			for _, i := range order {
				for _, obj := range append(rewrites(objs[i]), objs[i]) {
					obj = trimmer.Trim(obj)
					if err := ix.Upsert(obj, true); err != nil {
						t.Fatal(err)
					}
					last = check("rewriting", obj)
				}
				for _, lr := range append(linkRewrites(objs[i]), linkRewrite{obj: objs[i]}) {
					obj := trimmer.Trim(lr.obj)
					if err := ix.Upsert(obj, true); err != nil {
						t.Fatal(err)
					}
					fresh := check("rewriting "+lr.entry+" of", obj)
					if lr.entry != "" && !bytes.Equal(familyLines(fresh, lr.family), familyLines(last, lr.family)) {
						exercised[lr.entry] = true
					}
					last = fresh
				}
			}
			for j := len(order) - 1; j >= 0; j-- {
				obj := trimmer.Trim(objs[order[j]])
				if err := ix.Delete(obj); err != nil {
					t.Fatal(err)
				}
				check("deleting", obj)
			}
		}
	}
	for _, links := range collector.FanOut {
		for _, l := range links {
			if !exercised[l.Name] {
				t.Errorf("fan-out entry %q: no rewrite over the goldens changed the family of the rows it links (linkRewrites)", l.Name)
			}
		}
	}
	t.Logf("%d scrapes compared", steps)
}

// rewrites returns changed copies of a pod or a claim: readiness flipped
// and a device status written (KindPlacement does not count them), then a
// change that moves what other objects read (priority, a reservation).
func rewrites(obj any) []any {
	switch o := obj.(type) {
	case *corev1.Pod:
		// Containers started, readiness as it was.
		started := o.DeepCopy()
		for i := range started.Status.ContainerStatuses {
			cs := &started.Status.ContainerStatuses[i]
			cs.Started = ptr.To(true)
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Unix(1e9, 0))}}
		}
		ready := o.DeepCopy()
		flipped := corev1.ConditionTrue
		if podReady(o) {
			flipped = corev1.ConditionFalse
		}
		ready.Status.Conditions = append(slices.DeleteFunc(ready.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady || c.Type == corev1.ContainersReady
		}), corev1.PodCondition{Type: corev1.PodReady, Status: flipped}, corev1.PodCondition{Type: corev1.ContainersReady, Status: flipped})
		for i := range ready.Status.ContainerStatuses {
			ready.Status.ContainerStatuses[i].Ready = flipped == corev1.ConditionTrue
			ready.Status.ContainerStatuses[i].RestartCount++
		}
		priority := ready.DeepCopy()
		priority.Spec.Priority = ptr.To(int32(1_000_000))
		return []any{started, ready, priority}
	case *resourceapi.ResourceClaim:
		status := o.DeepCopy()
		if status.Status.Allocation == nil {
			return nil
		}
		// Every device reported ready, its binding conditions met.
		status.Status.Devices = nil
		for _, r := range status.Status.Allocation.Devices.Results {
			conds := []metav1.Condition{{Type: "Ready"}}
			for _, b := range r.BindingConditions {
				conds = append(conds, metav1.Condition{Type: b})
			}
			for i := range conds {
				conds[i].Status, conds[i].Reason, conds[i].LastTransitionTime = metav1.ConditionTrue, "Done", metav1.NewTime(time.Unix(1e9, 0))
			}
			status.Status.Devices = append(status.Status.Devices, resourceapi.AllocatedDeviceStatus{
				Driver: r.Driver, Pool: r.Pool, Device: r.Device, Conditions: conds,
			})
		}
		out := []any{status}
		if n := len(o.Status.ReservedFor); n > 0 {
			unreserved := status.DeepCopy()
			unreserved.Status.ReservedFor = unreserved.Status.ReservedFor[:n-1]
			out = append(out, unreserved)
		}
		return out
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// scratch hands out snapshots built without the last one's joins.
type scratch struct{ ix *index.Index }

func (s scratch) Snapshot() *index.Snapshot { return s.ix.SnapshotFromScratch() }

func describe(obj any) string {
	if m, ok := obj.(metav1.Object); ok {
		return fmt.Sprintf("%T %s/%s", obj, m.GetNamespace(), m.GetName())
	}
	return fmt.Sprintf("%T", obj)
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func joinProto(t *testing.T, families []engine.Family) []byte {
	var buf bytes.Buffer
	for _, f := range families {
		if _, err := f.WriteProtoTo(&buf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func join(families []engine.Family) []byte {
	var out []byte
	for _, f := range families {
		out = f.AppendTo(out)
	}
	return out
}
