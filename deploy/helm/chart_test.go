package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// helmBinary returns the helm binary, or skips: the Makefile builds it and
// exports DRA_HELM, so `make test` never skips.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(EnvHelm)
	if bin == "" {
		t.Skipf("%s is not set: `make helm` builds helm and the Makefile exports it (or run `make chart-lint`)", EnvHelm)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", EnvHelm, bin, err)
	}
	return bin
}

// renders are the value sets the tests render: the defaults and the
// non-default settings a user is likely to change.
var renders = []struct {
	name string
	set  []string
}{
	{"default", nil},
	{"sharded", []string{"exporter.shards=3"}},
	{"no-hostpid-nonroot-agent", []string{"nodeAgent.hostPID=false", "nodeAgent.runAsUser=65534", "nodeAgent.dcgm.hostengineAddress=nvidia-dcgm.gpu-operator.svc:5555"}},
	{"agent-own-placement", []string{"nodeAgent.affinity=null", "nodeAgent.nodeSelector.nvidia\\.com/gpu\\.present=true", "nodeAgent.tolerations=null", "nodeAgent.priorityClassName="}},
	{"no-crds", []string{"serviceMonitor.enabled=false", "prometheusRule.enabled=false", "dashboards.enabled=false", "exporter.podDisruptionBudget.enabled=false"}},
	{"exporter-only", []string{"nodeAgent.enabled=false", "fullnameOverride=dra", "exporter.extraArgs={--pod.labels-allowlist=team}"}},
	{"web-tls-basic-auth", webTLS(webBasicAuth("serviceMonitor.basicAuth.secretName=scrape")...)},
	{"web-existing-secret", []string{"web.existingSecret=my-web-config", "web.tls=true", "web.tlsSecret=my-tls"}},
}

// webTLS and webBasicAuth add a web config serving TLS, asking for basic
// auth, to the --set values.
func webTLS(set ...string) []string {
	return append(set, "web.config.tls_server_config.cert_file=/etc/dra-exporter/tls/tls.crt",
		"web.config.tls_server_config.key_file=/etc/dra-exporter/tls/tls.key", "web.tlsSecret=dra-exporter-tls")
}

func webBasicAuth(set ...string) []string {
	return append(set, "web.config.basic_auth_users.prometheus=$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi")
}

func TestLint(t *testing.T) {
	bin := helmBinary(t)
	for _, r := range renders {
		if out, err := Lint(bin, root, r.set...); err != nil {
			t.Errorf("%s: %v\n%s", r.name, err, out)
		}
	}
}

