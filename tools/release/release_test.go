package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const root = "../.."

// EnvCache is the cache the test's releases download into (the
// Makefile's .cache: Debian's packages, apt's lists, the cross compiler).
const EnvCache = "DRA_RELEASE_CACHE"

const testVersion = "v0.1.0-repro"

// TestReleaseReproducible builds a release twice, each into its own folder
// from its own temporary build directory (the linux/amd64 archive, both
// images for linux/amd64 and linux/arm64, and the chart when helm is
// there), and compares the checksums: the same commit gives the same
// bytes. Then it reads what it built as a user's tools would.
func TestReleaseReproducible(t *testing.T) {
	if os.Getenv("DRA_E2E_SKIP") == "1" {
		t.Skip("DRA_E2E_SKIP=1: the release builds the exporter and both node agents (arm64 cross-compiled with cgo) and downloads Debian's packages; make release-test runs it")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Fatalf("no cross compiler known from %s", runtime.GOARCH)
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the release needs %s (a Debian host; the release workflow runs in debian:bookworm): %v", tool, err)
		}
	}
	cache := os.Getenv(EnvCache)
	if cache == "" {
		cache = filepath.Join(root, ".cache")
	}
	helm := os.Getenv("DRA_HELM")
	if helm == "" {
		t.Log("DRA_HELM is not set: the release is built without the chart (make release-test sets it)")
	}
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for i, dir := range dirs {
		start := time.Now()
		args := []string{"run", ".", "-version", testVersion, "-root", root, "-out", dir, "-cache", cache,
			"-platforms", "linux/amd64", "-image-platforms", "linux/amd64,linux/arm64", "-helm", helm, "-chart=" + boolString(helm != "")}
		cmd := exec.Command("go", args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		t.Logf("release %d: %s\n%s", i+1, time.Since(start).Round(time.Second), out.String())
	}
	sumsName := "dra-exporter_" + testVersion + "_checksums.txt"
	a, err := os.ReadFile(filepath.Join(dirs[0], sumsName))
	must(t, err)
	b, err := os.ReadFile(filepath.Join(dirs[1], sumsName))
	must(t, err)
	if !bytes.Equal(a, b) {
		t.Errorf("two runs, two releases:\n%s\n%s", a, b)
	}
	want := []string{"dra-exporter-node-agent_" + testVersion + "_oci-layout.tar", "dra-exporter_" + testVersion + "_linux_amd64.tar.gz",
		"dra-exporter_" + testVersion + "_oci-layout.tar", "images.txt"}
	if helm != "" {
		want = append(want, "dra-exporter-0.1.0-repro.tgz")
	}
	slices.Sort(want)
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(a)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Errorf("checksums line %q: not sha256sum's format", line)
			continue
		}
		got, err := sha256File(filepath.Join(dirs[0], file))
		must(t, err)
		if got != sum {
			t.Errorf("%s: sha256 %s, the checksums file says %s", file, got, sum)
		}
		listed = append(listed, file)
	}
	if !slices.Equal(listed, want) {
		t.Errorf("checksums list %v, want %v", listed, want)
	}
	check := exec.Command("sha256sum", "-c", sumsName)
	check.Dir = dirs[0]
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}

	dir := dirs[0]
	epoch, err := git(root, "log", "-1", "--format=%ct")
	must(t, err)
	t.Run("archive", func(t *testing.T) {
		checkArchive(t, filepath.Join(dir, "dra-exporter_"+testVersion+"_linux_amd64.tar.gz"), epoch)
	})
	t.Run("images", func(t *testing.T) { checkIndexes(t, dir) })
	if helm != "" {
		t.Run("chart", func(t *testing.T) { checkChart(t, filepath.Join(dir, "dra-exporter-0.1.0-repro.tgz")) })
		t.Run("push", func(t *testing.T) { checkPush(t, dir, helm) })
	}
}

