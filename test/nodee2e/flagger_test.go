package nodee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// EnvFlagger names the Flagger binary (`make flagger` builds it into .cache
// and the Makefile exports it).
const EnvFlagger = "DRA_FLAGGER"

// The short analysis the test gives the documented one, as a user could:
// a check every 10s (Flagger's shortest interval), 2 iterations (3 passing
// checks), 4 failed checks before rollback (the canary's start may cost 2).
var flaggerTiming = map[string]any{"interval": "10s", "iterations": int64(2), "threshold": int64(4)}

var canaryGVR = schema.GroupVersionResource{Group: "flagger.app", Version: "v1beta1", Resource: "canaries"}

// flaggerDropsClaims holds Flagger's events when it failed to create the
// primary of a DRA canary.
var flaggerDropsClaims string

// flagger runs deploy/rollouts/flagger-metrictemplate.yaml in the real
// Flagger (v1.36.1, a process against the real control plane, its
// kubernetes provider: no mesh), with the Canary analysis the file
// documents: a canary whose pod gets a GPU and does GPU work is promoted;
// one whose pod runs but does no GPU work (its workload gate fails
// no_gpu_activity) is rolled back. The verdicts are read from the Canary's
// status as Flagger wrote it.
func (re *rolloutEnv) flagger(t *testing.T) {
	bin := os.Getenv(EnvFlagger)
	if bin == "" {
		t.Fatalf("%s is not set (make test builds Flagger and sets it)", EnvFlagger)
	}
	ctx := context.Background()
	dir, err := toolModuleDir(ctx, "tools/flagger", "github.com/fluxcd/flagger")
	if err != nil {
		t.Fatal(err)
	}
	if err := re.applier.InstallCRDs(ctx, filepath.Join(dir, "artifacts", "flagger", "crd.yaml")); err != nil {
		t.Fatal(err)
	}
	// The MetricTemplate as the file has it, its provider's address set to
	// the Prometheus that evaluates the chart's rules (the file says to).
	tmpl, err := cluster.ReadObject(repoPath("deploy/rollouts/flagger-metrictemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmplNS, _, _ := unstructured.NestedString(tmpl, "metadata", "namespace")
	if err := cluster.CreateNamespace(ctx, env.cp.Client, tmplNS); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(tmpl, re.prom.URL, "spec", "provider", "address"); err != nil {
		t.Fatal(err)
	}
	if err := re.applier.Apply(ctx, tmpl); err != nil {
		t.Fatal(err)
	}

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Its listener is on every address of the node's network namespace
	// (-port takes a port only), which nothing outside reaches.
	logPath := filepath.Join(env.root, "flagger.log")
	ctrl, err := cluster.StartProcess("flagger", bin, logPath, nil,
		"-kubeconfig", env.cp.Kubeconfig, "-mesh-provider=kubernetes", "-metrics-server="+re.prom.URL,
		"-log-level=info", "-zap-encoding=console", fmt.Sprintf("-port=%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop(10 * time.Second)
	defer func() {
		if t.Failed() {
			t.Logf("flagger log:\n%s", cluster.Tail(logPath, 60))
		}
	}()

	// Flagger v1.36.1 builds its primary Deployment from its own copy of the
	// pod template, in a client of Kubernetes 1.27's API (k8s.io/api v0.27.11): a pod's
	// resourceClaims[].resourceClaimTemplateName (1.31's flattened form) is
	// lost and the API server refuses the primary. While it does, no canary
	// with a DRA claim can run under Flagger: the cases below are skipped
	// (they run, unchanged, once a Flagger that keeps the field is pinned).
	t.Run("primary-keeps-dra-claims", func(t *testing.T) {
		ns := namespace(t, "flagger-claims")
		template(t, ns, "gpu", nil)
		re.createCanary(t, ns)
		var events string
		err := cluster.WaitFor(ctx, 90*time.Second, "Flagger initializes the canary or fails to", func(ctx context.Context) (bool, error) {
			cr, err := re.applier.Dyn.Resource(canaryGVR).Namespace(ns).Get(ctx, rolloutName, metav1.GetOptions{})
			if err == nil && statusString(cr, "phase") == "Initialized" {
				return true, nil
			}
			events = (&canaryUnderTest{re: re, ns: ns}).events(t)
			return strings.Contains(events, "createPrimaryDeployment failed"), nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, events)
		}
		if strings.Contains(events, "createPrimaryDeployment failed") {
			flaggerDropsClaims = events
			t.Logf("Flagger cannot run a DRA canary:\n%s", events)
		}
	})
	if flaggerDropsClaims != "" {
		t.Skipf("Flagger v1.36.1 drops the pod's DRA claim from its primary Deployment (docs/gates.md): the promotion and rollback cases cannot run")
	}

	t.Run("promoted", func(t *testing.T) {
		begin := time.Now()
		ns := namespace(t, "flagger-promote")
		template(t, ns, "gpu", nil)
		template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
		create(t, negativeControlPod(ns, "control", "no-such-gpu"))
		c := re.deployCanary(t, ctrl, ns)
		hash := c.update(t, ctrl)
		re.gpuWork(t, ns, "pod-template-hash="+hash)
		c.finished(t, ctrl, "Succeeded")
		t.Logf("promoted in %s", time.Since(begin).Round(time.Second))
	})

	t.Run("rolled-back", func(t *testing.T) {
		begin := time.Now()
		ns := namespace(t, "flagger-rollback")
		template(t, ns, "gpu", nil)
		template(t, ns, "no-such-gpu", nil, node.NoSuchModel)
		create(t, negativeControlPod(ns, "control", "no-such-gpu"))
		c := re.deployCanary(t, ctrl, ns)
		// The canary starts with its GPU and becomes ready, but does no GPU
		// work: its workload gate fails (no_gpu_activity).
		c.update(t, ctrl)
		c.finished(t, ctrl, "Failed")
		events := c.events(t)
		for _, want := range []string{"advancement dra-gates 0.00 < 1", "Rolling back"} {
			if !strings.Contains(events, want) {
				t.Errorf("Flagger's events lack %q:\n%s", want, events)
			}
		}
		t.Logf("rolled back in %s", time.Since(begin).Round(time.Second))
	})
}

// toolModuleDir is a module in the module cache as a tools module pins it.
func toolModuleDir(ctx context.Context, toolsModule, module string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = repoPath(toolsModule)
	// Its go line may ask for a newer toolchain than the repository's.
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=auto")
	out, err := cmd.CombinedOutput()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("go list -m %s in %s: %v: %s (its make target downloads it)", module, toolsModule, err, out)
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%s: %v (its make target downloads it)", module, err)
	}
	return dir, nil
}

// documentedAnalysis is the Canary analysis the MetricTemplate's file
// documents (the commented block from "analysis:" on), with the short
// timing a user may choose.
func documentedAnalysis(t *testing.T) map[string]any {
	t.Helper()
	var doc struct {
		Analysis map[string]any `json:"analysis"`
	}
	commentBlock(t, "deploy/rollouts/flagger-metrictemplate.yaml", "analysis:", &doc)
	for k, v := range flaggerTiming {
		doc.Analysis[k] = v
	}
	metrics, _ := doc.Analysis["metrics"].([]any)
	if len(metrics) != 1 {
		t.Fatalf("the documented analysis has %d metrics, want dra-gates", len(metrics))
	}
	metrics[0].(map[string]any)["interval"] = flaggerTiming["interval"]
	return doc.Analysis
}

// canaryUnderTest is the Deployment and Canary "llm-canary" of a namespace.
type canaryUnderTest struct {
	re *rolloutEnv
	ns string
}

// deployCanary creates a Deployment of one replica whose pod claims a GPU
// from the template "gpu" and its Canary, and waits until Flagger
// initialized it (the primary Deployment runs the pod, the target is
// scaled to zero).
func (re *rolloutEnv) deployCanary(t *testing.T, ctrl *cluster.Process, ns string) *canaryUnderTest {
	t.Helper()
	c := re.createCanary(t, ns)
	c.waitFor(t, ctrl, 2*time.Minute, "initialized", func(cr *unstructured.Unstructured) (bool, error) {
		return statusString(cr, "phase") == "Initialized", nil
	})
	return c
}

// createCanary creates the Deployment and its Canary.
func (re *rolloutEnv) createCanary(t *testing.T, ns string) *canaryUnderTest {
	t.Helper()
	ctx := context.Background()
	pod := workload(ns, rolloutName, "gpu")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: rolloutName, Namespace: ns, Labels: map[string]string{"app": rolloutName}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": rolloutName}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": rolloutName}}, Spec: pod.Spec},
		},
	}
	if _, err := env.cp.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	canary := map[string]any{
		"apiVersion": "flagger.app/v1beta1", "kind": "Canary",
		"metadata": map[string]any{"name": rolloutName, "namespace": ns},
		"spec": map[string]any{
			"provider":                "kubernetes",
			"targetRef":               map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": rolloutName},
			"progressDeadlineSeconds": int64(120),
			"service":                 map[string]any{"port": int64(8080)},
			"analysis":                documentedAnalysis(t),
		},
	}
	if err := re.applier.Apply(ctx, canary); err != nil {
		t.Fatal(err)
	}
	c := &canaryUnderTest{re: re, ns: ns}
	// Before the namespace's pods are deleted: the Canary and both
	// Deployments go first, or they would create the pods again.
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = re.applier.Dyn.Resource(canaryGVR).Namespace(ns).Delete(ctx, rolloutName, metav1.DeleteOptions{PropagationPolicy: &bg})
		for _, d := range []string{rolloutName, rolloutName + "-primary"} {
			_ = env.cp.Client.AppsV1().Deployments(ns).Delete(ctx, d, metav1.DeleteOptions{PropagationPolicy: &bg})
		}
		_ = cluster.WaitFor(ctx, 60*time.Second, "the ReplicaSets of "+ns+" gone", func(ctx context.Context) (bool, error) {
			rs, err := env.cp.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(rs.Items) == 0, nil
		})
		if err := writeRecordingTo(ctx, chartRecording, nil); err != nil {
			t.Error(err)
		}
	})
	return c
}

