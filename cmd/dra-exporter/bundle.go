package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
	"github.com/dra-exporter/dra-exporter/internal/kube"
)

// gpuOperatorKinds are the GPU Operator's cluster objects the article asks
// to save before a change: ClusterPolicy (nvidia.com/v1), and for the DRA
// model GPUCluster and NVIDIADriver (nvidia.com/v1alpha1).
var gpuOperatorKinds = []string{"clusterpolicies", "gpuclusters", "nvidiadrivers"}

type bundleFlags struct {
	out           string
	kube          kubeTarget
	namespace     string // "": every namespace
	timeout       time.Duration
	agentSelector string
	agentPort     string
	agentAccess   string
	agentURLs     []string
}

func bundleCmd(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Collects, read-only (get and list), the evidence to keep before a DRA rollout: server and kubelet versions, "+
		"the resource.k8s.io API resources, nodes, the GPU Operator's ClusterPolicy, GPUCluster and NVIDIADriver where "+
		"served, GPU pods, DeviceClasses, ResourceSlices, ResourceClaims, DeviceTaintRules, the events about them, and "+
		"every node agent's /metrics with a GPU inventory. snapshot, explain and gates read it with --from.", stdout, stderr)
	var f bundleFlags
	app.Flag("output", "The bundle file to write (.tar.gz); - writes to standard output.").Short('o').Required().PlaceHolder("FILE").StringVar(&f.out)
	kubeconfig, kubeContext := registerKubeconfig(app), registerContext(app)
	app.Flag("namespace", "Save only this namespace's GPU pods, ResourceClaims and events, as kubectl's -n (default: every namespace); "+
		"the cluster-scoped objects and the node agents are saved as without it.").Short('n').PlaceHolder("NAMESPACE").StringVar(&f.namespace)
	app.Flag("timeout", "Time allowed for the whole collection.").Default("2m").DurationVar(&f.timeout)
	app.Flag("agent.selector", "Label selector of the node agent pods (every namespace) whose /metrics are saved; empty reads none.").
		Default("app.kubernetes.io/name=dra-exporter,app.kubernetes.io/component=node-agent").StringVar(&f.agentSelector)
	app.Flag("agent.port", "The agent container's port, by name or number.").Default("metrics").StringVar(&f.agentPort)
	app.Flag("agent.access", "How to reach the agents: proxy (through the API server, needs get on pods/proxy), direct (pod IP, from inside the cluster), auto (direct in a pod, else proxy).").
		Default("auto").EnumVar(&f.agentAccess, "auto", "proxy", "direct")
	app.Flag("agent.url", "A node agent's /metrics URL to save as well (repeatable): agents that are not pods.").PlaceHolder("URL").StringsVar(&f.agentURLs)
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	f.kube = kubeTarget{*kubeconfig, *kubeContext}
	if f.out == "" {
		app.Errorf("-o FILE is required, try --help")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	rc, err := kube.RESTConfig(f.kube.kubeconfig, f.kube.context)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	var buf bytes.Buffer
	w := bundle.NewWriter(&buf, time.Now(), "dra-exporter "+version.Version)
	if err := collect(ctx, rc, f, w); err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	if f.out == "-" {
		_, err = stdout.Write(buf.Bytes())
	} else {
		err = os.WriteFile(f.out, buf.Bytes(), 0o600)
	}
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	failed := 0
	for _, it := range w.Items() {
		switch {
		case it.Error != "":
			failed++
			fmt.Fprintf(stderr, "failed:  %s: %s\n", it.What, it.Error)
		case it.Skipped != "":
			fmt.Fprintf(stderr, "skipped: %s: %s\n", it.What, it.Skipped)
		default:
			fmt.Fprintf(stderr, "saved:   %s (%d) in %s\n", it.What, it.Count, it.Path)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "%d items could not be collected; the bundle says which (manifest.json)\n", failed)
	}
	return 0
}

