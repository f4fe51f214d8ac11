package nodee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	helmchart "github.com/dra-exporter/dra-exporter/deploy/helm"
	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// EnvArgoRollouts names the Argo Rollouts controller binary (`make
// argo-rollouts` builds it into .cache and the Makefile exports it).
const EnvArgoRollouts = "DRA_ARGO_ROLLOUTS"

// The README's install line, and the only value added to it here: the
// agent's GPU source, a recording (no GPU on this machine).
const (
	// Not the README's dra-exporter, in either: the suite's exporter process
	// runs as the ServiceAccount dra-exporter/dra-exporter under the
	// ClusterRole dra-exporter (test/cluster), which helm refuses to adopt.
	readmeRelease   = "dra-exporter-readme"
	readmeNamespace = "dra-exporter-readme"
	// The recording lies in the one host directory the chart mounts into
	// the agent (the kubelet's pod-resources folder, read-only); the node's
	// /var/lib is its own folder (test/node).
	chartRecording = "/var/lib/kubelet/pod-resources/dra-rollouts-gpu.json"
)

// The short timing the test passes to the AnalysisTemplate, as a user
// could (its defaults are 1m, 5, 10 and 15): a measurement every 5s, 3
// passing measurements in a row, 12 failed ones allowed for the canary's
// start, 15 at most.
var rolloutTiming = map[string]string{"interval": "5s", "passes": "3", "failures": "12", "count": "15"}

var (
	rolloutGVR     = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}
	analysisRunGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "analysisruns"}
)

// rolloutEnv is what the rollout tests share: the chart's installation, the
// Prometheus that scrapes it as the chart's ServiceMonitors say and
// evaluates its PrometheusRule, and the real Argo Rollouts controller.
type rolloutEnv struct {
	applier *cluster.Applier
	prom    *cluster.Prometheus
}

