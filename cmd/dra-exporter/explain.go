package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/offline"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

func explain(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Walks the DRA decision tree for one pod and prints each link PASS/FAIL with its evidence. "+
		"Without --from it reads the cluster (get and list only).", stdout, stderr)
	from := app.Flag("from", "File of objects to read instead of the cluster (repeatable).").PlaceHolder("FILE").Strings()
	kubeconfig := app.Flag("kubeconfig", "Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).").String()
	nowFlag := app.Flag("now", "The time to evaluate at, RFC3339 (default: now).").PlaceHolder("RFC3339").String()
	timeout := app.Flag("timeout", "Time allowed for reading the cluster.").Default("1m").Duration()
	var cfg config
	cfg.register(app)
	target := app.Arg("namespace/pod", "The pod to explain.").Required().PlaceHolder("NAMESPACE/POD").String()
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	ns, name, ok := strings.Cut(*target, "/")
	if !ok || ns == "" || name == "" {
		app.Errorf("want NAMESPACE/POD, got %q, try --help", *target)
		return 2
	}
	now, err := parseNow(*nowFlag)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 2
	}
	clock := func() time.Time { return now }
	var ix *index.Index
	if len(*from) > 0 {
		built, problems, err := offline.Build(*from, cfg.trimmer(), cfg.indexConfig(clock, nil))
		reportProblems(stderr, problems)
		if err != nil {
			fmt.Fprintln(stderr, prog+":", err)
			return 1
		}
		ix = built
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		ix, err = readCluster(ctx, *kubeconfig, ns, name, cfg, clock)
		if err != nil {
			fmt.Fprintln(stderr, prog+":", err)
			return 1
		}
	}
	s := ix.Snapshot()
	p := s.Pod(index.Key{Namespace: ns, Name: name})
	if p == nil {
		fmt.Fprintf(stderr, "%s: pod %s/%s not found, or it neither names a resource claim nor requests an extended resource\n", prog, ns, name)
		return 1
	}
	if err := classify.Format(stdout, classify.Pod(s, p)); err != nil {
		return 1
	}
	// Leaks that name this pod (one line a claim and reason, not a device).
	seen := map[string]bool{}
	for _, l := range classify.Leaks(s, now, cfg.unreservedGrace) {
		if l.Claim.Key.Namespace != p.Key.Namespace || (l.PodUID != p.UID && l.Pod != p.Key.Name) {
			continue
		}
		line := fmt.Sprintf("Leak: claim %s %s: %s", l.Claim.Key, l.Reason, l.Detail)
		if !seen[line] {
			seen[line] = true
			fmt.Fprintln(stdout, line)
		}
	}
	return 0
}

// readCluster lists what the tree reads for one pod: every class, slice and
// claim (claims of other namespaces hold devices too), the pod's namespace
// (all pods when it requests extended resources, for device-plugin
// capacity), nodes, and the pod's Warning events.
func readCluster(ctx context.Context, kubeconfig, ns, name string, cfg config, now func() time.Time) (*index.Index, error) {
	client, err := kubeClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	ix := index.New(cfg.indexConfig(now, nil))
	trim := cfg.trimmer()
	add := func(obj any) error { return ix.Upsert(trim.Trim(obj), false) }
	all := metav1.ListOptions{}

	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list deviceclasses: %w", err)
	}
	for i := range classes.Items {
		_ = add(&classes.Items[i])
	}
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list resourceslices: %w", err)
	}
	for i := range slices.Items {
		_ = add(&slices.Items[i])
	}
	// DeviceTaintRules are GA in 1.37; an older API server or a role
	// without them leaves the slices' own taints.
	if rules, err := client.ResourceV1().DeviceTaintRules().List(ctx, all); err == nil {
		for i := range rules.Items {
			_ = add(&rules.Items[i])
		}
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list resourceclaims: %w", err)
	}
	for i := range claims.Items {
		_ = add(&claims.Items[i])
	}
	podNS := ns
	if hasExtendedRequests(pod) {
		podNS = ""
	}
	pods, err := client.CoreV1().Pods(podNS).List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		_ = add(&pods.Items[i])
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		_ = add(&nodes.Items[i])
	}
	events, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
		fields.OneTermEqualSelector("involvedObject.name", name),
		fields.OneTermEqualSelector("type", corev1.EventTypeWarning),
	).String()})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	for i := range events.Items {
		_ = add(&events.Items[i])
	}
	return ix, nil
}

func hasExtendedRequests(p *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for n := range c.Resources.Requests {
			if vocab.IsExtendedResource(string(n)) {
				return true
			}
		}
		for n := range c.Resources.Limits {
			if vocab.IsExtendedResource(string(n)) {
				return true
			}
		}
	}
	return false
}
