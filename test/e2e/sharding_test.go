package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

const totalShards = 3

// shardOf is the documented rule, written again here rather than imported:
// FNV-1a 32 of the namespace, mod the total.
func shardOf(ns string) int {
	h := fnv.New32a()
	h.Write([]byte(ns))
	return int(h.Sum32() % totalShards)
}

// TestSharding runs three shards (shard 1 through --auto-sharding, as a
// StatefulSet pod) next to the suite's unsharded exporter, on a cluster
// whose joins cross namespaces of different shards: a pod waits for L4s
// that lower-priority pods of another shard's namespace hold, and a claim
// is allocated a GPU that a claim of another shard's namespace holds. The
// union of the shards' series must be the unsharded exporter's, each series
// from exactly one shard; the whole cluster is compared, so whatever other
// tests left behind counts too.
func TestSharding(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	c := env.cp.Client
	holders, waiter, gpuHolder := "e2e-shard-2", "e2e-shard-3", "e2e-shard-1"
	for want, ns := range []string{holders, waiter, gpuHolder} {
		if got := shardOf(ns); got != want {
			t.Fatalf("namespace %s is on shard %d; the test wants one namespace per shard (%d)", ns, got, want)
		}
	}

	shards := make([]*cluster.Exporter, totalShards)
	for i := range shards {
		dir := filepath.Join(env.dir, fmt.Sprintf("shard-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"--claim.unreserved-grace-period=3s", fmt.Sprintf("--total-shards=%d", totalShards)}
		if i == 1 {
			t.Setenv("POD_NAME", "dra-exporter-1") // inherited by the subprocess
			args = append(args, "--auto-sharding")
		} else {
			args = append(args, fmt.Sprintf("--shard=%d", i))
		}
		exp, err := cluster.StartExporter(ctx, env.exporter, env.kubeconfig, dir, args...)
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		shards[i] = exp
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("----- shard %d (%s)\n%s", i, exp.Log, cluster.Tail(exp.Log, 30))
			}
			exp.Stop()
		})
	}

	// Shard 0's namespace: two low-priority pods hold both L4s of gpu-node-3.
	namespace(t, holders)
	namespace(t, waiter)
	namespace(t, gpuHolder)
	for _, ns := range []string{holders, waiter} {
		tmpl := cluster.ClaimTemplate(ns, "l4", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'")
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("l4-holder-%d", i)
		createPod(t, cluster.PodWithTemplate(holders, name, "l4"))
		scheduled(t, holders, name)
		if err := env.kubelet.SetRunning(ctx, holders, name, true); err != nil {
			t.Fatal(err)
		}
	}
	// Shard 1's namespace: a high-priority pod waits for those L4s
	// (capacity_exhausted, two lower-priority holders in shard 0's namespace),
	// a pod of the device-plugin lane, and a claim allocated a GPU that
	// shard 2's namespace holds.
	critical := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: waiter + "-critical"}, Value: 1000000}
	if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, critical, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.SchedulingV1().PriorityClasses().Delete(context.Background(), critical.Name, metav1.DeleteOptions{})
	})
	urgent := cluster.PodWithTemplate(waiter, "l4-urgent", "l4")
	urgent.Spec.PriorityClassName = critical.Name
	createPod(t, urgent)
	createPod(t, cluster.OffDevicePluginNode(cluster.PodWithGPUs(waiter, "extended", 1)))
	// Shard 2's namespace: a running pod holds an H100; a pod names a claim
	// that does not exist; a pod whose devices failed to prepare (an event).
	bound, _, held := allocatedPod(t, gpuHolder, "llm-0")
	if err := env.kubelet.SetRunning(ctx, gpuHolder, "llm-0", true); err != nil {
		t.Fatal(err)
	}
	createPod(t, cluster.PodWithClaim(gpuHolder, "no-claim", "missing"))
	failing, _, _ := allocatedPod(t, gpuHolder, "prepare-fails")
	if err := env.kubelet.SetContainerCreating(ctx, gpuHolder, "prepare-fails"); err != nil {
		t.Fatal(err)
	}
	if err := env.kubelet.PrepareFailed(ctx, failing, "error preparing devices for claim: device is in use"); err != nil {
		t.Fatal(err)
	}
	stolen := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: waiter, Name: "stolen-gpu"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := c.ResourceV1().ResourceClaims(waiter).Create(ctx, stolen, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := c.ResourceV1().ResourceClaims(waiter).Get(ctx, stolen.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Allocation = &resourceapi.AllocationResult{
			Devices:             resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: held.Driver, Pool: held.Pool, Device: held.Device}}},
			AllocationTimestamp: &metav1.Time{Time: time.Now()},
		}
		_, err = c.ResourceV1().ResourceClaims(waiter).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("allocate %s to %s's device: %v", stolen.Name, bound.Name, err)
	}

	// The cross-shard verdicts, from the shard that owns each namespace.
	waitShard(t, shards[1], "capacity_exhausted behind two holders of another shard's namespace", func(m cluster.Metrics) error {
		if err := one(m, "dra_pod_blocked", blockedLabels(waiter, "l4-urgent", "scheduler", "capacity_exhausted"), 1); err != nil {
			return err
		}
		if err := one(m, "dra_pod_lower_priority_holders", map[string]string{"namespace": waiter, "pod": "l4-urgent"}, 2); err != nil {
			return err
		}
		return one(m, "dra_device_allocation_conflict", map[string]string{"namespace": waiter, "claim": stolen.Name, "device": held.Device}, 1)
	})
	waitShard(t, shards[2], "the other side of the conflict, and the node evidence of an event", func(m cluster.Metrics) error {
		if err := one(m, "dra_device_allocation_conflict", map[string]string{"namespace": gpuHolder, "pod": "llm-0", "device": held.Device}, 1); err != nil {
			return err
		}
		if err := one(m, "dra_pod_blocked", blockedLabels(gpuHolder, "prepare-fails", "node", "node_prepare_failed"), 1); err != nil {
			return err
		}
		return one(m, "dra_pod_blocked", blockedLabels(gpuHolder, "no-claim", "controller", "claim_not_found"), 1)
	})

	// The union, compared whole, until the five scrapes see one state.
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		diff, err := compareShards(shards)
		if err != nil {
			t.Fatal(err)
		}
		if diff == "" {
			break
		}
		last = diff
		if time.Now().After(deadline) {
			t.Fatalf("the shards' union differs from the unsharded exporter:\n%s", last)
		}
		time.Sleep(time.Second)
	}

	// Self-metrics: each shard says which it is; only shard 0 observes the
	// latency histograms, for every namespace (it saw the claims allocated).
	for i, exp := range shards {
		m, err := exp.Scrape()
		if err != nil {
			t.Fatal(err)
		}
		if own := []string{holders, waiter, gpuHolder}[i]; len(m.Find("dra_pod_info", map[string]string{"namespace": own})) == 0 {
			t.Errorf("shard %d serves no pod of its namespace %s", i, own)
		}
		if err := one(m, "dra_exporter_shard_info", map[string]string{"shard": fmt.Sprint(i), "total_shards": fmt.Sprint(totalShards)}, 1); err != nil {
			t.Errorf("shard %d: %v", i, err)
		}
		allocations := m.Sum("dra_claim_allocation_duration_seconds", nil)
		if i == 0 && allocations < 3 {
			t.Errorf("shard 0 observed %v allocations, want the 3 of the other shards' namespaces at least", allocations)
		}
		if i > 0 && m["dra_claim_allocation_duration_seconds"] != nil {
			t.Errorf("shard %d serves latency histograms; only shard 0 should", i)
		}
		t.Logf("shard %d: %d series, resident %.1f MiB, heap in use %.1f MiB", i, seriesCount(m),
			m.Sum("process_resident_memory_bytes", nil)/(1<<20), m.Sum("go_memstats_heap_inuse_bytes", nil)/(1<<20))
	}
	m, err := env.exp.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	if m["dra_exporter_shard_info"] != nil {
		t.Errorf("the unsharded exporter serves dra_exporter_shard_info")
	}
	t.Logf("unsharded: %d series (%d compared with the shards' union), resident %.1f MiB, heap in use %.1f MiB", seriesCount(m), len(clusterSeries(m)),
		m.Sum("process_resident_memory_bytes", nil)/(1<<20), m.Sum("go_memstats_heap_inuse_bytes", nil)/(1<<20))
}