// TestRollouts runs the rollout templates of deploy/rollouts in the real
// controllers, processes against the real control plane: the Flagger cases
// are in flagger_test.go. argo-analysistemplate.yaml runs in Argo Rollouts
// v1.10.2, used exactly as the file documents it (its strategy block is read
// from the file; the test adds only the optional args a user may add: the
// Prometheus address and short timing). The exporter and the node agent are
// installed from the chart with the README's install line (default values,
// the prometheus-operator CRDs installed) plus the agent's recorded GPU
// source; a Prometheus scrapes them as the chart's ServiceMonitors say and
// evaluates the chart's PrometheusRule as the operator would. Each case
// deploys a stable revision, then a canary:
//   - a canary whose pod gets a GPU, starts and does GPU work is promoted;
//   - a canary whose DRA driver rejects its claim's configuration (the real
//     kubelet's prepare fails) is aborted, and the AnalysisRun names the node
//     gate and its owner;
//   - a healthy canary beside a negative control that got a device is
//     aborted, naming the negative control.
//
// The verdicts are read from the Rollout's and the AnalysisRuns' status as
// the controller wrote them.
func TestRollouts(t *testing.T) {
	ctx := context.Background()
	a, err := cluster.NewApplier(env.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	crds, err := cluster.PromOperatorCRDFiles(ctx, "monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	argoDir, err := toolModuleDir(ctx, "tools/argo-rollouts", "github.com/argoproj/argo-rollouts")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rollout-crd.yaml", "analysis-template-crd.yaml", "analysis-run-crd.yaml", "cluster-analysis-template-crd.yaml", "experiment-crd.yaml"} {
		crds = append(crds, filepath.Join(argoDir, "manifests", "crds", f))
	}
	if err := a.InstallCRDs(ctx, crds...); err != nil {
		t.Fatal(err)
	}
	re := &rolloutEnv{applier: a}
	re.prom = installChartAsREADME(t, a)
	t.Logf("CRDs, the chart and its Prometheus ready in %s", time.Since(start).Round(time.Second))

	t.Run("argo", re.argo)
	t.Run("flagger", re.flagger)
}

// argo runs the Argo Rollouts cases.
func (re *rolloutEnv) argo(t *testing.T) {
	bin := os.Getenv(EnvArgoRollouts)
	if bin == "" {
		t.Fatalf("%s is not set (make test builds the Argo Rollouts controller and sets it)", EnvArgoRollouts)
	}
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	healthzPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The controller's listeners are on every address of the node's network
	// namespace (its listen address is fixed), which nothing outside reaches.
	logPath := filepath.Join(env.root, "rollouts-controller.log")
	ctrl, err := cluster.StartProcess("rollouts-controller", bin, logPath, nil,
		"--kubeconfig", env.cp.Kubeconfig, "--leader-elect=false", "--loglevel", "info",
		fmt.Sprintf("--metricsPort=%d", metricsPort), fmt.Sprintf("--healthzPort=%d", healthzPort))
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop(10 * time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("rollouts-controller log:\n%s", cluster.Tail(logPath, 60))
		}
	}()

	t.Run("promoted", func(t *testing.T) {
		begin := time.Now()
		ns := namespace(t, "rollout-promote")
		template(t, ns, "gpu", nil)
		template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
		create(t, negativeControlPod(ns, "control", "no-such-gpu"))
		r := re.deployStable(t, ns)
		hash := r.update(t, func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "REVISION", Value: "2"})
		}, ctrl)
		re.gpuWork(t, ns, "rollouts-pod-template-hash="+hash)
		ro := r.waitFor(t, ctrl, 4*time.Minute, "promoted", func(ro *unstructured.Unstructured) (bool, error) {
			if abort, _, _ := unstructured.NestedBool(ro.Object, "status", "abort"); abort {
				return false, fmt.Errorf("aborted: %s", statusString(ro, "message"))
			}
			return statusString(ro, "stableRS") == hash && statusString(ro, "phase") == "Healthy", nil
		})
		t.Logf("rollout: phase %s, stableRS %s, message %q", statusString(ro, "phase"), statusString(ro, "stableRS"), statusString(ro, "message"))
		runs := r.analysisRuns(t, hash)
		for _, kind := range []string{"Background", "Step"} {
			run, ok := runs[kind]
			if !ok {
				t.Errorf("no %s AnalysisRun for the canary %s: %v", kind, hash, keys(runs))
				continue
			}
			t.Logf("%s", run)
			// The background run is terminated (Successful) once the rollout is
			// promoted; the step's run must have passed every metric.
			if run.phase != "Successful" {
				t.Errorf("%s AnalysisRun %s: phase %s, want Successful", kind, run.name, run.phase)
			}
			if kind == "Step" {
				for _, m := range run.metrics {
					if m.phase != "Successful" || m.consecutive < 3 {
						t.Errorf("step AnalysisRun metric %q: %s after %d measurements (%d in a row passed), want Successful after 3 in a row", m.name, m.phase, m.count, m.consecutive)
					}
				}
				if len(run.metrics) != 4 {
					t.Errorf("step AnalysisRun: %d metrics, want the 3 gates and the negative control", len(run.metrics))
				}
			}
		}
		t.Logf("promoted in %s", time.Since(begin).Round(time.Second))
	})

	t.Run("prepare-failure-aborted", func(t *testing.T) {
		begin := time.Now()
		ns := namespace(t, "rollout-prepare")
		template(t, ns, "gpu", nil)
		template(t, ns, "bogus", bogusSharing())
		template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
		create(t, negativeControlPod(ns, "control", "no-such-gpu"))
		r := re.deployStable(t, ns)
		hash := r.update(t, func(_ *corev1.Container, spec *corev1.PodSpec) {
			spec.ResourceClaims[0].ResourceClaimTemplateName = ptrTo("bogus")
		}, ctrl)
		r.expectAborted(t, ctrl, hash, "node gate (owner: node/runtime owner)")
		t.Logf("aborted in %s", time.Since(begin).Round(time.Second))
	})

	t.Run("negative-control-aborted", func(t *testing.T) {
		begin := time.Now()
		ns := namespace(t, "rollout-control")
		template(t, ns, "gpu", nil)
		// The control's selector matches a device: it is allocated one and runs.
		create(t, negativeControlPod(ns, "control", "gpu"))
		waitPod(t, ns, "control", "Running", 90*time.Second, running)
		r := re.deployStable(t, ns)
		hash := r.update(t, func(c *corev1.Container, _ *corev1.PodSpec) {
			c.Env = append(c.Env, corev1.EnvVar{Name: "REVISION", Value: "2"})
		}, ctrl)
		re.gpuWork(t, ns, "rollouts-pod-template-hash="+hash)
		r.expectAborted(t, ctrl, hash, "negative control (owner: platform team)")
		t.Logf("aborted in %s", time.Since(begin).Round(time.Second))
	})
}

