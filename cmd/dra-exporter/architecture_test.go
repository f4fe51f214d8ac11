package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/dra-exporter/dra-exporter/"

// TestImportRules checks every package's imports of this module against the
// table in docs/architecture.md, and the two rules that keep the scrape
// path pure: no Prometheus in the index and classifier, no client-go on the
// scrape path.
func TestImportRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	allowed := importTable(t, string(doc))
	packages := moduleImports(t, "../..")
	if len(packages) < 10 {
		t.Fatalf("found only %d packages", len(packages))
	}
	for pkg, imports := range packages {
		rule, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s has no row in docs/architecture.md's import rules", pkg)
			continue
		}
		for _, imp := range imports {
			if own, ok := strings.CutPrefix(imp, modulePath); ok && !slices.Contains(rule, own) {
				t.Errorf("%s imports %s, which docs/architecture.md does not allow", pkg, own)
			}
			if (pkg == "internal/index" || pkg == "internal/allocator" || pkg == "internal/classify") && strings.HasPrefix(imp, "github.com/prometheus/") {
				t.Errorf("%s imports %s: the index, the allocator model and the classifier stay free of Prometheus", pkg, imp)
			}
			if slices.Contains(scrapePath, pkg) && talksToAPIServer(imp) {
				t.Errorf("%s imports %s: nothing on the scrape path talks to the API server", pkg, imp)
			}
		}
	}
	for pkg := range allowed {
		if _, ok := packages[pkg]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which is not a package", pkg)
		}
	}
}

// scrapePath are the packages a scrape runs through.
var scrapePath = []string{"internal/index", "internal/allocator", "internal/classify", "collector", "internal/engine", "internal/family"}

// clusterPackages are the cluster exporter's packages: collector and what
// it and the informers stand on.
var clusterPackages = []string{"collector", "internal/engine", "internal/family", "internal/selfmetrics", "internal/index", "internal/allocator", "internal/classify", "internal/offline", "internal/kube",
	"internal/objects", "internal/dra", "internal/celmatch", "internal/devattr", "internal/shard", "internal/vocab", "internal/nodegate"}

// agentDependencies are what only the node agent may depend on.
var agentDependencies = []string{"github.com/NVIDIA/go-dcgm", "github.com/NVIDIA/go-nvml", "google.golang.org/grpc", "k8s.io/kubelet",
	modulePath + "internal/node/gpu", modulePath + "internal/node/agent", modulePath + "internal/node/collector",
	modulePath + "internal/node/podresources", modulePath + "internal/node/procmap"}

