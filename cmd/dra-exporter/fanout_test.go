package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

// linkRewrite is a change of an object that another object's row reads
// through the fan-out entry named entry, which changes that row's family.
type linkRewrite struct {
	entry, family string
	obj           any
}

// linkRewrites returns, for an object other objects' rows read, a changed
// copy per fan-out entry it is read through (TestKeptFamiliesMatchAFreshScrape
// requires every entry of collector.FanOut to have one that changes its
// family over the goldens).
func linkRewrites(obj any) []linkRewrite {
	switch o := obj.(type) {
	case *resourceapi.ResourceSlice:
		// A device's GPU UUID, which its claims' allocation series name;
		// a taint on every device, which the pods holding them show.
		uuid := o.DeepCopy()
		tainted := o.DeepCopy()
		for i := range uuid.Spec.Devices {
			d := &uuid.Spec.Devices[i]
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				d.Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: ptrTo(*a.StringValue + "-rewritten")}
			}
			tainted.Spec.Devices[i].Taints = append(tainted.Spec.Devices[i].Taints,
				resourceapi.DeviceTaint{Key: "example.com/rewritten", Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		return []linkRewrite{
			{"a device's claims", "dra_claim_allocation_info", uuid},
			{"a claim's or a device's holding pods", "dra_allocated_device_taint", tainted},
		}
	case *resourceapi.ResourceClaim:
		// A shared device's consumed capacity doubled, which its remaining
		// capacity shows.
		if o.Status.Allocation == nil {
			return nil
		}
		doubled := o.DeepCopy()
		changed := false
		for i := range doubled.Status.Allocation.Devices.Results {
			r := &doubled.Status.Allocation.Devices.Results[i]
			for name, q := range r.ConsumedCapacity {
				q.Add(q)
				r.ConsumedCapacity[name] = q
				changed = true
			}
		}
		if !changed {
			return nil
		}
		return []linkRewrite{{"a shared device's claims", "dra_device_capacity_remaining", doubled}}
	case *resourceapi.DeviceClass:
		// No class serves the extended resource any more: a Pending pod
		// asking for it leaves the dra-extended lane.
		if o.Spec.ExtendedResourceName == nil {
			return nil
		}
		dropped := o.DeepCopy()
		dropped.Spec.ExtendedResourceName = nil
		return []linkRewrite{{"a class's extended-resource pods", "dra_pod_info", dropped}}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// familyLines returns the series lines of one family in an exposition.
func familyLines(text []byte, family string) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(text, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(family+"{")) || bytes.HasPrefix(l, []byte(family+" ")) {
			out = append(out, l...)
		}
	}
	return out
}

// Every row of every cluster collector, over every golden scenario, reads
// no record of the snapshot but its key and those its collector's entries
// of the fan-out table (collector.FanOut) name: a record read and not
// declared would leave the row stale when that record changes. The
// snapshot records what its lookups hand out (index.Snapshot.TraceReads)
// while each row renders. Left without its entry, the claim collector's
// reads of its devices are found (the check can fail).
func TestRowsReadOnlyTheirLinks(t *testing.T) {
	unlinkedClaimReads := 0
	for _, dir := range scenarios(t) {
		ix, collectors, clock := scenarioIndex(t, dir)
		now := clock()
		for _, c := range collectors {
			rc, ok := c.(engine.RowCollector)
			if !ok {
				t.Errorf("%s is not a row collector: the store renders it whole on every scrape", c.Name())
				continue
			}
			for _, u := range readsBeyond(ix, rc, engine.LinksOf(c), now) {
				t.Errorf("%s: collector %s: %s, which its fan-out entries do not name", filepath.Base(dir), c.Name(), u)
			}
			if c.Name() == "claim" {
				unlinkedClaimReads += len(readsBeyond(ix, rc, nil, now))
			}
		}
	}
	if unlinkedClaimReads == 0 {
		t.Error("without its fan-out entry no claim row was found reading a device: the check cannot fail")
	}
}

// readsBeyond runs c's rows over a fresh snapshot of ix and returns each
// read of a record that is neither the row's key nor named by links.
func readsBeyond(ix *index.Index, c engine.RowCollector, links []engine.Link, now time.Time) []string {
	s := ix.SnapshotFromScratch()
	var key any
	started := false
	reads := map[any][]any{}
	var keys []any
	s.TraceReads(func(r any) {
		if started && r != key {
			reads[key] = append(reads[key], r)
		}
	})
	engine.TraceRows(c, s, now, func(k any) {
		key, started = k, true
		keys = append(keys, k)
	})
	s.TraceReads(nil)
	var out []string
	for _, k := range keys {
		var declared []any
		for _, l := range links {
			declared = l.Of(s, k, declared)
		}
		for _, r := range reads[k] {
			if !slices.Contains(declared, r) {
				out = append(out, fmt.Sprintf("the row of %s reads %s", record(k), record(r)))
			}
		}
	}
	return out
}

// record names a record of the index (or a row's key) for a message.
func record(r any) string {
	switch r := r.(type) {
	case *index.Claim:
		return "claim " + r.Key.String()
	case *index.Pod:
		return "pod " + r.Key.String()
	case *index.Device:
		return "device " + r.Key.String()
	case *index.Class:
		return "class " + r.Name
	case *index.Node:
		return "node " + r.Name
	}
	return fmt.Sprintf("%T %v", r, r)
}

// The fan-out table names its entries once each: the kept-vs-fresh test
// reports them by name.
func TestFanOutEntriesNamedOnce(t *testing.T) {
	seen := map[string]bool{}
	for c, links := range collector.FanOut {
		for _, l := range links {
			if seen[l.Name] {
				t.Errorf("collector %s: fan-out entry %q named twice", c, l.Name)
			}
			seen[l.Name] = true
			if l.Of == nil || l.Kinds == 0 {
				t.Errorf("collector %s: fan-out entry %q lacks its records or their kinds", c, l.Name)
			}
		}
	}
}

// docs/architecture.md's table of the fan-out entries names each of
// collector.FanOut's, with its collector, and no other.
func TestArchitectureNamesTheFanOut(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // entry -> collector, from the table
	for _, l := range strings.Split(string(doc), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) == 5 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") && strings.Contains(l, "| the ") {
			rows[strings.TrimSpace(cells[2])] = strings.Trim(strings.TrimSpace(cells[1]), "`")
		}
	}
	n := 0
	for c, links := range collector.FanOut {
		for _, l := range links {
			n++
			if rows[l.Name] != c {
				t.Errorf("docs/architecture.md's fan-out table lacks %q of collector %s", l.Name, c)
			}
		}
	}
	if len(rows) != n {
		t.Errorf("docs/architecture.md's fan-out table has %d entries, collector.FanOut %d", len(rows), n)
	}
}