func ptrTo[T any](v T) *T { return &v }

// installChartAsREADME installs the chart with the README's install line
// plus the agent's recorded GPU source, and starts a Prometheus that scrapes
// the chart's pods as its ServiceMonitors say and evaluates its
// PrometheusRule, read back from the API server as prometheus-operator
// reads them (with a 1s scrape and evaluation interval instead of their
// 30s: the test's only change to what the operator would run).
func installChartAsREADME(t *testing.T, a *cluster.Applier) *cluster.Prometheus {
	t.Helper()
	ctx := context.Background()
	helm := os.Getenv(helmchart.EnvHelm)
	imageDir := os.Getenv(EnvImageDir)
	if helm == "" || imageDir == "" {
		t.Fatalf("%s and %s must be set (make test builds helm and the image and sets them)", helmchart.EnvHelm, EnvImageDir)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	raw, err := os.ReadFile(repoPath("deploy/helm/dra-exporter/Chart.yaml"))
	if err == nil {
		err = yaml.Unmarshal(raw, &chart)
	}
	if err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	// `make image`'s images under the references the chart's defaults name
	// (repository:appVersion), as if pulled: the default pull policy
	// (IfNotPresent) finds them.
	for _, image := range []struct{ tarball, repo string }{
		{"dra-exporter.tar", "ghcr.io/dra-exporter/dra-exporter"},
		{"dra-exporter-node-agent.tar", "ghcr.io/dra-exporter/dra-exporter-node-agent"},
	} {
		if out, err := env.node.Ctr(ctx, "images", "import", filepath.Join(imageDir, image.tarball)); err != nil {
			t.Fatalf("import %s: %v: %s", image.tarball, err, out)
		}
		repo, tag := importedImage(t, image.repo)
		if out, err := env.node.Ctr(ctx, "images", "tag", "--force", repo+":"+tag, repo+":"+chart.AppVersion); err != nil {
			t.Fatalf("ctr images tag: %v: %s", err, out)
		}
	}
	// The example driver's node has none of the labels the agent's default
	// affinity knows GPU nodes by: labelled as docs/install.md says.
	labelGPUNode(t)
	if err := writeRecordingTo(ctx, chartRecording, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(chartRecording) })

	install := exec.CommandContext(ctx, helm, "install", readmeRelease, repoPath("deploy/helm/dra-exporter"),
		"--kubeconfig", env.cp.Kubeconfig, "--namespace", readmeNamespace, "--create-namespace",
		// The README's install line.
		"--set", "serviceMonitor.labels.release=kube-prometheus-stack",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack",
		// No GPU here: the agent reads a recording of the node's devices.
		"--set", "nodeAgent.gpu.source=recorded",
		"--set-json", `nodeAgent.extraArgs=["--gpu.recorded-file=`+chartRecording+`"]`,
		"--wait", "--timeout", "3m")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, podsOf(readmeNamespace))
	}
	t.Cleanup(func() {
		out, err := exec.Command(helm, "uninstall", readmeRelease, "--kubeconfig", env.cp.Kubeconfig, "--namespace", readmeNamespace, "--wait", "--timeout", "2m").CombinedOutput()
		if err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})

	// What prometheus-operator would configure: the PrometheusRule's groups
	// as a rule file, and a job per ServiceMonitor.
	rule := get(t, a, schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}, readmeNamespace, readmeRelease)
	if rule.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("the PrometheusRule's labels %v lack the README's release=kube-prometheus-stack", rule.GetLabels())
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	checkSameRules(t, groups)
	raw, err = yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(env.root, "prometheus-chart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleFile := filepath.Join(dir, "prometheusrule.yaml")
	if err := os.WriteFile(ruleFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	jobs := serviceMonitorJobs(t, a)
	prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary: os.Getenv(cluster.EnvPrometheus), Dir: dir, Interval: time.Second,
		RuleFiles: []string{ruleFile}, ExtraJobs: jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)
	// The rules it loaded are the PrometheusRule's, every one evaluating.
	err = cluster.WaitFor(ctx, 30*time.Second, "the chart's agent and exporter scraped, the rules evaluated", func(ctx context.Context) (bool, error) {
		n, err := prom.Query(ctx, `up{job=~"dra-exporter|dra-exporter-node-agent"} == 1`)
		if err != nil || n != 2 {
			return false, nil
		}
		n, err = prom.Query(ctx, `node:dra_node_process_attribution:min == 1`)
		return err == nil && n == 1, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, cluster.Tail(prom.Log, 20))
	}
	if bad, err := prom.RuleHealth(ctx); err != nil || len(bad) > 0 {
		t.Fatalf("rules failing: %v %v", bad, err)
	}
	loaded, err := prom.RuleNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		rules, _ := gm["rules"].([]any)
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			name, _ := rm["record"].(string)
			if name == "" {
				name, _ = rm["alert"].(string)
			}
			want = append(want, fmt.Sprintf("%s/%s", gm["name"], name))
		}
	}
	// The rules API lists the groups in its own order.
	sort.Strings(loaded)
	sort.Strings(want)
	if !reflect.DeepEqual(loaded, want) {
		t.Fatalf("Prometheus loaded %d rules, the PrometheusRule has %d:\n%v\n%v", len(loaded), len(want), loaded, want)
	}
	return prom
}