// TestClusterDependencies checks the cluster exporter's packages on their
// transitive dependencies (go list -deps): no package outside the standard
// library with cgo files, none of the node agent's libraries (go-dcgm,
// go-nvml, gRPC, the kubelet's API) or packages.
func TestClusterDependencies(t *testing.T) {
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}\t{{.Standard}}\t{{len .CgoFiles}}"}
	for _, p := range clusterPackages {
		args = append(args, modulePath+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 100 {
		t.Fatalf("go list -deps listed %d packages", len(lines))
	}
	for _, line := range lines {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkg, standard, cgoFiles := f[0], f[1] == "true", f[2] != "0"
		if cgoFiles && !standard {
			t.Errorf("the cluster exporter depends on %s, which uses cgo", pkg)
		}
		for _, dep := range agentDependencies {
			if pkg == dep || strings.HasPrefix(pkg, dep+"/") {
				t.Errorf("the cluster exporter depends on %s, which only the node agent may", pkg)
			}
		}
	}
}

// transitiveRules are what a package must not reach through any chain of
// imports (go list -deps, non-test files): the node agent links the engine's
// family definitions, never the cluster index, the allocator model, the
// classifier or CEL; the engine stands below the collectors, which name it,
// not the other way; the index below the allocator model, and the model
// below the decision tree.
var transitiveRules = []struct {
	from      []string
	forbidden []string
	why       string
}{
	{
		from: []string{"internal/node/collector", "internal/node/agent", "internal/node/gpu", "internal/node/podresources", "internal/node/procmap",
			"internal/family", "internal/selfmetrics"},
		forbidden: []string{modulePath + "collector", modulePath + "internal/index", modulePath + "internal/allocator", modulePath + "internal/classify",
			modulePath + "internal/celmatch", "github.com/google/cel-go"},
		why: "the node agent links the family definitions, not the cluster index, classifier or CEL",
	},
	{
		from:      []string{"internal/engine"},
		forbidden: []string{modulePath + "collector", modulePath + "internal/classify"},
		why:       "the engine runs the collectors it is given and names none of them",
	},
	{
		from:      []string{"internal/index"},
		forbidden: []string{modulePath + "internal/allocator", modulePath + "internal/classify"},
		why:       "the index joins objects: the allocator model and the decision tree read it, not the other way",
	},
	{
		from:      []string{"internal/allocator"},
		forbidden: []string{modulePath + "internal/classify", modulePath + "collector", modulePath + "internal/engine"},
		why:       "the allocator model answers the decision tree and the capacity collectors and names neither",
	},
}

// TestTransitiveDependencies checks transitiveRules.
func TestTransitiveDependencies(t *testing.T) {
	for _, rule := range transitiveRules {
		for _, from := range rule.from {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", modulePath+from)
			cmd.Dir = "../.."
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("go list -deps %s: %v\n%s", from, err, out)
				continue
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, modulePath+from) {
				t.Fatalf("go list -deps %s did not list the package itself", from)
			}
			for _, dep := range deps {
				for _, bad := range rule.forbidden {
					if dep == bad || strings.HasPrefix(dep, bad+"/") {
						t.Errorf("%s depends on %s: %s", from, dep, rule.why)
						break
					}
				}
			}
		}
	}
}

// talksToAPIServer reports whether a client-go package makes requests
// (tools/cache's types, such as the delete tombstone, do not).
func talksToAPIServer(imp string) bool {
	for _, p := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/rest", "k8s.io/client-go/informers", "k8s.io/client-go/dynamic", "k8s.io/client-go/discovery"} {
		if imp == p || strings.HasPrefix(imp, p+"/") {
			return true
		}
	}
	return false
}

// importTable reads the "| Package | May import |" table.
func importTable(t *testing.T, doc string) map[string][]string {
	t.Helper()
	_, table, ok := strings.Cut(doc, "| Package | May import |")
	if !ok {
		t.Fatal("docs/architecture.md has no import-rules table")
	}
	cell := regexp.MustCompile("`([^`]+)`")
	out := map[string][]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cols := strings.Split(line, "|")
		if len(cols) < 3 {
			t.Fatalf("malformed row %q", line)
		}
		pkg := cell.FindStringSubmatch(cols[1])
		if pkg == nil {
			t.Fatalf("row %q names no package", line)
		}
		var may []string
		for _, m := range cell.FindAllStringSubmatch(cols[2], -1) {
			may = append(may, m[1])
		}
		out[pkg[1]] = may
	}
	return out
}

// moduleImports returns, for every package of the root module, the imports
// of its non-test files (of its test files, for a package of tests only,
// such as test/e2e). Nested modules (tools, the control plane build) and
// testdata are skipped.
func moduleImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			if hasNonTestFiles(filepath.Dir(path)) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(out[pkg], p) {
				out[pkg] = append(out[pkg], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hasNonTestFiles(dir string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return true
		}
	}
	return false
}

// maxFileLines is the most lines a non-test Go file may have: a longer one
// holds more than one job (STYLE.md: split it along the data flow).
const maxFileLines = 450

// TestFileLength holds every non-test Go file of the module to
// maxFileLines.
func TestFileLength(t *testing.T) {
	files := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "../.." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if n := strings.Count(string(data), "\n"); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it along a seam", strings.TrimPrefix(path, "../../"), n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d Go files", files)
	}
}