// checkPush pushes the release (make push) to a registry on loopback
// (go-containerregistry's registry, in memory) and reads it back: each
// image index under its tag with the digest images.txt names, and the
// chart as `helm pull oci://` fetches it, byte for byte the release's.
func checkPush(t *testing.T, dir, helm string) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	args := []string{"run", ".", "-push", "-version", testVersion, "-root", root, "-out", dir, "-registry", host + "/dra", "-insecure", "-helm", helm}
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	refs, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	must(t, err)
	for _, im := range images {
		ref, err := name.ParseReference(host+"/dra/"+im.name+":"+testVersion, name.Insecure)
		must(t, err)
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		d, err := idx.Digest()
		must(t, err)
		if !strings.Contains(string(refs), "/"+im.name+":"+testVersion+"@"+d.String()+"\n") {
			t.Errorf("the registry's %s is %s, not the index images.txt names:\n%s", ref, d, refs)
		}
		m, err := idx.IndexManifest()
		must(t, err)
		for _, desc := range m.Manifests {
			if _, err := idx.Image(desc.Digest); err != nil {
				t.Errorf("%s %v: %v", ref, desc.Platform, err)
			}
		}
	}
	pulled := t.TempDir()
	b, err := exec.Command(helm, "pull", "oci://"+host+"/dra/charts/dra-exporter", "--version", "0.1.0-repro", "--plain-http", "--destination", pulled).CombinedOutput()
	if err != nil {
		t.Fatalf("helm pull: %v\n%s", err, b)
	}
	got, err := os.ReadFile(filepath.Join(pulled, "dra-exporter-0.1.0-repro.tgz"))
	must(t, err)
	want, err := os.ReadFile(filepath.Join(dir, "dra-exporter-0.1.0-repro.tgz"))
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Error("helm pull oci:// gave another chart than the release's")
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkArchive: the binary, LICENSE and README.md, owned by root, at the
// commit's time; the binary runs and knows its version.
func checkArchive(t *testing.T, path, epoch string) {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	must(t, err)
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header: time %v name %q, want none", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	var names []string
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.Unix() != mustInt(t, epoch) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %v; want 0:0 and the commit's time %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, epoch)
		}
		files[h.Name], err = io.ReadAll(tr)
		must(t, err)
	}
	if !slices.Equal(names, []string{"LICENSE", "README.md", "dra-exporter"}) {
		t.Errorf("entries %v, want LICENSE README.md dra-exporter, sorted", names)
	}
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	must(t, err)
	if !bytes.Equal(files["LICENSE"], license) || !bytes.HasPrefix(bytes.TrimSpace(license), []byte("Apache License")) {
		t.Error("LICENSE is not the repository's Apache-2.0 licence")
	}
	bin := filepath.Join(t.TempDir(), "kubectl-dra_exporter")
	must(t, os.WriteFile(bin, files["dra-exporter"], 0o755))
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "version "+testVersion) {
		t.Errorf("the archive's binary: version: %v\n%s", err, out)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	must(t, err)
	return n
}

