package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
