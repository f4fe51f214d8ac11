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
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/offline"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// Exit codes of the explain command.
const (
	// explainReady: the pod is Ready, or a negative control holds.
	explainReady = 0
	// explainBlocked: the pod is not Ready (blocked, waiting, not a DRA
	// pod), or a negative control is broken or invalid.
	explainBlocked = 1
	explainUsage   = 2
	// explainUnreadable: the cluster or the files could not be read, or
	// the pod is not there.
	explainUnreadable = 3
)

func explain(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Walks the DRA decision tree for one pod and prints each link PASS/FAIL with its evidence; a negative control "+
		"(--gates.negative-control-label) is judged as one: HOLDS, BROKEN or INVALID, as gates judges it. "+
		"Without --from it reads the cluster (get and list only). "+exitHelp(explainExitCodes), stdout, stderr)
	from := app.Flag("from", "File of objects to read instead of the cluster (repeatable).").PlaceHolder("FILE").Strings()
	kubeconfig := registerKubeconfig(app)
	kubeContext := registerContext(app)
	nowFlag := app.Flag("now", "The time to evaluate at, RFC3339 (default: now).").PlaceHolder("RFC3339").String()
	timeout := app.Flag("timeout", "Time allowed for reading the cluster.").Default("1m").Duration()
	output := app.Flag("output", "Output: text or json.").Short('o').Default("text").Enum("text", "json")
	var cfg config
	cfg.register(app)
	target := app.Arg("namespace/pod", "The pod to explain (NAMESPACE/POD, or POD with -n).").Required().PlaceHolder("NAMESPACE/POD").String()
	nsFlag := registerNamespace(app)
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	ns, name, ok := strings.Cut(*target, "/")
	if !ok && *nsFlag != "" {
		ns, name, ok = *nsFlag, *target, true
	}
	if !ok || ns == "" || name == "" || (*nsFlag != "" && ns != *nsFlag) {
		app.Errorf("want NAMESPACE/POD (or POD with -n NAMESPACE), got %q, try --help", *target)
		return explainUsage
	}
	now, err := parseNow(*nowFlag)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return explainUsage
	}
	control, err := cfg.controlLabel()
	if err != nil {
		app.Errorf("%v, try --help", err)
		return explainUsage
	}
	clock := func() time.Time { return now }
	var ix *index.Index
	if len(*from) > 0 {
		built, problems, err := offline.Build(*from, cfg.trimmer(), cfg.indexConfig(clock, nil))
		reportProblems(stderr, problems)
		if err != nil {
			fmt.Fprintln(stderr, prog+":", err)
			return explainUnreadable
		}
		ix = built
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		ix, err = readCluster(ctx, kubeTarget{*kubeconfig, *kubeContext}, ns, name, cfg, clock)
		if err != nil {
			fmt.Fprintln(stderr, prog+":", err)
			return explainUnreadable
		}
	}
	s := ix.Snapshot()
	p := s.Pod(index.Key{Namespace: ns, Name: name})
	if p == nil {
		fmt.Fprintf(stderr, "%s: pod %s/%s not found, or it neither names a resource claim nor requests an extended resource\n", prog, ns, name)
		return explainUnreadable
	}
	r := explainReport{verdict: classify.Pod(s, p)}
	if control.Matches(p) {
		// The exporter's dra_negative_control and gates judge a control
		// from the tree's verdict when it is blocked.
		var blocked *classify.Verdict
		if r.verdict.Blocked {
			blocked = &r.verdict
		}
		c := classify.NegativeControl(s, p, blocked, true)
		r.control = &c
	}
	// Leaks that name this pod (one line a claim and reason, not a device).
	seen := map[string]bool{}
	for _, l := range classify.Leaks(s, now, cfg.unreservedGrace) {
		if l.Claim.Key.Namespace != p.Key.Namespace || (l.PodUID != p.UID && l.Pod != p.Key.Name) {
			continue
		}
		line := fmt.Sprintf("claim %s %s: %s", l.Claim.Key, l.Reason, l.Detail)
		if !seen[line] {
			seen[line] = true
			r.leaks = append(r.leaks, explainLeak{Claim: l.Claim.Key.Name, Reason: string(l.Reason), Detail: l.Detail})
		}
	}
	if *output == "json" {
		err = r.writeJSON(stdout)
	} else {
		err = r.writeText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return explainUnreadable
	}
	return r.exitCode()
}

// readCluster lists what the tree reads for one pod: every watched
// resource (kube.Watched), each cluster-wide but pods (the pod's namespace,
// or all pods when it requests extended resources, for device-plugin
// capacity) and events (the pod's Warning events); claims of other
// namespaces hold devices too. An optional resource the API server does
// not serve (DeviceTaintRules before 1.37, or a role without them) leaves
// what the others say.
func readCluster(ctx context.Context, kt kubeTarget, ns, name string, cfg config, now func() time.Time) (*index.Index, error) {
	client, err := kubeClient(kt)
	if err != nil {
		return nil, err
	}
	return readPod(ctx, client, ns, name, cfg, now)
}

func readPod(ctx context.Context, client kubernetes.Interface, ns, name string, cfg config, now func() time.Time) (*index.Index, error) {
	ix := index.New(cfg.indexConfig(now, nil))
	trim := cfg.trimmer()
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	for _, r := range kube.Watched {
		var namespace string
		var opts metav1.ListOptions
		switch r.Name {
		case kube.ResPods:
			if !hasExtendedRequests(pod) {
				namespace = ns
			}
		case kube.ResEvents:
			namespace = ns
			opts.FieldSelector = fields.AndSelectors(
				fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
				fields.OneTermEqualSelector("involvedObject.name", name),
				fields.OneTermEqualSelector("type", corev1.EventTypeWarning),
			).String()
		}
		items, err := r.List(ctx, client, namespace, opts)
		if err != nil {
			if r.Unserved != "" {
				continue
			}
			return nil, err
		}
		for _, o := range items {
			_ = ix.Upsert(trim.Trim(o), false)
		}
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
