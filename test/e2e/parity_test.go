package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// The exporter watching the real API server serves exactly what
// `dra-exporter snapshot` prints for a dump of the same objects, and live
// and offline `explain` give the same verdicts: the informers (protobuf,
// field selectors, trimming on arrival) and the file loader feed one index.
// The whole cluster is compared, so whatever earlier tests left behind is
// checked too.
func TestLiveMatchesSnapshot(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-parity")
	c := env.cp.Client
	for _, tmpl := range []*resourceapi.ResourceClaimTemplate{
		cluster.ClaimTemplate(ns, "gpu", cluster.GPUClass),
		cluster.ClaimTemplate(ns, "b200", cluster.GPUClass, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"),
	} {
		if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	shared := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Spec: cluster.ClaimSpec(cluster.GPUClass)}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ready", "loading", "pending", "failed"} {
		createPod(t, cluster.PodWithTemplate(ns, name, "gpu"))
	}
	createPod(t, cluster.PodWithTemplate(ns, "negative", "b200"))
	createPod(t, cluster.PodWithClaim(ns, "no-claim", "missing"))
	createPod(t, cluster.PodWithClaim(ns, "shared-a", "shared"))
	createPod(t, cluster.PodWithClaim(ns, "shared-b", "shared"))
	createPod(t, cluster.OffDevicePluginNode(cluster.PodWithGPUs(ns, "extended", 1)))

	for _, name := range []string{"ready", "loading", "pending", "failed", "shared-a", "shared-b", "extended"} {
		scheduled(t, ns, name)
	}
	generatedClaim(t, ns, "negative")
	if err := env.kubelet.SetRunning(ctx, ns, "ready", true); err != nil {
		t.Fatal(err)
	}
	if err := env.kubelet.SetRunning(ctx, ns, "loading", false); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pending", "failed", "shared-a"} {
		if err := env.kubelet.SetContainerCreating(ctx, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	failed, err := c.CoreV1().Pods(ns).Get(ctx, "failed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.kubelet.PrepareFailed(ctx, failed, "error preparing devices for claim: device gpu-0 is in use"); err != nil {
		t.Fatal(err)
	}
	// A Normal event with a DRA reason is not evidence: the informer's field
	// selector never delivers it, so a file must not count it either.
	pending, err := c.CoreV1().Pods(ns).Get(ctx, "pending", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	normal := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: "pending.normal"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "pending", UID: pending.UID},
		Reason:         "FailedPrepareDynamicResources", Message: "not a failure", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}
	if _, err := c.CoreV1().Events(ns).Create(ctx, normal, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The verdicts this namespace must show, live.
	want := map[string]string{
		"loading":  "application/not_ready",
		"pending":  "node/node_prepare_pending",
		"failed":   "node/node_prepare_failed",
		"shared-a": "node/node_prepare_pending",
		"shared-b": "node/node_prepare_pending",
		"extended": "node/node_prepare_pending",
		"negative": "scheduler/selector_matches_nothing",
		"no-claim": "controller/claim_not_found",
	}
	eventually(t, waitMetric, "the seeded verdicts", func(m cluster.Metrics) error {
		got := map[string]string{}
		for _, s := range m.Find("dra_pod_blocked", map[string]string{"namespace": ns}) {
			got[s.Labels["pod"]] = s.Labels["layer"] + "/" + s.Labels["reason"]
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("blocked pods %v, want %v", got, want)
		}
		return nil
	})

	dump := liveMatchesSnapshot(t)

	verdict := regexp.MustCompile(`(?m)^Verdict: .*$`)
	for _, name := range append(slices.Sorted(maps.Keys(want)), "ready") {
		live, err := cluster.Explain(ctx, env.exporter, env.kubeconfig, ns+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, env.exporter, "explain", "--from="+dump, ns+"/"+name).Output()
		if err = cluster.ExplainVerdict(err); err != nil {
			t.Fatalf("explain --from %s/%s: %v", ns, name, err)
		}
		l, o := verdict.FindString(live), verdict.FindString(string(out))
		if l == "" || l != o {
			t.Errorf("%s: live explain says %q, offline %q\nlive:\n%s\noffline:\n%s", name, l, o, live, out)
		}
	}
}

// liveMatchesSnapshot fails the test unless live /metrics and `snapshot`
// of a dump of the same objects agree (retrying while objects move); it
// returns the dump.
func liveMatchesSnapshot(t *testing.T) string {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "cluster.json")
	var diff string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		diff, err = compareLiveWithSnapshot(context.Background(), dump)
		if err != nil {
			t.Fatal(err)
		}
		if diff == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // objects changed between dump and scrape, or a grace period ran out
	}
	if diff != "" {
		t.Fatalf("live /metrics and `snapshot` of the same objects differ:\n%s", diff)
	}
	return dump
}