func render(t *testing.T, set ...string) []Object {
	t.Helper()
	objs, err := Template(helmBinary(t), root, Release, Namespace, set...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func byKind(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func kinds(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Kind())
	}
	sort.Strings(out)
	return out
}

// TestEveryRender checks what must hold whatever the values.
func TestEveryRender(t *testing.T) {
	for _, r := range renders {
		t.Run(r.name, func(t *testing.T) {
			objs := render(t, r.set...)
			checkHardened(t, objs)
			checkReadOnlyRBAC(t, objs)
			if rules := byKind(objs, "PrometheusRule"); len(rules) > 0 {
				checkRuleGroups(t, rules)
			}
			if cms := byKind(objs, "ConfigMap"); len(cms) > 0 {
				checkDashboards(t, cms)
			}
			for _, sm := range byKind(objs, "ServiceMonitor") {
				for _, ep := range asList(Get(sm.Obj, "spec", "endpoints")) {
					if Get(ep, "honorLabels") != true {
						t.Errorf("ServiceMonitor %s: endpoint without honorLabels: true", sm.Name())
					}
				}
			}
		})
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func workloads(objs []Object) []Object {
	var out []Object
	for _, o := range objs {
		switch o.Kind() {
		case "Deployment", "StatefulSet", "DaemonSet":
			out = append(out, o)
		}
	}
	return out
}

// checkHardened: every container of every workload drops every capability,
// cannot escalate, has a read-only root filesystem, a RuntimeDefault seccomp
// profile, requests and a memory limit, and liveness and readiness probes on
// /healthz and /readyz; the exporter runs as non-root 65534, the agent as
// the user nodeAgent.runAsUser names (0 by default, for the root-owned socket).
func checkHardened(t *testing.T, objs []Object) {
	t.Helper()
	if len(workloads(objs)) == 0 {
		t.Fatal("no workload rendered")
	}
	for _, w := range workloads(objs) {
		pod := Get(w.Obj, "spec", "template", "spec")
		if Get(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s %s: pod seccomp is not RuntimeDefault", w.Kind(), w.Name())
		}
		containers := append(asList(Get(pod, "containers")), asList(Get(pod, "initContainers"))...)
		for _, c := range containers {
			name := fmt.Sprintf("%s %s container %v", w.Kind(), w.Name(), Get(c, "name"))
			sc := Get(c, "securityContext")
			for _, want := range []struct {
				path []string
				val  any
			}{
				{[]string{"allowPrivilegeEscalation"}, false},
				{[]string{"readOnlyRootFilesystem"}, true},
				{[]string{"privileged"}, false},
				{[]string{"seccompProfile", "type"}, "RuntimeDefault"},
			} {
				if got := Get(sc, want.path...); got != want.val {
					t.Errorf("%s: securityContext.%s = %v, want %v", name, strings.Join(want.path, "."), got, want.val)
				}
			}
			if drop := asList(Get(sc, "capabilities", "drop")); len(drop) != 1 || drop[0] != "ALL" {
				t.Errorf("%s: capabilities.drop = %v, want [ALL]", name, drop)
			}
			if add := Get(sc, "capabilities", "add"); add != nil {
				t.Errorf("%s: capabilities.add = %v", name, add)
			}
			if w.Component() == "exporter" {
				if Get(sc, "runAsNonRoot") != true || Get(sc, "runAsUser") != float64(65534) {
					t.Errorf("%s: runs as %v (runAsNonRoot %v), want non-root 65534", name, Get(sc, "runAsUser"), Get(sc, "runAsNonRoot"))
				}
			} else if uid := Get(sc, "runAsUser"); uid != float64(0) && Get(sc, "runAsNonRoot") != true {
				t.Errorf("%s: user %v without runAsNonRoot", name, uid)
			}
			for _, r := range []string{"cpu", "memory"} {
				if Get(c, "resources", "requests", r) == nil {
					t.Errorf("%s: no %s request", name, r)
				}
			}
			if Get(c, "resources", "limits", "memory") == nil {
				t.Errorf("%s: no memory limit", name)
			}
			if p := Get(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
				t.Errorf("%s: liveness probe %v, want /healthz", name, p)
			}
			if p := Get(c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
				t.Errorf("%s: readiness probe %v, want /readyz", name, p)
			}
		}
	}
}

// checkReadOnlyRBAC: the ClusterRoles grant get, list and watch only, and
// the two ClusterRoles are exactly the ones the e2e suite proves.
func checkReadOnlyRBAC(t *testing.T, objs []Object) {
	t.Helper()
	for _, o := range objs {
		if o.Kind() == "Role" || o.Kind() == "RoleBinding" {
			t.Errorf("%s %s: the chart has cluster-wide read-only roles only", o.Kind(), o.Name())
		}
		if o.Kind() != "ClusterRole" {
			continue
		}
		for _, rule := range asList(Get(o.Obj, "rules")) {
			for _, v := range asList(Get(rule, "verbs")) {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("ClusterRole %s grants %v", o.Name(), v)
				}
			}
			for _, res := range asList(Get(rule, "resources")) {
				if s, _ := res.(string); strings.Contains(s, "*") || strings.Contains(s, "secrets") {
					t.Errorf("ClusterRole %s names %v", o.Name(), res)
				}
			}
		}
	}
}

// checkRuleGroups: the PrometheusRule holds every group of every rules/*.yaml
// file, each with the same rules.
func checkRuleGroups(t *testing.T, rules []Object) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "rules", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no rules/*.yaml")
	}
	got := map[string]any{}
	for _, g := range asList(Get(rules[0].Obj, "spec", "groups")) {
		got[Get(g, "name").(string)] = g
	}
	want := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var file map[string]any
		if err := yaml.Unmarshal(data, &file); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range asList(file["groups"]) {
			want++
			name := Get(g, "name").(string)
			a, _ := json.Marshal(g)
			b, _ := json.Marshal(got[name])
			if !bytes.Equal(a, b) {
				t.Errorf("PrometheusRule group %s differs from %s", name, filepath.Base(f))
			}
		}
	}
	if len(got) != want {
		t.Errorf("PrometheusRule has %d groups, rules/ %d", len(got), want)
	}
}

// checkDashboards: the ConfigMap has the sidecar label and every dashboard,
// byte for byte.
func checkDashboards(t *testing.T, cms []Object) {
	t.Helper()
	if len(cms) != 1 {
		t.Fatalf("%d ConfigMaps, want the dashboards' one", len(cms))
	}
	cm := cms[0]
	if Get(cm.Obj, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("ConfigMap %s lacks grafana_dashboard: \"1\"", cm.Name())
	}
	files, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards/*.json")
	}
	data, _ := Get(cm.Obj, "data").(map[string]any)
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		key := "dra-exporter-" + filepath.Base(f)
		got, _ := data[key].(string)
		if strings.TrimRight(got, "\n") != strings.TrimRight(string(want), "\n") {
			t.Errorf("ConfigMap %s: %s differs from %s", cm.Name(), key, f)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("ConfigMap %s: %s is not JSON", cm.Name(), key)
		}
	}
	if len(data) != len(files) {
		t.Errorf("ConfigMap has %d dashboards, dashboards/ %d", len(data), len(files))
	}
}

func container(t *testing.T, w Object) any {
	t.Helper()
	cs := asList(Get(w.Obj, "spec", "template", "spec", "containers"))
	if len(cs) != 1 {
		t.Fatalf("%s %s: %d containers", w.Kind(), w.Name(), len(cs))
	}
	return cs[0]
}

func args(c any) []string {
	var out []string
	for _, a := range asList(Get(c, "args")) {
		out = append(out, a.(string))
	}
	return out
}

func TestDefaultRender(t *testing.T) {
	objs := render(t)
	want := []string{"ClusterRole", "ClusterRole", "ClusterRoleBinding", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment",
		"PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceAccount", "ServiceMonitor", "ServiceMonitor"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
	dep := byKind(objs, "Deployment")[0]
	if a := args(container(t, dep)); slices.ContainsFunc(a, func(s string) bool { return strings.Contains(s, "shard") }) {
		t.Errorf("one replica with sharding flags: %v", a)
	}
	// The soft memory limit follows the container's limit.
	memLimit := false
	for _, e := range asList(Get(container(t, dep), "env")) {
		if Get(e, "name") == "GOMEMLIMIT" && Get(e, "valueFrom", "resourceFieldRef", "resource") == "limits.memory" {
			memLimit = true
		}
	}
	if !memLimit {
		t.Error("the exporter's GOMEMLIMIT does not come from its limits.memory")
	}
	for _, svc := range byKind(objs, "Service") {
		job := Get(svc.Obj, "metadata", "labels", "dra-exporter/job")
		if svc.Component() == "exporter" && job != "dra-exporter" {
			t.Errorf("exporter Service job label %v: DRAExporterDown reads up{job=\"dra-exporter\"}", job)
		}
	}
	ds := byKind(objs, "DaemonSet")[0]
	pod := Get(ds.Obj, "spec", "template", "spec")
	checkAgentPlacement(t, pod)
	// The node gate's isolation check maps NVML's host PIDs to pods: only
	// in the host's PID namespace (issue 37: with it off no canary passes).
	if Get(pod, "hostPID") != true {
		t.Error("hostPID is off by default: every node gate would fail isolation_unverified")
	}
	c := container(t, ds)
	a := args(c)
	for _, w := range []string{"node", "--gpu.source=auto", "--kubelet.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"} {
		if !slices.Contains(a, w) {
			t.Errorf("agent args %v lack %s", a, w)
		}
	}
	for _, w := range a {
		if strings.HasPrefix(w, "--proc-root") {
			t.Errorf("agent arg %s: the binary's default /proc is what the process join reads, with or without hostPID", w)
		}
	}
	if env := envOf(c); env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["NVIDIA_DRIVER_CAPABILITIES"] != "compute,utility" {
		t.Errorf("agent env %v: NVML needs the driver and the GPUs from the NVIDIA container runtime", env)
	}
	if img := Get(c, "image"); !strings.HasPrefix(fmt.Sprint(img), "ghcr.io/dra-exporter/dra-exporter-node-agent:") {
		t.Errorf("agent image %v, want make image's dra-exporter-node-agent", img)
	}
	var hostPaths []any
	for _, v := range asList(Get(pod, "volumes")) {
		if p := Get(v, "hostPath", "path"); p != nil {
			hostPaths = append(hostPaths, p)
		}
	}
	if len(hostPaths) != 1 || hostPaths[0] != "/var/lib/kubelet/pod-resources" {
		t.Errorf("agent hostPaths %v, want the pod-resources directory only", hostPaths)
	}
}

func TestShardedRender(t *testing.T) {
	objs := render(t, "exporter.shards=3")
	if n := len(byKind(objs, "Deployment")); n != 0 {
		t.Errorf("%d Deployments with shards=3", n)
	}
	sts := byKind(objs, "StatefulSet")
	if len(sts) != 1 {
		t.Fatalf("%d StatefulSets", len(sts))
	}
	if r := Get(sts[0].Obj, "spec", "replicas"); r != float64(3) {
		t.Errorf("replicas %v", r)
	}
	c := container(t, sts[0])
	a := args(c)
	for _, w := range []string{"serve", "--auto-sharding", "--total-shards=3"} {
		if !slices.Contains(a, w) {
			t.Errorf("args %v lack %s", a, w)
		}
	}
	var podName any
	for _, e := range asList(Get(c, "env")) {
		if Get(e, "name") == "POD_NAME" {
			podName = Get(e, "valueFrom", "fieldRef", "fieldPath")
		}
	}
	if podName != "metadata.name" {
		t.Errorf("POD_NAME from %v, want the downward API's metadata.name", podName)
	}
	svcName := Get(sts[0].Obj, "spec", "serviceName")
	found := false
	for _, svc := range byKind(objs, "Service") {
		if svc.Name() == svcName {
			found = true
			if Get(svc.Obj, "spec", "clusterIP") != "None" {
				t.Errorf("Service %s is not headless", svc.Name())
			}
		}
	}
	if !found {
		t.Errorf("no Service %v for the StatefulSet", svcName)
	}
}

func TestHostPIDRender(t *testing.T) {
	off := Get(byKind(render(t, "nodeAgent.hostPID=false"), "DaemonSet")[0].Obj, "spec", "template", "spec")
	if Get(off, "hostPID") != nil {
		t.Error("nodeAgent.hostPID=false still shares the host's PID namespace")
	}
	objs := render(t, "nodeAgent.dcgm.hostengineAddress=nvidia-dcgm.gpu-operator.svc:5555")
	ds := byKind(objs, "DaemonSet")[0]
	pod := Get(ds.Obj, "spec", "template", "spec")
	if Get(pod, "hostPID") != true {
		t.Error("hostPID not set")
	}
	c := container(t, ds)
	a := args(c)
	if !slices.Contains(a, "--dcgm.hostengine-address=nvidia-dcgm.gpu-operator.svc:5555") {
		t.Errorf("args %v lack the host engine's address", a)
	}
	for _, m := range asList(Get(c, "volumeMounts")) {
		if Get(m, "mountPath") == "/host/proc" {
			t.Error("the host's /proc mounted: with hostPID the container's own /proc is the host's")
		}
	}
	if env := envOf(c); env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		t.Errorf("env %v: with a standalone host engine the agent still reads NVML (processes, MIG devices)", env)
	}
}

// image.registry moves both images to the registry `make push REGISTRY=`
// pushed them to, keeping each repository's last element and the tag
// (v0.1.0 below stands for the chart's appVersion).
func TestImageRegistryRender(t *testing.T) {
	// The tag defaults to the chart's appVersion; the render's own labels say it.
	var tag string
	images := func(values ...string) [2]any {
		objs := render(t, values...)
		d := byKind(objs, "Deployment")[0]
		tag = fmt.Sprint(Get(d.Obj, "metadata", "labels", "app.kubernetes.io/version"))
		return [2]any{Get(container(t, d), "image"), Get(container(t, byKind(objs, "DaemonSet")[0]), "image")}
	}
	for _, c := range []struct {
		values []string
		want   [2]any
	}{
		{nil, [2]any{"ghcr.io/dra-exporter/dra-exporter:v0.1.0", "ghcr.io/dra-exporter/dra-exporter-node-agent:v0.1.0"}},
		{[]string{"image.registry=127.0.0.1:5000/dra"}, [2]any{"127.0.0.1:5000/dra/dra-exporter:v0.1.0", "127.0.0.1:5000/dra/dra-exporter-node-agent:v0.1.0"}},
		{[]string{"image.registry=registry.example.com/", "nodeAgent.image.tag=v9", "image.repository=other/exporter"},
			[2]any{"registry.example.com/exporter:v0.1.0", "registry.example.com/dra-exporter-node-agent:v9"}},
	} {
		got := images(c.values...)
		for i := range c.want {
			c.want[i] = strings.ReplaceAll(c.want[i].(string), "v0.1.0", tag)
		}
		if tag == "" || got != c.want {
			t.Errorf("%v: images %v, want %v", c.values, got, c.want)
		}
	}
}

// An upgrade of the one-replica Deployment starts the new pod before it
// stops the old one; a StatefulSet of shards has no such field.
func TestRollingUpdateRender(t *testing.T) {
	d := byKind(render(t), "Deployment")[0]
	if s := Get(d.Obj, "spec", "strategy", "rollingUpdate"); fmt.Sprint(Get(s, "maxSurge"), Get(s, "maxUnavailable")) != "1 0" {
		t.Errorf("the Deployment's rolling update %v, want maxSurge 1 and maxUnavailable 0", s)
	}
	if s := Get(byKind(render(t, "exporter.shards=2"), "StatefulSet")[0].Obj, "spec", "strategy"); s != nil {
		t.Errorf("the StatefulSet has a Deployment's strategy: %v", s)
	}
}

// The device-plugin resources are one setting of both processes.
func TestDevicePluginResourcesRender(t *testing.T) {
	objs := render(t, "devicePluginResources=nvidia.com/gpu\\,nvidia.com/mig-1g.10gb", "nodeAgent.gpu.source=none", "nodeAgent.runtimeClassName=nvidia")
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		if a := args(container(t, byKind(objs, kind)[0])); !slices.Contains(a, "--device-plugin.resources=nvidia.com/gpu,nvidia.com/mig-1g.10gb") {
			t.Errorf("%s args %v lack the device-plugin resources", kind, a)
		}
	}
	ds := byKind(objs, "DaemonSet")[0]
	if env := envOf(container(t, ds)); env["NVIDIA_VISIBLE_DEVICES"] != "" {
		t.Errorf("--gpu.source=none asks for the GPUs: %v", env)
	}
	if rc := Get(ds.Obj, "spec", "template", "spec", "runtimeClassName"); rc != "nvidia" {
		t.Errorf("runtimeClassName %v", rc)
	}
}

func envOf(c any) map[string]string {
	out := map[string]string{}
	for _, e := range asList(Get(c, "env")) {
		if v, ok := Get(e, "value").(string); ok {
			out[fmt.Sprint(Get(e, "name"))] = v
		}
	}
	return out
}

func TestOptionalKindsOff(t *testing.T) {
	objs := render(t, "serviceMonitor.enabled=false", "prometheusRule.enabled=false", "dashboards.enabled=false",
		"nodeAgent.enabled=false", "exporter.podDisruptionBudget.enabled=false")
	want := []string{"ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

// TestWebConfigRender: the web config reaches both processes
// (--web.config.file, the Secret mounted where it points), the probes pass
// without what a kubelet cannot send (HTTPS on the metrics port with TLS
// alone; the probe listener, plain HTTP without auth, with basic auth), and
// the ServiceMonitors scrape as the web config asks (scheme, tlsConfig,
// basicAuth). The e2e test TestChartWebConfig runs what this renders.
func TestWebConfigRender(t *testing.T) {
	type want struct {
		secret       bool   // the chart renders the web config Secret
		secretName   string // the Secret the pods mount
		scheme       string // the probes' scheme ("" is HTTP)
		probePort    string // the probes' port
		probeFlag    bool   // --web.probe-address
		smScheme     string
		smInsecure   bool
		smBasicAuth  bool
		tlsMounted   bool
		wantConfigIn []string
	}
	for _, tc := range []struct {
		name string
		set  []string
		want want
	}{
		{"tls", webTLS(), want{secret: true, secretName: "dra-exporter-web-config", scheme: "HTTPS", probePort: "metrics", smScheme: "https",
			smInsecure: true, tlsMounted: true, wantConfigIn: []string{"cert_file: /etc/dra-exporter/tls/tls.crt"}}},
		{"basic-auth", webBasicAuth("serviceMonitor.basicAuth.secretName=scrape"), want{secret: true, secretName: "dra-exporter-web-config",
			probePort: "probe", probeFlag: true, smBasicAuth: true, wantConfigIn: []string{"basic_auth_users:", "prometheus: $2y$10$"}}},
		{"tls-basic-auth", webTLS(webBasicAuth("serviceMonitor.basicAuth.secretName=scrape", "serviceMonitor.tlsConfig.serverName=dra-exporter")...),
			want{secret: true, secretName: "dra-exporter-web-config", probePort: "probe", probeFlag: true, smScheme: "https", smBasicAuth: true, tlsMounted: true}},
		{"existing-secret", []string{"web.existingSecret=my-web-config", "web.tls=true", "web.basicAuth=true", "serviceMonitor.basicAuth.secretName=scrape"},
			want{secretName: "my-web-config", probePort: "probe", probeFlag: true, smScheme: "https", smInsecure: true, smBasicAuth: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.set...)
			w := tc.want
			secrets := byKind(objs, "Secret")
			if w.secret != (len(secrets) == 1) {
				t.Fatalf("%d Secrets rendered, want the web config's: %v", len(secrets), w.secret)
			}
			if w.secret {
				config, _ := Get(secrets[0].Obj, "stringData", "web-config.yml").(string)
				for _, want := range w.wantConfigIn {
					if !strings.Contains(config, want) {
						t.Errorf("web-config.yml lacks %q:\n%s", want, config)
					}
				}
			}
			for _, wl := range workloads(objs) {
				c := container(t, wl)
				a := args(c)
				if !slices.Contains(a, "--web.config.file=/etc/dra-exporter/web/web-config.yml") {
					t.Errorf("%s: args %v lack the web config", wl.Kind(), a)
				}
				probePort := float64(9879)
				if wl.Kind() == "DaemonSet" {
					probePort = 9880
				}
				if got := slices.Contains(a, fmt.Sprintf("--web.probe-address=:%v", probePort)); got != w.probeFlag {
					t.Errorf("%s: --web.probe-address=:%v in args %v: %v, want %v", wl.Kind(), probePort, a, got, w.probeFlag)
				}
				ports := map[string]any{}
				for _, p := range asList(Get(c, "ports")) {
					ports[Get(p, "name").(string)] = Get(p, "containerPort")
				}
				if _, ok := ports["probe"]; ok != w.probeFlag || (ok && ports["probe"] != probePort) {
					t.Errorf("%s: container ports %v", wl.Kind(), ports)
				}
				for _, probe := range []string{"readinessProbe", "livenessProbe"} {
					get := Get(c, probe, "httpGet")
					scheme, _ := Get(get, "scheme").(string)
					if Get(get, "port") != w.probePort || scheme != w.scheme {
						t.Errorf("%s %s: %v, want port %s scheme %q", wl.Kind(), probe, get, w.probePort, w.scheme)
					}
				}
				mounts := map[any]any{}
				for _, m := range asList(Get(c, "volumeMounts")) {
					mounts[Get(m, "name")] = Get(m, "mountPath")
				}
				volumes := map[any]any{}
				for _, v := range asList(Get(wl.Obj, "spec", "template", "spec", "volumes")) {
					volumes[Get(v, "name")] = Get(v, "secret", "secretName")
				}
				if mounts["web-config"] != "/etc/dra-exporter/web" || volumes["web-config"] != w.secretName {
					t.Errorf("%s: web config mounted %v from %v, want /etc/dra-exporter/web from %s", wl.Kind(), mounts["web-config"], volumes["web-config"], w.secretName)
				}
				if _, ok := mounts["web-tls"]; ok != w.tlsMounted {
					t.Errorf("%s: TLS Secret mounted %v, want %v", wl.Kind(), ok, w.tlsMounted)
				}
			}
			for _, sm := range byKind(objs, "ServiceMonitor") {
				ep := asList(Get(sm.Obj, "spec", "endpoints"))[0]
				scheme, _ := Get(ep, "scheme").(string)
				insecure, _ := Get(ep, "tlsConfig", "insecureSkipVerify").(bool)
				basic := Get(ep, "basicAuth", "username", "name") == "scrape" && Get(ep, "basicAuth", "password", "name") == "scrape" &&
					Get(ep, "basicAuth", "username", "key") == "username" && Get(ep, "basicAuth", "password", "key") == "password"
				if scheme != w.smScheme || insecure != w.smInsecure || basic != w.smBasicAuth {
					t.Errorf("ServiceMonitor %s endpoint %v: scheme %q insecure %v basicAuth %v, want %q %v %v", sm.Name(), ep, scheme, insecure, basic, w.smScheme, w.smInsecure, w.smBasicAuth)
				}
			}
		})
	}

	// Basic auth without the scrape's credentials: the ServiceMonitors could
	// not scrape, so the rendering fails and says what to set.
	_, err := Template(helmBinary(t), root, Release, Namespace, webBasicAuth()...)
	if err == nil || !strings.Contains(err.Error(), "serviceMonitor.basicAuth.secretName") {
		t.Errorf("basic auth without serviceMonitor.basicAuth.secretName renders (err %v)", err)
	}
	if _, err := Template(helmBinary(t), root, Release, Namespace, webBasicAuth("serviceMonitor.enabled=false")...); err != nil {
		t.Errorf("basic auth without ServiceMonitors: %v", err)
	}
}

// TestManifestsCurrent fails when deploy/manifests or deploy/prometheus is
// not the chart rendered with default values: run `make manifests`.
func TestManifestsCurrent(t *testing.T) {
	files, err := Manifests(render(t))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale (run `make manifests`)", path)
		}
	}
	for _, dir := range []string{"deploy/manifests", "deploy/prometheus"} {
		onDisk, _ := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		for _, f := range onDisk {
			rel, _ := filepath.Rel(root, f)
			if _, ok := files[filepath.ToSlash(rel)]; !ok && !slices.Contains(handKept, filepath.Base(f)) {
				t.Errorf("%s is neither rendered from the chart nor hand-kept (run `make manifests`)", rel)
			}
		}
	}
	for _, p := range []string{"deploy/manifests/clusterrole.yaml", "deploy/manifests/node-agent-clusterrole.yaml"} {
		if _, ok := files[p]; !ok {
			t.Errorf("%s is not rendered: the e2e suite reads it", p)
		}
	}
}

// TestValuesTable fails when docs/install.md's values table is not the one
// values.yaml's comments make: run `make manifests`.
func TestValuesTable(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(root, Chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := Values(values)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) < 40 {
		t.Fatalf("only %d documented values", len(vals))
	}
	page, err := os.ReadFile(filepath.Join(root, ValuesDoc))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceTable(string(page), Table(vals))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(page) {
		t.Errorf("%s's values table is stale (run `make manifests`)", ValuesDoc)
	}
}

func TestValuesNeedDocs(t *testing.T) {
	if _, err := Values([]byte("a:\n  # -- documented\n  b: 1\n  c: 2\n")); err == nil || !strings.Contains(err.Error(), "a.c") {
		t.Errorf("an undocumented value: err %v", err)
	}
	vals, err := Values([]byte("# -- one\n# two | three\nx: {k: v}\n"))
	if err != nil || len(vals) != 1 || vals[0].Doc != "one two | three" || vals[0].Default != `{"k":"v"}` {
		t.Errorf("Values = %+v, %v", vals, err)
	}
}

// checkAgentPlacement: the node agent's pod lands on the GPU nodes of a
// cluster with or without GPU Feature Discovery, on GKE, AKS and EKS,
// tolerates their GPU taints, and is node-critical. The node labels and
// taints are those the GPU Operator and the clouds set.
func checkAgentPlacement(t *testing.T, pod any) {
	t.Helper()
	if Get(pod, "priorityClassName") != "system-node-critical" {
		t.Errorf("agent priorityClassName %v, want system-node-critical (as the GPU Operator's daemonsets)", Get(pod, "priorityClassName"))
	}
	if sel := Get(pod, "nodeSelector"); sel != nil {
		t.Errorf("agent nodeSelector %v: a default selector needs its label on every GPU node", sel)
	}
	terms := asList(Get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"))
	for name, c := range map[string]struct {
		labels map[string]string
		want   bool
	}{
		"GPU Feature Discovery":  {map[string]string{"nvidia.com/gpu.present": "true"}, true},
		"Node Feature Discovery": {map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}, true},
		"GKE":                    {map[string]string{"cloud.google.com/gke-accelerator": "nvidia-l4"}, true},
		"EKS":                    {map[string]string{"k8s.amazonaws.com/accelerator": "nvidia-tesla-a100"}, true},
		"AKS":                    {map[string]string{"accelerator": "nvidia"}, true},
		"a CPU node":             {map[string]string{"kubernetes.io/os": "linux", "feature.node.kubernetes.io/pci-8086.present": "true"}, false},
		"GFD says no GPU":        {map[string]string{"nvidia.com/gpu.present": "false"}, false},
		// The GPU Operator's upgrade controller restarting the driver: the
		// agent leaves (it holds the device files), and returns after.
		"driver restarting":     {map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu-driver-upgrade-state": "pod-restart-required"}, false},
		"GKE driver restarting": {map[string]string{"cloud.google.com/gke-accelerator": "nvidia-l4", "nvidia.com/gpu-driver-upgrade-state": "pod-restart-required"}, false},
		"pods being evicted":    {map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu-driver-upgrade-state": "pod-deletion-required"}, true},
		"driver validated":      {map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu-driver-upgrade-state": "validation-required"}, true},
		"upgrade done":          {map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}, true},
	} {
		if got := nodeMatches(terms, c.labels); got != c.want {
			t.Errorf("%s node %v: agent scheduled %v, want %v", name, c.labels, got, c.want)
		}
	}
	tolerations := asList(Get(pod, "tolerations"))
	for _, taint := range []struct{ key, value, effect string }{
		{"nvidia.com/gpu", "present", "NoSchedule"}, // GKE
		{"nvidia.com/gpu", "true", "NoSchedule"},    // EKS, the GPU Operator's docs
		{"nvidia.com/gpu", "", "NoExecute"},
		{"sku", "gpu", "NoSchedule"}, // AKS
	} {
		if !tolerated(tolerations, taint.key, taint.value, taint.effect) {
			t.Errorf("the agent does not tolerate %s=%s:%s", taint.key, taint.value, taint.effect)
		}
	}
	if tolerated(tolerations, "node.kubernetes.io/unschedulable", "", "NoSchedule") {
		t.Error("the agent tolerates every taint; it should tolerate the GPU taints")
	}
}

// nodeMatches evaluates required node affinity terms against a node's
// labels with the scheduler's own matcher (component-helpers' nodeaffinity).
func nodeMatches(terms []any, labels map[string]string) bool {
	raw, err := json.Marshal(map[string]any{"nodeSelectorTerms": terms})
	if err != nil {
		panic(err)
	}
	var sel corev1.NodeSelector
	if err := json.Unmarshal(raw, &sel); err != nil {
		panic(err)
	}
	m, err := nodeaffinity.NewNodeSelector(&sel)
	if err != nil {
		panic(fmt.Sprintf("the chart's node affinity does not parse: %v", err))
	}
	return m.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}})
}

// tolerated: some toleration matches the taint, as the scheduler matches.
func tolerated(tolerations []any, key, value, effect string) bool {
	for _, t := range tolerations {
		if e := Get(t, "effect"); e != nil && e != "" && e != effect {
			continue
		}
		k := Get(t, "key")
		switch Get(t, "operator") {
		case "Exists":
			if k == nil || k == "" || k == key {
				return true
			}
		default: // Equal
			if k == key && fmt.Sprint(Get(t, "value")) == value {
				return true
			}
		}
	}
	return false
}

// TestPackage packages the chart as a release does (helm package follows
// the files/ and LICENSE symlinks) and checks that .helmignore keeps it to
// what a chart needs: the rule files and dashboards, not the Go code, rule
// tests and generators beside them in rules/ and dashboards/.
func TestPackage(t *testing.T) {
	bin := helmBinary(t)
	dir := t.TempDir()
	if _, err := run(bin, "package", filepath.Join(root, Chart), "--version", "1.2.3-test", "--app-version", "v1.2.3-test", "--destination", dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "dra-exporter-1.2.3-test.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, "dra-exporter/")] = string(data)
	}
	for name := range files {
		dir, base := filepath.Split(name)
		ok := name == "Chart.yaml" || name == "values.yaml" || name == "LICENSE" || name == ".helmignore" ||
			(dir == "templates/" && (strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".tpl") || base == "NOTES.txt")) ||
			(dir == "files/rules/" && strings.HasSuffix(base, ".yaml")) ||
			(dir == "files/dashboards/" && strings.HasSuffix(base, ".json"))
		if !ok {
			t.Errorf("the package holds %s: not a file the chart needs (.helmignore)", name)
		}
	}
	// Every rule file and dashboard the chart wraps is in it.
	for _, pattern := range []string{"rules/*.yaml", "dashboards/*.json"} {
		matches, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, m := range matches {
			name := "files/" + filepath.Base(filepath.Dir(m)) + "/" + filepath.Base(m)
			if _, ok := files[name]; !ok {
				t.Errorf("the package lacks %s", name)
			}
		}
	}
	if !strings.Contains(files["Chart.yaml"], "version: 1.2.3-test") || !strings.HasPrefix(strings.TrimSpace(files["LICENSE"]), "Apache License") {
		t.Errorf("Chart.yaml not stamped or LICENSE missing:\n%s", files["Chart.yaml"])
	}
}