// collect reads the cluster into w. Only a cluster that cannot be reached at
// all is an error; anything else that fails is recorded and skipped.
func collect(ctx context.Context, rc *rest.Config, f bundleFlags, w *bundle.Writer) error {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	server, err := client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	nodes, slices := saveObjects(ctx, client, f.namespace, w)
	kubelets := map[string]string{}
	for _, n := range nodes {
		kubelets[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	addJSON(w, "version.json", "server and kubelet versions", 1+len(kubelets), map[string]any{"server": server, "kubelets": kubelets})
	apiResources(client, w)
	gpuOperator(ctx, client, dyn, w)
	agents(ctx, client, f, slices, w)
	return nil
}

// saveObjects saves every watched resource (kube.Watched) as a List, the
// namespaced ones of namespace ("" every namespace): of pods those that
// use DRA or extended resources, of events those about them and about
// claims, nodes and slices. An optional resource the API server does not
// serve is recorded as skipped. It returns the nodes and slices, for the
// versions and the GPU inventory.
func saveObjects(ctx context.Context, client kubernetes.Interface, namespace string, w *bundle.Writer) (nodes []corev1.Node, slices []resourceapi.ResourceSlice) {
	gpuPods := map[string]bool{}
	for _, r := range kube.Watched {
		ns := ""
		if r.Namespaced {
			ns = namespace
		}
		items, err := r.List(ctx, client, ns, metav1.ListOptions{})
		if err != nil {
			if r.Unserved != "" {
				w.Skip(r.Name, err.Error())
			} else {
				w.Fail(r.Name, err)
			}
			continue
		}
		keep := items[:0]
		for _, o := range items {
			switch o := o.(type) {
			case *corev1.Node:
				nodes = append(nodes, *o)
			case *resourceapi.ResourceSlice:
				slices = append(slices, *o)
			case *corev1.Pod:
				if len(o.Spec.ResourceClaims) == 0 && !hasExtendedRequests(o) {
					continue
				}
				gpuPods[o.Namespace+"/"+o.Name] = true
			case *corev1.Event:
				// Pods come before events in kube.Watched.
				io := o.InvolvedObject
				if !(io.Kind == "Pod" && gpuPods[io.Namespace+"/"+io.Name]) && io.Kind != "ResourceClaim" && io.Kind != "Node" && io.Kind != "ResourceSlice" {
					continue
				}
			}
			keep = append(keep, o)
		}
		addList(w, r.Name, r.APIVersion, r.Kind, keep)
	}
	return nodes, slices
}

// addList writes items as a kubectl List, each with its apiVersion and kind
// and without managedFields.
func addList[T any](w *bundle.Writer, name, apiVersion, kind string, items []T) {
	list := map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}
	out := make([]map[string]any, 0, len(items))
	for i := range items {
		raw, err := json.Marshal(&items[i])
		if err != nil {
			w.Fail(name, err)
			return
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			w.Fail(name, err)
			return
		}
		m["apiVersion"], m["kind"] = apiVersion, kind
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		out = append(out, m)
	}
	list["items"] = out
	data, err := yaml.Marshal(list)
	if err != nil {
		w.Fail(name, err)
		return
	}
	if err := w.Add(bundle.ObjectsDir+name+".yaml", name, len(items), data); err != nil {
		w.Fail(name, err)
	}
}

func addJSON(w *bundle.Writer, name, what string, count int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = w.Add(name, what, count, data)
	}
	if err != nil {
		w.Fail(what, err)
	}
}

// apiResources saves the resource.k8s.io resources of every version the
// API server serves.
func apiResources(client kubernetes.Interface, w *bundle.Writer) {
	groups, err := client.Discovery().ServerGroups()
	if err != nil {
		w.Fail("resource.k8s.io API resources", err)
		return
	}
	var lists []*metav1.APIResourceList
	for _, g := range groups.Groups {
		if g.Name != resourceapi.GroupName {
			continue
		}
		for _, v := range g.Versions {
			l, err := client.Discovery().ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				w.Fail("API resources of "+v.GroupVersion, err)
				continue
			}
			lists = append(lists, l)
		}
	}
	if len(lists) == 0 {
		w.Skip("resource.k8s.io API resources", "the API server does not serve resource.k8s.io")
		return
	}
	addJSON(w, "api-resources.json", "resource.k8s.io API resources", len(lists), lists)
}