// Every fan-out entry with a Back names, from a claim or pod its rows read,
// the rows that read it: over every golden scenario, each row's key is
// among Back of each claim or pod its entry's Of returns. A key Back left
// out would keep that row stale when the store renders only the rows Back
// names (engine's renderLinked).
func TestLinkBacksTurnOfAround(t *testing.T) {
	checked := 0
	for _, dir := range scenarios(t) {
		ix, collectors, clock := scenarioIndex(t, dir)
		s := ix.SnapshotFromScratch()
		for _, c := range collectors {
			rc, ok := c.(engine.RowCollector)
			if !ok {
				continue
			}
			var keys []any
			engine.TraceRows(rc, s, clock(), func(k any) { keys = append(keys, k) })
			for _, l := range engine.LinksOf(c) {
				if l.Back == nil {
					continue
				}
				for _, k := range keys {
					for _, rec := range l.Of(s, k, nil) {
						switch r := rec.(type) {
						case *index.Claim, *index.Pod:
							checked++
							if !slices.Contains(l.Back(s, r, nil), k) {
								t.Errorf("%s: fan-out entry %q: the row of %s reads %s, whose Back does not name it",
									filepath.Base(dir), l.Name, record(k), record(r))
							}
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no row read a claim or pod through an entry with a Back: the check cannot fail")
	}
}
