package bench

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/allocator"
	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/engine"
)

// TestGeneratorShapes checks that the generated cluster classifies as
// intended, so that the benchmarks cannot silently measure an empty or
// healthy cluster: blocked pods per reason, leaks per reason, allocated
// devices, and the series of a scrape.
func TestGeneratorShapes(t *testing.T) {
	f := load(t, 1_000)
	c := f.cluster
	// 1000 claims: 10 per i%100 bucket, 4 leaks carved from the Running ones.
	if c.AllocatedDevices != 900 || c.H200Nodes != 28 {
		t.Fatalf("allocated devices %d, H200 nodes %d; want 900, 28", c.AllocatedDevices, c.H200Nodes)
	}
	s := f.index(t).Snapshot()
	const nodes = 113 + 5 // ceil(900/8) full, 5% spare

	if got := len(s.Devices); got != nodes*GPUsPerNode {
		t.Errorf("devices: got %d, want %d", got, nodes*GPUsPerNode)
	}
	if got := len(s.Claims); got != 1_000 {
		t.Errorf("claims: got %d, want 1000", got)
	}
	if got := len(s.Pods); got != 1_000-2 { // pod_missing and owner_missing leaks have no pod
		t.Errorf("pods: got %d, want 998", got)
	}
	inUse := 0
	for _, d := range s.Devices {
		if s.InUse(d.Key) {
			inUse++
		}
	}
	if inUse != 900 {
		t.Errorf("devices in use: got %d, want 900", inUse)
	}
	for _, row := range allocator.Of(s).ClassCapacity() {
		switch row.DeviceClass {
		case GPUClass:
			if row.Total != GPUsPerNode || row.Allocated+row.Free != row.Total {
				t.Errorf("class %s on %s: %+v", row.DeviceClass, row.Node, row)
			}
		case MIGClass:
			if row.Total != 0 || row.Node != "" {
				t.Errorf("class %s should select nothing: %+v", row.DeviceClass, row)
			}
		}
	}

	blocked := map[classify.Reason]int{}
	for _, v := range classify.Blocked(s) {
		blocked[v.Reason]++
		if v.Reason == classify.CapacityExhausted && v.Claim == "" {
			t.Errorf("pod %s: capacity_exhausted without a claim", v.Pod.Key)
		}
	}
	wantBlocked := map[classify.Reason]int{
		classify.NotReady:               20,
		classify.NodePreparePending:     20,
		classify.NodePrepareFailed:      10,
		classify.CapacityExhausted:      50,
		classify.SelectorMatchesNothing: 30,
		classify.Unallocated:            20,
	}
	if !reflect.DeepEqual(blocked, wantBlocked) {
		t.Errorf("blocked pods per reason:\n got %v\nwant %v", blocked, wantBlocked)
	}
	// The same figures follow from the generator's own counts.
	fromOutcomes := map[classify.Reason]int{
		classify.NotReady:               c.Outcomes[NotReady],
		classify.NodePreparePending:     c.Outcomes[PreparePending],
		classify.NodePrepareFailed:      c.Outcomes[PrepareFailed],
		classify.CapacityExhausted:      c.Outcomes[CapacityExhausted],
		classify.SelectorMatchesNothing: c.Outcomes[SelectorMatchesNothing],
		classify.Unallocated:            c.Outcomes[Unallocated],
	}
	if !reflect.DeepEqual(fromOutcomes, wantBlocked) {
		t.Errorf("generator outcomes %v disagree with %v", fromOutcomes, wantBlocked)
	}

	leaks := map[classify.LeakReason]int{}
	for _, l := range classify.Leaks(s, c.Now, unreservedGrace) {
		leaks[l.Reason]++
	}
	wantLeaks := map[classify.LeakReason]int{
		classify.LeakPodMissing: 1, classify.LeakPodFinished: 1, classify.LeakOwnerMissing: 1, classify.LeakUnreserved: 1,
	}
	if !reflect.DeepEqual(leaks, wantLeaks) {
		t.Errorf("leaks per reason:\n got %v\nwant %v", leaks, wantLeaks)
	}

	// A scrape emits every family with the sizes above.
	res, err := scrape(engine.NewExporter(f.index(t), f.now, true, slog.New(slog.DiscardHandler), clusterCollectors()...))
	if err != nil {
		t.Fatal(err)
	}
	wantSeries := map[string]int{
		"dra_device_info":             nodes * GPUsPerNode,
		"dra_device_memory_bytes":     nodes * GPUsPerNode,
		"dra_claim_info":              1_000,
		"dra_claim_status":            3 * 1_000,
		"dra_claim_allocation_info":   900,
		"dra_claim_reserved_for_info": 900 - 2, // owner_missing and allocated_unreserved reserve nobody
		"dra_pod_blocked":             150,
		"dra_claim_reservation_leak":  4,
		"dra_pod_info":                1_000 - 2 - 2, // no pod for two leaks; two have Succeeded
		"dra_device_class_devices":    3 * (nodes + 1),
	}
	for name, want := range wantSeries {
		if got := res.families[name]; got != want {
			t.Errorf("%s: %d series, want %d", name, got, want)
		}
	}
	t.Logf("1k scrape: %d series, %d bytes", res.series, res.bytes)
}

// TestGenerateDeterministic checks that two generations are identical.
func TestGenerateDeterministic(t *testing.T) {
	a, b := Generate(2_000), Generate(2_000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("Generate(2000) differs between two calls")
	}
}