// gpuOperator saves the GPU Operator's objects, found through discovery:
// a cluster without the operator's CRDs is skipped, not an error.
func gpuOperator(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, w *bundle.Writer) {
	_, lists, err := client.Discovery().ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		w.Fail("GPU Operator objects", err)
		return
	}
	found := map[string]schema.GroupVersionResource{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || gv.Group != "nvidia.com" {
			continue
		}
		for _, r := range l.APIResources {
			if _, seen := found[r.Name]; !seen && !strings.Contains(r.Name, "/") {
				found[r.Name] = gv.WithResource(r.Name)
			}
		}
	}
	for _, kind := range gpuOperatorKinds {
		gvr, ok := found[kind]
		if !ok {
			w.Skip(kind+".nvidia.com", "not served (no GPU Operator CRD)")
			continue
		}
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			w.Fail(kind+".nvidia.com", err)
			continue
		}
		for i := range l.Items {
			unstructuredDropManagedFields(l.Items[i].Object)
		}
		data, err := yaml.Marshal(l.UnstructuredContent())
		if err == nil {
			err = w.Add(bundle.GPUOperatorDir+kind+".yaml", kind+".nvidia.com", len(l.Items), data)
		}
		if err != nil {
			w.Fail(kind+".nvidia.com", err)
		}
	}
}

func unstructuredDropManagedFields(obj map[string]any) {
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
}

// agentTarget is one node agent to read.
type agentTarget struct {
	name string // the agent pod, or the URL
	node string
	get  func(ctx context.Context) ([]byte, error)
}

// agents saves every node agent's /metrics (agents/<node>.prom) and the
// GPU inventory they serve joined to the slices' PCI bus IDs and driver
// versions (agents/inventory.json).
func agents(ctx context.Context, client kubernetes.Interface, f bundleFlags, slices []resourceapi.ResourceSlice, w *bundle.Writer) {
	var targets []agentTarget
	if f.agentSelector != "" {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: f.agentSelector})
		if err != nil {
			w.Fail("node agents", err)
		} else {
			direct := f.agentAccess == "direct" || (f.agentAccess == "auto" && os.Getenv("KUBERNETES_SERVICE_HOST") != "")
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning {
					continue
				}
				targets = append(targets, podAgent(client, p, f.agentPort, direct))
			}
			if len(pods.Items) == 0 {
				w.Skip("node agents", "no pod matches "+f.agentSelector)
			}
		}
	}
	for _, u := range f.agentURLs {
		targets = append(targets, agentTarget{name: u, get: func(ctx context.Context) ([]byte, error) { return httpGet(ctx, u) }})
	}
	var inventory []inventoryEntry
	seen := map[string]bool{}
	for _, t := range targets {
		data, err := t.get(ctx)
		if err != nil {
			w.Fail("node agent "+t.name, err)
			continue
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
		if err != nil {
			w.Fail("node agent "+t.name, fmt.Errorf("its /metrics do not parse: %w", err))
			continue
		}
		entries := gpuInventory(families, slices)
		node := t.node
		if node == "" && len(entries) > 0 {
			node = entries[0].Node
		}
		if node == "" {
			node = "agent-" + strconv.Itoa(len(seen))
		}
		if seen[node] {
			node += "-" + strconv.Itoa(len(seen))
		}
		seen[node] = true
		inventory = append(inventory, entries...)
		if err := w.Add(bundle.AgentsDir+node+".prom", "/metrics of node agent "+t.name, len(entries), data); err != nil {
			w.Fail("node agent "+t.name, err)
		}
	}
	if len(targets) > 0 {
		addJSON(w, bundle.AgentsDir+"inventory.json", "GPU inventory of the node agents", len(inventory), inventory)
	}
}