// compareLiveWithSnapshot scrapes the exporter, dumps every object kind it
// watches, scrapes again and, when both scrapes agree (nothing moved during
// the dump), runs `snapshot` on the dump at the time of the dump. It returns
// the differences, or "" when the families match.
func compareLiveWithSnapshot(ctx context.Context, dump string) (string, error) {
	return compareLiveWith(ctx, dump, dumpCluster)
}

// compareLiveWith is compareLiveWithSnapshot with the objects dumped by
// dumpTo (the evidence bundle, for one).
func compareLiveWith(ctx context.Context, dump string, dumpTo func(context.Context, string) error) (string, error) {
	before, err := scrapeText()
	if err != nil {
		return "", err
	}
	at := time.Now().UTC()
	if err := dumpTo(ctx, dump); err != nil {
		return "", err
	}
	after, err := scrapeText()
	if err != nil {
		return "", err
	}
	live, err := parseExposition(after)
	if err != nil {
		return "", err
	}
	first, err := parseExposition(before)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, env.exporter, "snapshot", "--from="+dump, "--now="+at.Format(time.RFC3339),
		"--claim.unreserved-grace-period=3s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("snapshot: %v: %s", err, stderr.String())
	}
	offline, err := parseExposition(string(out))
	if err != nil {
		return "", err
	}
	var diffs []string
	for name, mf := range offline {
		want := seriesOf(mf)
		if got := seriesOf(first[name]); !slices.Equal(got, seriesOf(live[name])) {
			return fmt.Sprintf("%s changed during the dump", name), nil
		}
		got := seriesOf(live[name])
		if !slices.Equal(got, want) {
			diffs = append(diffs, fmt.Sprintf("%s:\n  only live:    %v\n  only offline: %v", name, minus(got, want), minus(want, got)))
		}
	}
	for name, mf := range live {
		if offline[name] != nil || liveOnly(name, mf) {
			continue
		}
		diffs = append(diffs, fmt.Sprintf("%s: served live, missing from snapshot", name))
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "\n"), nil
}

// liveOnly reports the families snapshot leaves out by design: latency
// histograms, self-metrics and the process and Go runtime collectors.
func liveOnly(name string, mf *dto.MetricFamily) bool {
	if mf.GetType() == dto.MetricType_HISTOGRAM {
		return true
	}
	for _, p := range []string{"dra_exporter_", "go_", "process_", "promhttp_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func scrapeText() (string, error) {
	m, err := env.exp.Scrape()
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	for _, mf := range m {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return "", err
		}
	}
	return buf.String(), nil
}

func parseExposition(s string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(s))
}

// seriesOf renders each series of a family as one sorted line.
func seriesOf(mf *dto.MetricFamily) []string {
	var out []string
	for _, s := range (cluster.Metrics{"f": mf}).Find("f", nil) {
		out = append(out, s.String())
	}
	sort.Strings(out)
	return out
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// dumpCluster writes every object of the kinds the exporter watches as a
// JSON stream, the way `kubectl get -o json` output appended to a file looks.
// Events of every type are written: the loader must filter as the
// informer's field selector does.
func dumpCluster(ctx context.Context, path string) error {
	c := env.cp.Client
	var objs []runtime.Object
	classes, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, resourceapi.SchemeGroupVersion.WithKind("DeviceClass"), classes.Items)
	if env.cp.Version.Has(cluster.FeatureDeviceTaintRules) {
		rules, err := c.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		objs = withKind(objs, resourceapi.SchemeGroupVersion.WithKind("DeviceTaintRule"), rules.Items)
	}
	rs, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), rs.Items)
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, resourceapi.SchemeGroupVersion.WithKind("ResourceClaim"), claims.Items)
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, corev1.SchemeGroupVersion.WithKind("Pod"), pods.Items)
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, corev1.SchemeGroupVersion.WithKind("Node"), nodes.Items)
	events, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	objs = withKind(objs, corev1.SchemeGroupVersion.WithKind("Event"), events.Items)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, o := range objs {
		if err := enc.Encode(o); err != nil {
			return err
		}
	}
	return os.WriteFile(path, buf.Bytes(), 0o600)
}

// withKind appends list items with their apiVersion and kind set, which a
// typed List leaves empty.
func withKind[T any, P interface {
	*T
	runtime.Object
}](out []runtime.Object, gvk schema.GroupVersionKind, items []T) []runtime.Object {
	for i := range items {
		o := P(&items[i])
		o.GetObjectKind().SetGroupVersionKind(gvk)
		out = append(out, o)
	}
	return out
}
