package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestBundleMatchesLive: `dra-exporter bundle`, run under exactly the
// chart's ClusterRole, saves what the exporter watches: `snapshot --from`
// the bundle serves what the live exporter serves. The bundle records the
// server and kubelet versions and the resource.k8s.io resources, skips the
// GPU Operator's kinds this cluster does not serve, and `gates --from` it
// evaluates the api gate of a canary and the negative control beside it.
func TestBundleMatchesLive(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-bundle")
	gpuAndB200Templates(t, ns)
	createPod(t, cluster.PodWithTemplate(ns, "canary", "gpu"))
	createPod(t, cluster.NegativeControl(cluster.PodWithTemplate(ns, "control", "b200")))
	scheduled(t, ns, "canary")
	generatedClaim(t, ns, "control")
	if err := env.kubelet.SetRunning(ctx, ns, "canary", true); err != nil {
		t.Fatal(err)
	}

	takeBundle := func(ctx context.Context, path string) error {
		out, err := exec.CommandContext(ctx, env.exporter, "bundle", "-o", path, "--kubeconfig", env.kubeconfig, "--agent.selector=").CombinedOutput()
		if err != nil {
			return fmt.Errorf("bundle: %v: %s", err, out)
		}
		return nil
	}
	path := filepath.Join(t.TempDir(), "bundle.tar.gz")
	var diff string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if diff, err = compareLiveWith(ctx, path, takeBundle); err != nil {
			t.Fatal(err)
		}
		if diff == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if diff != "" {
		t.Fatalf("live /metrics and `snapshot --from` the bundle differ:\n%s", diff)
	}

	files := readBundle(t, path)
	var manifest struct {
		Items []struct {
			Path, What, Skipped, Error string
			Count                      int
		}
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	saved, skipped := map[string]int{}, map[string]string{}
	for _, it := range manifest.Items {
		if it.Error != "" {
			t.Errorf("%s failed under the chart's ClusterRole: %s", it.What, it.Error)
		}
		if it.Skipped != "" {
			skipped[it.What] = it.Skipped
		} else {
			saved[it.What] = it.Count
		}
	}
	for _, what := range []string{"nodes", "deviceclasses", "resourceslices", "resourceclaims", "pods", "events", "server and kubelet versions", "resource.k8s.io API resources"} {
		if saved[what] == 0 {
			t.Errorf("the bundle saved no %s: %v", what, manifest.Items)
		}
	}
	for _, what := range []string{"clusterpolicies.nvidia.com", "gpuclusters.nvidia.com", "nvidiadrivers.nvidia.com"} {
		if !strings.Contains(skipped[what], "not served") {
			t.Errorf("%s: skipped %q, want not served", what, skipped[what])
		}
	}
	var versions struct {
		Server   struct{ GitVersion string }
		Kubelets map[string]string
	}
	if err := json.Unmarshal(files["version.json"], &versions); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(versions.Server.GitVersion, "v1.37") || len(versions.Kubelets) == 0 {
		t.Errorf("versions %+v", versions)
	}
	if !strings.Contains(string(files["api-resources.json"]), `"resourceclaims"`) {
		t.Error("api-resources.json does not list resourceclaims")
	}

	out, err := exec.CommandContext(ctx, env.exporter, "gates", ns, "--from", path).Output()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("gates --from: %v\n%s", err, out)
	}
	for _, want := range []string{"Pod " + ns + "/canary", "  api       PASS", "  node      FAIL no_node_agent", ns + "/control", "HOLDS selector_matches_nothing", "Verdict: FAIL: gate node of " + ns + "/canary fails (no_node_agent)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("gates --from lacks %q:\n%s", want, out)
		}
	}
}

// readBundle returns the members of a bundle, read with the reader the
// offline commands use.
func readBundle(t *testing.T, path string) map[string][]byte {
	t.Helper()
	b, err := bundle.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b.Files
}

// gpuAndB200Templates creates the templates "gpu" (any GPU of the class)
// and "b200" (a product no simulated node has: a negative control's).
func gpuAndB200Templates(t *testing.T, ns string) {
	t.Helper()
	for _, tmpl := range []struct{ name, sel string }{
		{"gpu", ""},
		{"b200", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"},
	} {
		var sels []string
		if tmpl.sel != "" {
			sels = append(sels, tmpl.sel)
		}
		if _, err := env.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), cluster.ClaimTemplate(ns, tmpl.name, cluster.GPUClass, sels...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
