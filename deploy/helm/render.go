// Package helm renders the chart in deploy/helm/dra-exporter with the helm
// binary (built by `make helm`, found through DRA_HELM), splits what it
// renders into objects, lays them out as deploy/manifests and deploy/prometheus
// for kubectl users, and generates README.md's values table from the comments
// of values.yaml. The chart tests, `make manifests` (./deploy/helm/gen) and the
// e2e apply test share it, so what users apply is what the tests check.
package helm

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// EnvHelm names the helm binary; the Makefile exports it.
const EnvHelm = "DRA_HELM"

// Chart is the chart's directory relative to the repository root.
const Chart = "deploy/helm/dra-exporter"

// Release and Namespace are the release name and namespace of deploy/manifests
// and of the README's install commands.
const (
	Release   = "dra-exporter"
	Namespace = "dra-exporter"
)

// Object is one rendered document.
type Object struct {
	Source string         // the template, e.g. "dra-exporter/templates/exporter.yaml"
	Text   string         // the document as rendered, without helm's "# Source:" line
	Obj    map[string]any // the document decoded
}

// Kind, Name and Component read the object's metadata.
func (o Object) Kind() string { s, _ := o.Obj["kind"].(string); return s }

// APIVersion is the object's apiVersion.
func (o Object) APIVersion() string { s, _ := o.Obj["apiVersion"].(string); return s }

// Name is metadata.name.
func (o Object) Name() string { s, _ := Get(o.Obj, "metadata", "name").(string); return s }

// Component is the app.kubernetes.io/component label.
func (o Object) Component() string {
	s, _ := Get(o.Obj, "metadata", "labels", "app.kubernetes.io/component").(string)
	return s
}

// Get walks nested maps; nil when a key is missing.
func Get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// Template runs `helm template` on the chart under root with the given
// --set values and returns the rendered objects.
func Template(helmBin, root, release, namespace string, set ...string) ([]Object, error) {
	args := []string{"template", release, filepath.Join(root, Chart), "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(helmBin, args...)
	if err != nil {
		return nil, err
	}
	return Split(out)
}

// Lint runs `helm lint --strict` with the given --set values.
func Lint(helmBin, root string, set ...string) (string, error) {
	args := []string{"lint", "--strict", filepath.Join(root, Chart)}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(helmBin, args...)
	return string(out), err
}

func run(helmBin string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (\S+)\n`)

// Split cuts helm's output into documents; empty documents are dropped.
func Split(out []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var o Object
		if m := sourceLine.FindStringSubmatch(doc); m != nil {
			o.Source = m[1]
			doc = sourceLine.ReplaceAllString(doc, "")
		}
		doc = strings.Trim(doc, "\n")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		if err := yaml.Unmarshal([]byte(doc), &o.Obj); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Source, err)
		}
		o.Text = doc + "\n"
		objs = append(objs, o)
	}
	return objs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