// update changes the target's pod template (a new revision) and returns the
// pod template hash of the canary's pods once Flagger scaled them up.
func (c *canaryUnderTest) update(t *testing.T, ctrl *cluster.Process) string {
	t.Helper()
	ctx := context.Background()
	deps := env.cp.Client.AppsV1().Deployments(c.ns)
	dep, err := deps.Get(ctx, rolloutName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Containers[0].Env = append(dep.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: "REVISION", Value: "2"})
	if _, err := deps.Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, ctrl, time.Minute, "progressing", func(cr *unstructured.Unstructured) (bool, error) {
		return statusString(cr, "phase") == "Progressing", nil
	})
	var hash string
	err = cluster.WaitFor(ctx, 90*time.Second, "the canary's pod", func(ctx context.Context) (bool, error) {
		rss, err := env.cp.Client.AppsV1().ReplicaSets(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + rolloutName})
		if err != nil {
			return false, nil
		}
		for _, rs := range rss.Items {
			if strings.HasPrefix(rs.Name, rolloutName+"-primary-") || rs.Spec.Replicas == nil || *rs.Spec.Replicas == 0 {
				continue
			}
			for _, e := range rs.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "REVISION" {
					hash = rs.Labels["pod-template-hash"]
				}
			}
		}
		return hash != "", nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsOf(c.ns))
	}
	return hash
}

