package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// dcgm-exporter 4.8.3+ run with KUBERNETES_ENABLE_DRA (the GPU Operator's
// DRA-only stack) labels each GPU series with the claim device a container
// got, as its internal/pkg/transformation package does:
//   - dra.go: a ResourceSlice informer on driver gpu.nvidia.com maps pool/device
//     to the device's "uuid" attribute (type "gpu"), or a MIG device (type
//     "mig") to its "parentUUID" with its "profile" and "uuid";
//   - kubernetes.go, toDeviceToPodsDRA: every container's dynamic resources of
//     driver gpu.nvidia.com from the kubelet's pod-resources API, once per
//     GPU UUID and container (a second device of one parent in one container
//     is skipped);
//   - kubernetes.go, Process: each series of that UUID is copied once per
//     container, with pod, namespace and container, and dra_claim_name,
//     dra_claim_namespace, dra_driver_name, dra_pool_name, dra_device_name
//     (dra_mig_profile and dra_mig_device_uuid for a MIG device); a series of
//     a UUID no container holds is left as it is.
//
// The test clusters have no kubelet on their simulated nodes, so the
// pod-resources answer is read from what the kubelet would report: the pods
// running on a node (their claims prepared; a pod whose preparation failed
// never starts), each container's claims (named in the pod's spec, or made
// from a template and named in its status), and the claims' allocations.

// draDriver is the only driver whose devices dcgm-exporter labels
// (transformation/const.go, DRAGPUDriverName).
const draDriver = "gpu.nvidia.com"

// DRAHolder is one container holding one device, as dcgm-exporter labels it.
type DRAHolder struct {
	Namespace, Pod, Container string
	ClaimNamespace, ClaimName string
	Driver, Pool, Device      string
	MIGProfile, MIGUUID       string // a MIG device only
}

type sliceDevice struct{ uuid, migProfile, migUUID string }

// DRAHolders returns the containers holding each GPU UUID, read from the
// cluster as dcgm-exporter reads the kubelet and the ResourceSlices.
func DRAHolders(ctx context.Context, c kubernetes.Interface) (map[string][]DRAHolder, error) {
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resourceslices: %w", err)
	}
	devices := map[string]sliceDevice{} // pool/device
	for _, s := range slices.Items {
		if s.Spec.Driver != draDriver {
			continue
		}
		for _, d := range s.Spec.Devices {
			attr := func(k string) string {
				if a, ok := d.Attributes[resourceapi.QualifiedName(k)]; ok && a.StringValue != nil {
					return *a.StringValue
				}
				return ""
			}
			key := s.Spec.Pool.Name + "/" + d.Name
			switch attr("type") {
			case "gpu":
				if u := attr("uuid"); u != "" {
					devices[key] = sliceDevice{uuid: u}
				}
			case "mig":
				if p := attr("parentUUID"); p != "" {
					devices[key] = sliceDevice{uuid: p, migProfile: attr("profile"), migUUID: attr("uuid")}
				}
			}
		}
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	claims, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resourceclaims: %w", err)
	}
	claimIndex := map[string]int{}
	for i, cl := range claims.Items {
		claimIndex[cl.Namespace+"/"+cl.Name] = i
	}
	holders := map[string][]DRAHolder{}
	seen := map[string]bool{} // uuid + pod/namespace/container
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		// A pod's claim by name (spec), or the one made from its template (status).
		names := map[string]string{}
		for _, rc := range p.Spec.ResourceClaims {
			names[rc.Name] = ptr.Deref(rc.ResourceClaimName, "")
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if names[s.Name] == "" {
				names[s.Name] = ptr.Deref(s.ResourceClaimName, "")
			}
		}
		for _, ctr := range p.Spec.Containers {
			for _, ref := range ctr.Resources.Claims {
				i, ok := claimIndex[p.Namespace+"/"+names[ref.Name]]
				if !ok || claims.Items[i].Status.Allocation == nil {
					continue
				}
				cl := claims.Items[i]
				for _, r := range cl.Status.Allocation.Devices.Results {
					if r.Driver != draDriver || (ref.Request != "" && r.Request != ref.Request) {
						continue
					}
					d, ok := devices[r.Pool+"/"+r.Device]
					if !ok {
						continue
					}
					k := d.uuid + " " + p.Name + "/" + p.Namespace + "/" + ctr.Name
					if seen[k] {
						continue
					}
					seen[k] = true
					holders[d.uuid] = append(holders[d.uuid], DRAHolder{
						Namespace: p.Namespace, Pod: p.Name, Container: ctr.Name,
						ClaimNamespace: cl.Namespace, ClaimName: cl.Name,
						Driver: r.Driver, Pool: r.Pool, Device: r.Device,
						MIGProfile: d.migProfile, MIGUUID: d.migUUID,
					})
				}
			}
		}
	}
	return holders, nil
}

// DCGMWithDRA rewrites a dcgm-exporter page as its DRA mode would: each
// series of a held GPU (by its UUID label) copied once per holding
// container, with the holder's labels.
func DCGMWithDRA(page []byte, holders map[string][]DRAHolder) ([]byte, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parse dcgm-exporter page: %w", err)
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	var out bytes.Buffer
	enc := expfmt.NewEncoder(&out, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, n := range names {
		f := families[n]
		var metrics []*dto.Metric
		for _, m := range f.GetMetric() {
			hs := holders[labelValue(m, "UUID")]
			if len(hs) == 0 {
				metrics = append(metrics, m)
				continue
			}
			for _, h := range hs {
				add := map[string]string{
					"pod": h.Pod, "namespace": h.Namespace, "container": h.Container,
					"dra_claim_name": h.ClaimName, "dra_claim_namespace": h.ClaimNamespace,
					"dra_driver_name": h.Driver, "dra_pool_name": h.Pool, "dra_device_name": h.Device,
				}
				if h.MIGUUID != "" || h.MIGProfile != "" {
					add["dra_mig_profile"] = h.MIGProfile
					add["dra_mig_device_uuid"] = h.MIGUUID
				}
				metrics = append(metrics, withLabels(m, add))
			}
		}
		f.Metric = metrics
		if err := enc.Encode(f); err != nil {
			return nil, fmt.Errorf("encode %s: %w", n, err)
		}
	}
	return out.Bytes(), nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// withLabels is a copy of m with the labels of add set (replacing any of
// the same name, as dcgm-exporter drops a label its attributes override).
func withLabels(m *dto.Metric, add map[string]string) *dto.Metric {
	c := &dto.Metric{Gauge: m.Gauge, Counter: m.Counter, Untyped: m.Untyped, TimestampMs: m.TimestampMs}
	for _, l := range m.GetLabel() {
		if _, ok := add[l.GetName()]; !ok {
			c.Label = append(c.Label, l)
		}
	}
	for k, v := range add {
		c.Label = append(c.Label, &dto.LabelPair{Name: ptr.To(k), Value: ptr.To(v)})
	}
	sort.Slice(c.Label, func(i, j int) bool { return c.Label[i].GetName() < c.Label[j].GetName() })
	return c
}

// ServeFunc serves page() on /metrics at 127.0.0.1 on a free port until Stop;
// an error is a 500, as a failing exporter's scrape.
func ServeFunc(page func() ([]byte, error)) (*StaticTarget, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		b, err := page()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(b)
	})
	s := &StaticTarget{Addr: ln.Addr().String(), srv: &http.Server{Handler: mux}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}