func podAgent(client kubernetes.Interface, p corev1.Pod, port string, direct bool) agentTarget {
	t := agentTarget{name: p.Namespace + "/" + p.Name, node: p.Spec.NodeName}
	number := port
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == port {
				number = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	if direct {
		url := fmt.Sprintf("http://%s/metrics", netJoin(p.Status.PodIP, number))
		t.get = func(ctx context.Context) ([]byte, error) { return httpGet(ctx, url) }
		return t
	}
	t.get = func(ctx context.Context) ([]byte, error) {
		// The agent answers the text format; the API server's own errors
		// come as JSON (not the client's protobuf), so that they can be
		// worded.
		res := client.CoreV1().RESTClient().Get().Namespace(p.Namespace).Resource("pods").
			Name(p.Name+":"+number).SubResource("proxy").Suffix("metrics").
			SetHeader("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain))+", application/json;q=0.5").Do(ctx)
		raw, err := res.Raw()
		if err == nil {
			return raw, nil
		}
		var code int
		res.StatusCode(&code)
		return nil, proxyError(code, raw, err)
	}
	return t
}

// proxyError words a failed read of an agent through the API server's
// pods/proxy: client-go's error says only "unknown" for a response it
// cannot decode, the API server's body says why.
func proxyError(code int, body []byte, err error) error {
	msg := strings.TrimSpace(string(body))
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Message != "" {
		msg = status.Message
	}
	if msg == "" {
		msg = err.Error()
	}
	if code == http.StatusForbidden {
		return fmt.Errorf("through the API server (pods/proxy): forbidden: %s (get on pods/proxy is needed: deploy/rbac/bundle-reader.yaml; or --agent.access=direct from inside the cluster)", msg)
	}
	return fmt.Errorf("through the API server (pods/proxy): HTTP %d: %s", code, msg)
}

func netJoin(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// inventoryEntry is one GPU or MIG instance an agent serves (dra_gpu_info),
// with what its ResourceSlice says of it.
type inventoryEntry struct {
	Node          string `json:"node"`
	GPUUUID       string `json:"gpu_uuid"`
	ParentGPUUUID string `json:"parent_gpu_uuid,omitempty"`
	Product       string `json:"product,omitempty"`
	Driver        string `json:"driver,omitempty"`
	Pool          string `json:"pool,omitempty"`
	Device        string `json:"device,omitempty"`
	PCIBusID      string `json:"pci_bus_id,omitempty"`
	DriverVersion string `json:"driver_version,omitempty"`
	MIGProfile    string `json:"mig_profile,omitempty"`
}

func gpuInventory(families map[string]*dto.MetricFamily, slices []resourceapi.ResourceSlice) []inventoryEntry {
	type ref struct{ driver, pool, device string }
	attrs := map[ref]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			attrs[ref{s.Spec.Driver, s.Spec.Pool.Name, d.Name}] = d
		}
	}
	var out []inventoryEntry
	if f := families["dra_gpu_info"]; f != nil {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, lp := range m.Label {
				l[lp.GetName()] = lp.GetValue()
			}
			e := inventoryEntry{Node: l["node"], GPUUUID: l["gpu_uuid"], ParentGPUUUID: l["parent_gpu_uuid"], Product: l["product"],
				Driver: l["driver"], Pool: l["pool"], Device: l["device"]}
			if d, ok := attrs[ref{e.Driver, e.Pool, e.Device}]; ok {
				e.PCIBusID = deviceString(d, e.Driver, "resource.kubernetes.io/pciBusID")
				e.DriverVersion = deviceString(d, e.Driver, "driverVersion")
				e.MIGProfile = deviceString(d, e.Driver, "profile")
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node+out[i].GPUUUID < out[j].Node+out[j].GPUUUID })
	return out
}

func deviceString(d resourceapi.Device, driver, name string) string {
	for _, k := range []resourceapi.QualifiedName{resourceapi.QualifiedName(name), resourceapi.QualifiedName(driver + "/" + name)} {
		if a, ok := d.Attributes[k]; ok {
			switch {
			case a.StringValue != nil:
				return *a.StringValue
			case a.VersionValue != nil:
				return *a.VersionValue
			}
		}
	}
	return ""
}
