package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The prometheus-operator whose CRDs (ServiceMonitor, PrometheusRule) the
// tests install, from the Go module cache, not copied into the repository
// (the Makefile's PROM_OPERATOR_MODULE downloads the same).
const (
	PromOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.90.1"
	PromOperatorCRDs   = "example/prometheus-operator-crd"
)

// Applier applies unstructured objects by server-side apply with strict
// field validation, as `kubectl apply --server-side` does: an unknown or
// mistyped field fails.
type Applier struct {
	Dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewApplier is an Applier with the credentials of cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{Dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// Resource is the dynamic client of the object's kind (in its namespace
// where the kind is namespaced).
func (a *Applier) Resource(obj map[string]any) (dynamic.ResourceInterface, error) {
	u := &unstructured.Unstructured{Object: obj}
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.Dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return a.Dyn.Resource(m.Resource), nil
}

// Apply applies obj.
func (a *Applier) Apply(ctx context.Context, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	r, err := a.Resource(obj)
	if err != nil {
		return err
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = r.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: "dra-e2e", Force: ptr.To(true), FieldValidation: "Strict",
	})
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// InstallCRDs applies the CRDs of each file (one or more YAML documents)
// and waits until every one is established.
func (a *Applier) InstallCRDs(ctx context.Context, files ...string) error {
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var crds []map[string]any
	for _, f := range files {
		objs, err := ReadObjects(f)
		if err != nil {
			return err
		}
		crds = append(crds, objs...)
	}
	for _, crd := range crds {
		if err := a.Apply(ctx, crd); err != nil {
			return err
		}
		name, _, _ := unstructured.NestedString(crd, "metadata", "name")
		err := WaitFor(ctx, 30*time.Second, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
			got, err := a.Dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	a.mapper.Reset()
	return nil
}

// PromOperatorCRDFiles downloads the prometheus-operator module (go mod
// download: the module cache, not the repository) and returns the paths of
// the named CRD files in it.
func PromOperatorCRDFiles(ctx context.Context, names ...string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", PromOperatorModule).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w (without network, as inside the real node's namespace, `make rollouts` downloads it first)", PromOperatorModule, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: %s %v", PromOperatorModule, mod.Error, err)
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = filepath.Join(mod.Dir, PromOperatorCRDs, n)
	}
	return paths, nil
}

// ReadObjects reads the YAML documents of a file (separated by "---"
// lines), empty ones left out.
func ReadObjects(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	for i, doc := range strings.Split("\n"+string(data), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		if len(obj) > 0 {
			objs = append(objs, obj)
		}
	}
	return objs, nil
}

// ReadObject reads one YAML object.
func ReadObject(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return obj, nil
}
