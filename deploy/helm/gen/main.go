// Command gen renders the chart with default values into deploy/manifests and
// deploy/prometheus (for kubectl users) and regenerates docs/install.md's values
// table from values.yaml's comments: `make manifests`. Run it from the
// repository root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dra-exporter/dra-exporter/deploy/helm"
)

func main() {
	helmBin := flag.String("helm", os.Getenv(helm.EnvHelm), "The helm binary (default $"+helm.EnvHelm+").")
	flag.Parse()
	if err := generate(*helmBin); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func generate(helmBin string) error {
	if helmBin == "" {
		return fmt.Errorf("no helm binary: pass -helm or set %s (make manifests does)", helm.EnvHelm)
	}
	objs, err := helm.Template(helmBin, ".", helm.Release, helm.Namespace)
	if err != nil {
		return err
	}
	files, err := helm.Manifests(objs)
	if err != nil {
		return err
	}
	// Remove generated files that the chart no longer renders.
	for _, dir := range []string{"deploy/manifests", "deploy/prometheus"} {
		old, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range old {
			data, err := os.ReadFile(f)
			if err == nil && strings.HasPrefix(string(data), helm.Generated) {
				if _, keep := files[filepath.ToSlash(f)]; !keep {
					if err := os.Remove(f); err != nil {
						return err
					}
				}
			}
		}
	}
	for path, data := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	values, err := os.ReadFile(filepath.Join(helm.Chart, "values.yaml"))
	if err != nil {
		return err
	}
	vals, err := helm.Values(values)
	if err != nil {
		return err
	}
	page, err := os.ReadFile(helm.ValuesDoc)
	if err != nil {
		return err
	}
	updated, err := helm.ReplaceTable(string(page), helm.Table(vals))
	if err != nil {
		return err
	}
	return os.WriteFile(helm.ValuesDoc, []byte(updated), 0o644)
}