// checkIndexes unpacks each image's layout tar and reads it as a registry
// client would: one index of linux/amd64 and linux/arm64, each image of
// its architecture with the LICENSE; the arm64 node agent is an arm64 cgo
// binary whose loader the image holds.
func checkIndexes(t *testing.T, dir string) {
	for _, im := range images {
		t.Run(im.name, func(t *testing.T) {
			layoutDir := t.TempDir()
			untar(t, filepath.Join(dir, im.name+"_"+testVersion+"_oci-layout.tar"), layoutDir)
			top, err := layout.ImageIndexFromPath(layoutDir)
			must(t, err)
			m, err := top.IndexManifest()
			must(t, err)
			if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
				t.Fatalf("layout: %+v, want one OCI image index", m.Manifests)
			}
			if ref := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != testVersion {
				t.Errorf("ref.name %q, want the tag %s", ref, testVersion)
			}
			idx, err := top.ImageIndex(m.Manifests[0].Digest)
			must(t, err)
			im2, err := idx.IndexManifest()
			must(t, err)
			var archs []string
			for _, d := range im2.Manifests {
				if d.Platform == nil || d.Platform.OS != "linux" {
					t.Fatalf("manifest %s: platform %v", d.Digest, d.Platform)
				}
				archs = append(archs, d.Platform.Architecture)
				img, err := idx.Image(d.Digest)
				must(t, err)
				cf, err := img.ConfigFile()
				must(t, err)
				if cf.Architecture != d.Platform.Architecture || cf.Config.Labels["org.opencontainers.image.version"] != testVersion {
					t.Errorf("%s: config architecture %s, version %s", d.Platform.Architecture, cf.Architecture, cf.Config.Labels["org.opencontainers.image.version"])
				}
				checkImageFiles(t, img, d.Platform.Architecture)
			}
			if !slices.Equal(archs, []string{"amd64", "arm64"}) {
				t.Errorf("platforms %v, want amd64 arm64", archs)
			}
			refs, err := os.ReadFile(filepath.Join(dir, "images.txt"))
			must(t, err)
			d, err := idx.Digest()
			must(t, err)
			if !strings.Contains(string(refs), "/"+im.name+":"+testVersion+"@"+d.String()+"\n") {
				t.Errorf("images.txt does not name %s@%s:\n%s", im.name, d, refs)
			}
		})
	}
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkImageFiles(t *testing.T, img v1.Image, arch string) {
	rootfs := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		p := filepath.Join(rootfs, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			must(t, os.MkdirAll(p, 0o755))
		case tar.TypeSymlink:
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.Symlink(h.Linkname, p))
		case tar.TypeReg:
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			data, err := io.ReadAll(tr)
			must(t, err)
			must(t, os.WriteFile(p, data, 0o644))
		}
	}
	license, _ := os.ReadFile(filepath.Join(rootfs, "licenses", "LICENSE"))
	want, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	must(t, err)
	if !bytes.Equal(license, want) {
		t.Errorf("%s: /licenses/LICENSE is not the repository's LICENSE", arch)
	}
	ef, err := elf.Open(filepath.Join(rootfs, "dra-exporter"))
	must(t, err)
	defer ef.Close()
	if ef.Machine != elfMachine[arch] {
		t.Errorf("%s: /dra-exporter is built for %v", arch, ef.Machine)
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data, _ := io.ReadAll(p.Open())
		interp := strings.TrimRight(string(data), "\x00")
		// The loader is a link into the package's library directory;
		// resolve it inside the image, not on this host.
		target := filepath.Join(rootfs, interp)
		for range 8 {
			l, err := os.Readlink(target)
			if err != nil {
				break
			}
			if filepath.IsAbs(l) {
				target = filepath.Join(rootfs, l)
			} else {
				target = filepath.Join(filepath.Dir(target), l)
			}
		}
		lf, err := elf.Open(target)
		if err != nil {
			t.Errorf("%s: the binary's loader %s is not in the image: %v", arch, interp, err)
			continue
		}
		if lf.Machine != elfMachine[arch] {
			t.Errorf("%s: the image's loader %s is built for %v", arch, interp, lf.Machine)
		}
		lf.Close()
	}
}

func untar(t *testing.T, path, dir string) {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		must(t, err)
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			must(t, os.MkdirAll(p, 0o755))
			continue
		}
		data, err := io.ReadAll(tr)
		must(t, err)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o644))
	}
}

// checkChart: helm's package, version stamped, and only what a chart
// needs: the rule files and dashboards, not the Go code and rule tests
// beside them.
func checkChart(t *testing.T, path string) {
	entries, err := readTarGz(path)
	must(t, err)
	var names []string
	var chartYAML string
	for _, e := range entries {
		names = append(names, e.name)
		if e.name == "dra-exporter/Chart.yaml" {
			chartYAML = string(e.data)
		}
		if err := chartFileAllowed(e.name); err != nil {
			t.Errorf("%s: %v", e.name, err)
		}
	}
	if !strings.Contains(chartYAML, "\nversion: 0.1.0-repro\n") || !strings.Contains(chartYAML, "\nappVersion: "+testVersion+"\n") {
		t.Errorf("Chart.yaml does not carry the release's version:\n%s", chartYAML)
	}
	for _, want := range []string{"dra-exporter/LICENSE", "dra-exporter/files/rules/gates.yaml", "dra-exporter/files/dashboards/overview.json", "dra-exporter/templates/node-agent.yaml"} {
		if !slices.Contains(names, want) {
			t.Errorf("the chart has no %s: %v", want, names)
		}
	}
}