// checkSameRules checks that the chart's PrometheusRule holds the groups of
// rules/*.yaml, the bundle the suite's Prometheus loads, unchanged.
func checkSameRules(t *testing.T, groups []any) {
	t.Helper()
	files, err := filepath.Glob(repoPath("rules/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("rules/*.yaml: %v", err)
	}
	sort.Strings(files)
	var want []any
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Groups []any `json:"groups"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want = append(want, doc.Groups...)
	}
	got, _ := yaml.Marshal(groups)
	exp, _ := yaml.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("the chart's PrometheusRule differs from rules/*.yaml:\n--- PrometheusRule\n%s\n--- rules/\n%s", got, exp)
	}
}

// serviceMonitorJobs is a scrape job per ServiceMonitor of the release, as
// prometheus-operator builds it: the Services its selector matches, the job
// name from the Service's jobLabel, the endpoints' pods on the named port,
// honorLabels as the ServiceMonitor says.
func serviceMonitorJobs(t *testing.T, a *cluster.Applier) []cluster.ScrapeJob {
	t.Helper()
	ctx := context.Background()
	list, err := a.Dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}).
		Namespace(readmeNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("the chart's ServiceMonitors: %v (%d)", err, len(list.Items))
	}
	var jobs []cluster.ScrapeJob
	for _, sm := range list.Items {
		if sm.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("ServiceMonitor %s: labels %v lack the README's release=kube-prometheus-stack", sm.GetName(), sm.GetLabels())
		}
		selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints", sm.GetName(), len(endpoints))
		}
		ep, _ := endpoints[0].(map[string]any)
		port, _ := ep["port"].(string)
		honor, _ := ep["honorLabels"].(bool)
		svcs, err := env.cp.Client.CoreV1().Services(readmeNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelSelector(selector)})
		if err != nil || len(svcs.Items) != 1 {
			t.Fatalf("ServiceMonitor %s selects %d Services: %v", sm.GetName(), len(svcs.Items), err)
		}
		svc := svcs.Items[0]
		pods, err := env.cp.Client.CoreV1().Pods(readmeNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelSelector(svc.Spec.Selector)})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("Service %s selects %d pods: %v", svc.Name, len(pods.Items), err)
		}
		pod := pods.Items[0]
		var target string
		for _, p := range pod.Spec.Containers[0].Ports {
			if p.Name == port {
				target = fmt.Sprintf("%s:%d", pod.Status.PodIP, p.ContainerPort)
			}
		}
		if target == "" || pod.Status.PodIP == "" {
			t.Fatalf("pod %s: no IP or no port %q", pod.Name, port)
		}
		jobs = append(jobs, cluster.ScrapeJob{Name: svc.Labels[jobLabel], Target: target, HonorLabels: honor,
			Labels: map[string]string{"namespace": readmeNamespace, "pod": pod.Name}})
	}
	return jobs
}

func labelSelector(m map[string]string) string {
	return metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: m})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func get(t *testing.T, a *cluster.Applier, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := a.Dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return u
}

// documentedStrategy is the Rollout strategy the AnalysisTemplate's file
// documents (the commented block from "strategy:" on), with the namespace
// arg set to ns and the optional args (Prometheus address, timing) added to
// each args list, as its comment says a user does.
func documentedStrategy(t *testing.T, ns, prometheus string) map[string]any {
	t.Helper()
	var doc struct {
		Strategy map[string]any `json:"strategy"`
	}
	commentBlock(t, "deploy/rollouts/argo-analysistemplate.yaml", "strategy:", &doc)
	extra := []any{map[string]any{"name": "prometheus-address", "value": prometheus}}
	for _, k := range []string{"interval", "passes", "failures", "count"} {
		extra = append(extra, map[string]any{"name": k, "value": rolloutTiming[k]})
	}
	withArgs := func(analysis map[string]any) {
		args, _ := analysis["args"].([]any)
		for _, a := range args {
			if m, _ := a.(map[string]any); m["name"] == "namespace" {
				m["value"] = ns
			}
		}
		analysis["args"] = append(args, extra...)
	}
	canary, _ := doc.Strategy["canary"].(map[string]any)
	lists := 0
	if bg, ok := canary["analysis"].(map[string]any); ok {
		withArgs(bg)
		lists++
	}
	steps, _ := canary["steps"].([]any)
	for _, s := range steps {
		if an, ok := s.(map[string]any)["analysis"].(map[string]any); ok {
			withArgs(an)
			lists++
		}
	}
	if lists != 2 {
		t.Fatalf("the documented strategy has %d analyses, want the background one and a step", lists)
	}
	return doc.Strategy
}

// commentBlock decodes the YAML block a file documents in its comments:
// from the comment line that is just marker, as long as the lines stay
// indented.
func commentBlock(t *testing.T, file, marker string, out any) {
	t.Helper()
	raw, err := os.ReadFile(repoPath(file))
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	for _, line := range strings.Split(string(raw), "\n") {
		if len(block) == 0 && strings.TrimSpace(strings.TrimPrefix(line, "#")) != marker {
			continue
		}
		if !strings.HasPrefix(line, "#  ") {
			break
		}
		block = append(block, strings.TrimPrefix(line, "#"))
	}
	if len(block) == 0 {
		t.Fatalf("%s documents no %q block", file, marker)
	}
	if err := yaml.Unmarshal([]byte(strings.Join(block, "\n")), out); err != nil {
		t.Fatalf("the block %s documents is not YAML: %v\n%s", file, err, strings.Join(block, "\n"))
	}
}

// rolloutUnderTest is the Rollout "llm-canary" of a case's namespace.
type rolloutUnderTest struct {
	re   *rolloutEnv
	ns   string
	spec corev1.PodSpec
	obj  map[string]any
}

const rolloutName = "llm-canary"

// deployStable applies the AnalysisTemplate and a Rollout of one replica
// whose pod claims a GPU from the template "gpu", and waits until its first
// revision is stable (a first revision skips the steps and the analysis).
func (re *rolloutEnv) deployStable(t *testing.T, ns string) *rolloutUnderTest {
	t.Helper()
	ctx := context.Background()
	tmpl, err := cluster.ReadObject(repoPath("deploy/rollouts/argo-analysistemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(tmpl, ns, "metadata", "namespace")
	if err := re.applier.Apply(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	r := &rolloutUnderTest{re: re, ns: ns, spec: workload(ns, rolloutName, "gpu").Spec}
	r.obj = map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": rolloutName, "namespace": ns},
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": rolloutName}},
			"strategy": documentedStrategy(t, ns, re.prom.URL),
		},
	}
	r.apply(t)
	// Before the namespace's pods are deleted: the Rollout and its
	// ReplicaSets go first, or they would create the pods again.
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = re.applier.Dyn.Resource(rolloutGVR).Namespace(ns).Delete(ctx, rolloutName, metav1.DeleteOptions{PropagationPolicy: &bg})
		_ = cluster.WaitFor(ctx, 60*time.Second, "the ReplicaSets of "+ns+" gone", func(ctx context.Context) (bool, error) {
			rs, err := env.cp.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(rs.Items) == 0, nil
		})
		if err := writeRecordingTo(ctx, chartRecording, nil); err != nil {
			t.Error(err)
		}
	})
	r.waitFor(t, nil, 2*time.Minute, "the first revision stable", func(ro *unstructured.Unstructured) (bool, error) {
		return statusString(ro, "phase") == "Healthy" && statusString(ro, "stableRS") != "", nil
	})
	return r
}

// apply applies the Rollout with its current pod template.
func (r *rolloutUnderTest) apply(t *testing.T) {
	t.Helper()
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&r.spec)
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(r.obj, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": rolloutName}},
		"spec":     spec,
	}, "spec", "template")
	if err := r.re.applier.Apply(context.Background(), r.obj); err != nil {
		t.Fatal(err)
	}
}

// update changes the pod template (a new revision: the canary) and returns
// the canary's pod template hash.
func (r *rolloutUnderTest) update(t *testing.T, change func(*corev1.Container, *corev1.PodSpec), ctrl *cluster.Process) string {
	t.Helper()
	stable := statusString(r.get(t), "stableRS")
	change(&r.spec.Containers[0], &r.spec)
	r.apply(t)
	var hash string
	r.waitFor(t, ctrl, time.Minute, "the canary's ReplicaSet", func(ro *unstructured.Unstructured) (bool, error) {
		hash = statusString(ro, "currentPodHash")
		return hash != "" && hash != stable, nil
	})
	return hash
}

func (r *rolloutUnderTest) get(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	return get(t, r.re.applier, rolloutGVR, r.ns, rolloutName)
}

// waitFor polls the Rollout until cond holds (an error from cond ends the
// wait), failing with its status.
func (r *rolloutUnderTest) waitFor(t *testing.T, ctrl *cluster.Process, timeout time.Duration, what string, cond func(*unstructured.Unstructured) (bool, error)) *unstructured.Unstructured {
	t.Helper()
	var ro *unstructured.Unstructured
	err := cluster.WaitFor(context.Background(), timeout, r.ns+"/"+rolloutName+" "+what, func(ctx context.Context) (bool, error) {
		if ctrl != nil {
			if err := ctrl.Exited(); err != nil {
				return false, err
			}
		}
		got, err := r.re.applier.Dyn.Resource(rolloutGVR).Namespace(r.ns).Get(ctx, rolloutName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ro = got
		return cond(got)
	})
	if err != nil {
		status := "(none)"
		if ro != nil {
			s, _, _ := unstructured.NestedMap(ro.Object, "status")
			status = string(must(yaml.Marshal(s)))
		}
		t.Fatalf("%v\nstatus:\n%s\nanalysis runs:\n%v\npods:\n%s", err, status, r.analysisRuns(t, ""), podsOf(r.ns))
	}
	return ro
}

// expectAborted waits until the controller aborts the canary and checks
// that the Rollout and its background AnalysisRun say why: the metric that
// names the gate and its owner.
func (r *rolloutUnderTest) expectAborted(t *testing.T, ctrl *cluster.Process, hash, metric string) {
	t.Helper()
	ro := r.waitFor(t, ctrl, 4*time.Minute, "aborted", func(ro *unstructured.Unstructured) (bool, error) {
		if statusString(ro, "stableRS") == hash {
			return false, fmt.Errorf("the canary %s was promoted", hash)
		}
		abort, _, _ := unstructured.NestedBool(ro.Object, "status", "abort")
		return abort, nil
	})
	msg := statusString(ro, "message")
	t.Logf("rollout: phase %s, message %q", statusString(ro, "phase"), msg)
	want := fmt.Sprintf("Metric %q assessed Failed due to failed (%s) > failureLimit (%s)", metric, plusOne(rolloutTiming["failures"]), rolloutTiming["failures"])
	if statusString(ro, "phase") != "Degraded" || !strings.Contains(msg, "RolloutAborted") || !strings.Contains(msg, want) {
		t.Errorf("the Rollout: phase %s, message %q; want Degraded, RolloutAborted and %q", statusString(ro, "phase"), msg, want)
	}
	runs := r.analysisRuns(t, hash)
	bg, ok := runs["Background"]
	if !ok {
		t.Fatalf("no background AnalysisRun for the canary %s: %v", hash, keys(runs))
	}
	t.Logf("%s", bg)
	if bg.phase != "Failed" || !strings.Contains(bg.message, want) {
		t.Errorf("background AnalysisRun %s: phase %s, message %q; want Failed and %q", bg.name, bg.phase, bg.message, want)
	}
	for _, m := range bg.metrics {
		if m.name == metric && (m.phase != "Failed" || m.failed == 0) {
			t.Errorf("metric %q: %s with %d failed measurements", m.name, m.phase, m.failed)
		}
	}
}

func plusOne(n string) string {
	var i int
	fmt.Sscan(n, &i)
	return fmt.Sprint(i + 1)
}

// gpuWork waits for the canary's pod (the one pod of the selector) to be
// Ready with its GPU and puts its container's real PID on that GPU in the
// chart agent's recording: the canary's GPU moves.
func (re *rolloutEnv) gpuWork(t *testing.T, ns, selector string) {
	t.Helper()
	ctx := context.Background()
	var pod *corev1.Pod
	err := cluster.WaitFor(ctx, 90*time.Second, "the canary's pod Ready", func(ctx context.Context) (bool, error) {
		pods, err := env.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		pod = &pods.Items[0]
		return ready(pod), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsOf(ns))
	}
	device := allocatedDevice(t, ns, claimOf(t, ns, pod.Name).Name)
	if err := writeRecordingTo(ctx, chartRecording, []GPUProcess{{Device: device, PID: containerPID(t, pod, "workload"), Bytes: 5 << 30}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("canary pod %s Ready on %s, its container's PID busy on that GPU", pod.Name, device)
}

// analysisRun is an AnalysisRun's status as the controller wrote it.
type analysisRun struct {
	name, phase, message string
	metrics              []metricResult
}

type metricResult struct {
	name, phase                            string
	count, failed, successful, consecutive int64
}

func (a analysisRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "AnalysisRun %s: %s %q", a.name, a.phase, a.message)
	for _, m := range a.metrics {
		fmt.Fprintf(&b, "\n  %-42q %-10s measured %d: %d passed (%d in a row), %d failed", m.name, m.phase, m.count, m.successful, m.consecutive, m.failed)
	}
	return b.String()
}

// analysisRuns are the namespace's AnalysisRuns of the canary hash (every
// one when hash is empty), by their rollout-type label.
func (r *rolloutUnderTest) analysisRuns(t *testing.T, hash string) map[string]analysisRun {
	t.Helper()
	opts := metav1.ListOptions{}
	if hash != "" {
		opts.LabelSelector = "rollouts-pod-template-hash=" + hash
	}
	list, err := r.re.applier.Dyn.Resource(analysisRunGVR).Namespace(r.ns).List(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]analysisRun{}
	for _, u := range list.Items {
		run := analysisRun{name: u.GetName(), phase: statusString(&u, "phase"), message: statusString(&u, "message")}
		results, _, _ := unstructured.NestedSlice(u.Object, "status", "metricResults")
		for _, x := range results {
			m, _ := x.(map[string]any)
			n := func(k string) int64 { v, _ := m[k].(int64); return v }
			name, _ := m["name"].(string)
			phase, _ := m["phase"].(string)
			run.metrics = append(run.metrics, metricResult{name: name, phase: phase, count: n("count"), failed: n("failed"), successful: n("successful"), consecutive: n("consecutiveSuccess")})
		}
		key := u.GetLabels()["rollout-type"] + " " + u.GetName()
		if hash != "" {
			key = u.GetLabels()["rollout-type"]
		}
		runs[key] = run
	}
	return runs
}

func statusString(u *unstructured.Unstructured, field string) string {
	s, _, _ := unstructured.NestedString(u.Object, "status", field)
	return s
}

func keys[V any](m map[string]V) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	sort.Strings(k)
	return k
}
