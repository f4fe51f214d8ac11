package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// packageChart packages the chart with helm (its .helmignore decides what
// goes in; its symlinks files/rules, files/dashboards and LICENSE are
// followed), the version stamped (the chart's version is the release's
// without the v; appVersion the tag, which the images' tags default to),
// then writes helm's archive again with sorted entries and fixed
// metadata: helm stamps the time of packaging.
func (r *release) packageChart() (string, error) {
	if r.helm == "" {
		return "", fmt.Errorf("-helm is required to package the chart (make helm builds it)")
	}
	chartVersion := strings.TrimPrefix(r.version, "v")
	tmp := filepath.Join(r.work, "chart")
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	cmd := exec.Command(r.helm, "package", filepath.Join(r.root, chartDir), "--version", chartVersion, "--app-version", r.version, "--destination", tmp)
	r.logf("helm package %s --version %s --app-version %s", chartDir, chartVersion, r.version)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package: %v\n%s", err, b)
	}
	file := fmt.Sprintf("%s-%s.tgz", chartName, chartVersion)
	entries, err := readTarGz(filepath.Join(tmp, file))
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := chartFileAllowed(e.name); err != nil {
			return "", fmt.Errorf("helm package put %s in the chart: %w (see %s/.helmignore)", e.name, err, chartDir)
		}
	}
	return file, writeTarGz(filepath.Join(r.out, file), entries, r.mtime)
}

const (
	chartDir  = "deploy/helm/dra-exporter"
	chartName = "dra-exporter"
)

// chartFileAllowed says whether a packaged file is one a chart needs: its
// metadata, values, templates, the rule and dashboard files it wraps, and
// its licence and README. Anything else (Go code, rule tests, generators)
// came in through the symlinks and means .helmignore misses it.
func chartFileAllowed(name string) error {
	rel, ok := strings.CutPrefix(name, chartName+"/")
	if !ok {
		return fmt.Errorf("not under %s/", chartName)
	}
	switch {
	case strings.HasSuffix(rel, "/"):
		return nil
	case rel == "Chart.yaml", rel == "values.yaml", rel == "values.schema.json", rel == "LICENSE", rel == "README.md", rel == ".helmignore":
		return nil
	case strings.HasPrefix(rel, "templates/") && (strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".tpl") || strings.HasSuffix(rel, ".txt")):
		return nil
	case strings.HasPrefix(rel, "files/rules/") && !strings.Contains(strings.TrimPrefix(rel, "files/rules/"), "/") && strings.HasSuffix(rel, ".yaml"):
		return nil
	case strings.HasPrefix(rel, "files/dashboards/") && !strings.Contains(strings.TrimPrefix(rel, "files/dashboards/"), "/") && strings.HasSuffix(rel, ".json"):
		return nil
	}
	return fmt.Errorf("not a file a chart needs")
}
