package main

// The node agents' /metrics in the bundle: each agent pod read through
// the API server's proxy (or directly), and the GPU inventory that joins
// what each agent sees with what its ResourceSlice says.

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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dra-exporter/dra-exporter/internal/bundle"
)

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
