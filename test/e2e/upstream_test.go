package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// EnvUpstreamOut names a directory: TestUpstreamMetricNames writes the DRA
// series of the real components there, in <dir>/<version>/, the source of
// rules/testdata/upstream (rules/upstream_exposition_test.go reads them).
const EnvUpstreamOut = "DRA_E2E_UPSTREAM_OUT"

// The rule bundle reads the resourceclaim controller's and the scheduler's
// own series (rules/upstream.go), and 1.37 renamed them. On the release
// under test a ResourceQuota of zero ResourceClaims makes the real
// controller fail to create a pod's claim: its failure counter, under the
// release's name, counts it and keeps counting as the controller retries,
// and the other release's name is absent. The series of two scrapes are
// kept for the rules' own test.
func TestUpstreamMetricNames(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	c := env.cp.Client
	ns := namespace(t, "e2e-upstream")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-claims"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/resourceclaims.resource.k8s.io": resource.MustParse("0")}}}
	if _, err := c.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	creates, other := "resourceclaim_controller_creates_total", "dynamic_resource_allocation_"
	if env.cp.Version.Minor >= 37 {
		creates, other = "dynamic_resource_allocation_resourceclaim_creates_total", "resourceclaim_controller_"
	}
	before := failures(t, ctx, creates)
	createPod(t, cluster.PodWithTemplate(ns, "quota-refused", "gpu"))

	// Two scrapes of the controller-manager, the failure counter higher in
	// the second: a rate the rules can evaluate.
	var scrapes []string
	for len(scrapes) < 2 {
		floor := before
		if len(scrapes) == 1 {
			floor = sumSeries(scrapes[0], creates, `status="failure"`)
		}
		var got string
		err := cluster.WaitFor(ctx, 60*time.Second, fmt.Sprintf("%s{status=\"failure\"} above %v", creates, floor), func(ctx context.Context) (bool, error) {
			out, err := env.cp.ComponentMetrics(ctx, "kube-controller-manager")
			if err != nil {
				return false, err
			}
			got = draSeries(out)
			return sumSeries(got, creates, `status="failure"`) > floor, nil
		})
		if err != nil {
			t.Fatalf("on %s: %v\nthe controller-manager's DRA series:\n%s", env.cp.Version, err, got)
		}
		scrapes = append(scrapes, got)
	}
	last := scrapes[1]
	if strings.Contains(last, "\n"+other) || strings.HasPrefix(last, other) {
		t.Errorf("on %s the controller-manager exports %s* beside %s:\n%s", env.cp.Version, other, creates, last)
	}
	if !strings.Contains(last, `workqueue_depth{name="resource_claim"}`) {
		t.Errorf("on %s no workqueue_depth{name=\"resource_claim\"} (DRAResourceClaimControllerBacklog reads it):\n%s", env.cp.Version, last)
	}
	sched, err := env.cp.ComponentMetrics(ctx, "kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}

	out := os.Getenv(EnvUpstreamOut)
	if out == "" {
		return
	}
	if draSeries(sched) == "" {
		// The scheduler's DRA plugin series appear once it has scheduled
		// a pod with claims: the other tests of the subset do that first.
		t.Fatalf("%s wrote nothing: the scheduler has no DRA series yet; run the whole subset (make test-compat UPSTREAM_OUT=...)", EnvUpstreamOut)
	}
	dir := filepath.Join(out, env.cp.Version.Git)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"kube-controller-manager-1.prom": scrapes[0],
		"kube-controller-manager-2.prom": scrapes[1],
		"kube-scheduler.prom":            draSeries(sched),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote the DRA series of %s to %s", env.cp.Version, dir)
}

// failures reads the controller-manager's failure count now (0 before the
// first failure: the series is absent until then).
func failures(t *testing.T, ctx context.Context, creates string) float64 {
	t.Helper()
	out, err := env.cp.ComponentMetrics(ctx, "kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	return sumSeries(out, creates, `status="failure"`)
}

// draSeries keeps the lines of an exposition that the rule bundle may read
// of a control-plane component, with their HELP and TYPE: the resourceclaim
// controller's and the scheduler's claim series under either release's
// names, the resource_claim work queue, and the DynamicResources plugin's
// timings.
func draSeries(exposition string) string {
	keep := func(name, line string) bool {
		switch {
		case strings.HasPrefix(name, "resourceclaim_controller_"), strings.HasPrefix(name, "dynamic_resource_allocation_"),
			name == "scheduler_resourceclaim_creates_total":
			return true
		case strings.HasPrefix(name, "workqueue_"):
			return strings.Contains(line, `name="resource_claim"`)
		case strings.HasPrefix(name, "scheduler_plugin_execution_duration_seconds"):
			return strings.Contains(line, `plugin="DynamicResources"`)
		}
		return false
	}
	comments := map[string][]string{} // family -> its HELP and TYPE lines
	written := map[string]bool{}
	var b strings.Builder
	for _, line := range strings.Split(exposition, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && (f[1] == "HELP" || f[1] == "TYPE") {
			comments[f[2]] = append(comments[f[2]], line)
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if !keep(name, line) {
			continue
		}
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && comments[base] != nil {
				family = base
			}
		}
		if !written[family] {
			written[family] = true
			for _, c := range comments[family] {
				b.WriteString(c + "\n")
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// sumSeries adds the values of the samples of metric whose labels contain
// match.
func sumSeries(exposition, metric, match string) float64 {
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		if !strings.Contains(line, match) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