// waitFor polls the Canary until cond holds (an error from cond ends the
// wait), failing with its status and events.
func (c *canaryUnderTest) waitFor(t *testing.T, ctrl *cluster.Process, timeout time.Duration, what string, cond func(*unstructured.Unstructured) (bool, error)) *unstructured.Unstructured {
	t.Helper()
	var cr *unstructured.Unstructured
	err := cluster.WaitFor(context.Background(), timeout, c.ns+"/"+rolloutName+" "+what, func(ctx context.Context) (bool, error) {
		if err := ctrl.Exited(); err != nil {
			return false, err
		}
		got, err := c.re.applier.Dyn.Resource(canaryGVR).Namespace(c.ns).Get(ctx, rolloutName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cr = got
		return cond(got)
	})
	if err != nil {
		status := "(none)"
		if cr != nil {
			s, _, _ := unstructured.NestedMap(cr.Object, "status")
			status = string(must(yaml.Marshal(s)))
		}
		t.Fatalf("%v\nstatus:\n%s\nevents:\n%s\npods:\n%s", err, status, c.events(t), podsOf(c.ns))
	}
	return cr
}

// finished waits until Flagger finished the analysis (phase Succeeded or
// Failed), checks that it ended as want, with the Promoted condition saying
// so, and logs the status and events.
func (c *canaryUnderTest) finished(t *testing.T, ctrl *cluster.Process, want string) {
	t.Helper()
	cr := c.waitFor(t, ctrl, 4*time.Minute, "analysis finished", func(cr *unstructured.Unstructured) (bool, error) {
		p := statusString(cr, "phase")
		return p == "Succeeded" || p == "Failed", nil
	})
	c.logStatus(t, cr)
	if p := statusString(cr, "phase"); p != want {
		t.Fatalf("the canary ended %s, want %s", p, want)
	}
	if reason, msg := promotedCondition(cr); reason != want {
		t.Errorf("Promoted condition: %s %q, want %s", reason, msg, want)
	}
}

func (c *canaryUnderTest) logStatus(t *testing.T, cr *unstructured.Unstructured) {
	t.Helper()
	failed, _, _ := unstructured.NestedInt64(cr.Object, "status", "failedChecks")
	iterations, _, _ := unstructured.NestedInt64(cr.Object, "status", "iterations")
	reason, msg := promotedCondition(cr)
	t.Logf("canary: phase %s, iterations %d, failed checks %d, Promoted %s %q\nevents:\n%s",
		statusString(cr, "phase"), iterations, failed, reason, msg, c.events(t))
}

// events are Flagger's events about the Canary, oldest first.
func (c *canaryUnderTest) events(t *testing.T) string {
	t.Helper()
	list, err := env.cp.Client.CoreV1().Events(c.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Canary"})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "  %s %s (x%d)\n", e.Type, e.Message, max(e.Count, 1))
	}
	return b.String()
}

// promotedCondition is the reason and message of the Canary's Promoted
// condition.
func promotedCondition(cr *unstructured.Unstructured) (string, string) {
	conds, _, _ := unstructured.NestedSlice(cr.Object, "status", "conditions")
	for _, x := range conds {
		if m, _ := x.(map[string]any); m["type"] == "Promoted" {
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return reason, msg
		}
	}
	return "", ""
}