// waitShard scrapes one shard until check passes.
func waitShard(t *testing.T, exp *cluster.Exporter, what string, check func(m cluster.Metrics) error) {
	t.Helper()
	deadline := time.Now().Add(waitMetric)
	for {
		m, err := exp.Scrape()
		if err == nil {
			if err = check(m); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, waitMetric, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compareShards scrapes the unsharded exporter, the shards, and the
// unsharded exporter again. When the two unsharded scrapes agree, it
// returns how the shards' series differ from them: a series from two
// shards, one missing from every shard, one no unsharded exporter serves,
// or a value that differs (values are summed over the shards). The
// exporters' own families (live only) are left out.
func compareShards(shards []*cluster.Exporter) (string, error) {
	before, err := env.exp.Scrape()
	if err != nil {
		return "", err
	}
	sum := map[string]float64{}
	from := map[string][]int{}
	for i, exp := range shards {
		m, err := exp.Scrape()
		if err != nil {
			return "", fmt.Errorf("shard %d: %w", i, err)
		}
		for series, v := range clusterSeries(m) {
			sum[series] += v
			from[series] = append(from[series], i)
		}
	}
	after, err := env.exp.Scrape()
	if err != nil {
		return "", err
	}
	want := clusterSeries(after)
	if !equalSeries(clusterSeries(before), want) {
		return "the unsharded exporter changed during the scrapes", nil
	}
	var diffs []string
	for series, shards := range from {
		if len(shards) > 1 {
			diffs = append(diffs, fmt.Sprintf("%s from shards %v", series, shards))
		}
	}
	for series, v := range want {
		got, ok := sum[series]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s missing from every shard", series))
		case got != v:
			diffs = append(diffs, fmt.Sprintf("%s: %v over the shards, %v unsharded", series, got, v))
		}
	}
	for series := range sum {
		if _, ok := want[series]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s from shard %v, not unsharded", series, from[series]))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n"), nil
}

// clusterSeries returns the series of the cluster families (those snapshot
// also prints), keyed by name and labels.
func clusterSeries(m cluster.Metrics) map[string]float64 {
	out := map[string]float64{}
	for name, mf := range m {
		if liveOnly(name, mf) {
			continue
		}
		for _, s := range m.Find(name, nil) {
			s := s
			v := s.Value
			s.Value = 0
			out[name+strings.TrimSuffix(s.String(), " 0")] = v
		}
	}
	return out
}

func equalSeries(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func seriesCount(m cluster.Metrics) int {
	n := 0
	for _, mf := range m {
		n += len(mf.GetMetric())
	}
	return n
}
