// Command release builds a release of dra-exporter into one folder,
// reproducibly and without a container engine (`make release
// VERSION=vX.Y.Z`; its own module keeps go-containerregistry out of the
// exporter's go.mod):
//
//   - dra-exporter_<v>_<os>_<arch>.tar.gz for linux and darwin, amd64 and
//     arm64: the static binary (the cluster exporter, the node agent's
//     commands and, installed as kubectl-dra_exporter, the kubectl plugin),
//     LICENSE and README.md;
//   - dra-exporter_<v>_oci-layout.tar and
//     dra-exporter-node-agent_<v>_oci-layout.tar: each an OCI layout
//     holding one image index of linux/amd64 and linux/arm64, built by
//     tools/image (the agent's cgo binary cross-compiled for arm64 with
//     Debian's cross gcc, on Debian's libc6 and libgcc-s1 of that
//     architecture), and images.txt naming each index by digest;
//   - dra-exporter-<v without v>.tgz: the chart, helm-packaged, version
//     stamped;
//   - dra-exporter.yaml: the krew manifest, filled with the archives'
//     sha256;
//   - dra-exporter_<v>_checksums.txt: sha256sum's format, of every file.
//
// Reproducible: every time in every archive and image is the commit's
// (SOURCE_DATE_EPOCH, or the commit time), entries are sorted and owned
// by 0:0, and the binaries are built with -trimpath, -buildvcs=false and
// an empty build ID; two runs give the same checksums
// (TestReleaseReproducible).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		o, a, ok := strings.Cut(f, "/")
		if !ok || o == "" || a == "" {
			return nil, fmt.Errorf("platform %q: want os/arch", f)
		}
		out = append(out, platform{o, a})
	}
	return out, nil
}

type release struct {
	root, out, work, cache, helm, registry, debianSources string
	version, revision, branch                             string
	plugin                                                string
	mtime                                                 time.Time
	platforms, imagePlatforms                             []platform
	agentDebs                                             []string
	chart                                                 bool
	logf                                                  func(string, ...any)
}

var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func main() {
	r := &release{logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, ">> "+f+"\n", a...) }}
	flag.StringVar(&r.version, "version", "", "The release's version, a tag vMAJOR.MINOR.PATCH[-PRE] (required).")
	flag.StringVar(&r.root, "root", "../..", "The repository's root.")
	flag.StringVar(&r.out, "out", "", "Output folder (default: <root>/bin/release/<version>); emptied first.")
	flag.StringVar(&r.cache, "cache", "", "Cache of downloaded Debian packages and apt lists (default: <root>/.cache).")
	flag.StringVar(&r.helm, "helm", os.Getenv("DRA_HELM"), "helm, to package the chart (default: $DRA_HELM).")
	flag.StringVar(&r.registry, "registry", "ghcr.io/dra-exporter", "Registry and namespace of the images (the chart's image.repository default).")
	flag.StringVar(&r.branch, "branch", "main", "Branch label of the version.")
	flag.StringVar(&r.plugin, "plugin", "dra-exporter", "The krew plugin: deploy/krew/<plugin>.yaml is its krew-release-bot template.")
	flag.StringVar(&r.debianSources, "debian-sources", "", "An apt sources file (deb822) for the agent's packages and the cross compiler (e.g. a snapshot.debian.org mirror); empty: Debian 12's (deb.debian.org, bookworm, signed by debian-archive-keyring).")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "Platforms of the archives.")
	imagePlatforms := flag.String("image-platforms", "linux/amd64,linux/arm64", "Platforms of the images; empty builds no image.")
	agentDebs := flag.String("agent-debs", "libc6,libgcc-s1", "Debian packages under the node agent (name or name=version), comma-separated.")
	flag.BoolVar(&r.chart, "chart", true, "Package the chart.")
	push := flag.Bool("push", false, "Push the release built in -out (make push): the images to <registry>/<image>:<version>, the chart to oci://<registry>/charts.")
	insecure := flag.Bool("insecure", false, "With -push: the registry speaks plain HTTP.")
	flag.Parse()
	if err := r.init(*platforms, *imagePlatforms, *agentDebs); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	run := r.run
	if *push {
		run = func() error { return r.push(*insecure) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func (r *release) init(platforms, imagePlatforms, agentDebs string) error {
	if !semver.MatchString(r.version) {
		return fmt.Errorf("-version %q: want a tag vMAJOR.MINOR.PATCH[-PRE] (make release VERSION=v0.1.0)", r.version)
	}
	root, err := filepath.Abs(r.root)
	if err != nil {
		return err
	}
	r.root = root
	if r.out == "" {
		r.out = filepath.Join(root, "bin", "release", r.version)
	}
	if r.cache == "" {
		r.cache = filepath.Join(root, ".cache")
	}
	if r.out, err = filepath.Abs(r.out); err != nil {
		return err
	}
	if r.cache, err = filepath.Abs(r.cache); err != nil {
		return err
	}
	if r.platforms, err = parsePlatforms(platforms); err != nil {
		return err
	}
	if r.imagePlatforms, err = parsePlatforms(imagePlatforms); err != nil {
		return err
	}
	for _, p := range r.imagePlatforms {
		if p.os != "linux" {
			return fmt.Errorf("image platform %s: images are linux only", p)
		}
	}
	for _, d := range strings.Split(agentDebs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			r.agentDebs = append(r.agentDebs, d)
		}
	}
	if r.revision, err = git(root, "rev-parse", "HEAD"); err != nil {
		return err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(root, "log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	r.mtime = time.Unix(sec, 0).UTC()
	if st, _ := git(root, "status", "--porcelain", "--untracked-files=no"); st != "" {
		r.logf("warning: the work tree has uncommitted changes; this release is not the commit %s", r.revision)
	}
	return nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (r *release) run() error {
	if err := os.RemoveAll(r.out); err != nil {
		return err
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "dra-exporter-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	r.work = work

	var files []string
	sums := map[string]string{}
	binaries := map[string]string{}
	for _, p := range r.platforms {
		bin := filepath.Join(work, p.os+"_"+p.arch, "dra-exporter")
		if err := r.goBuild(p.os, p.arch, false, "", nil, bin); err != nil {
			return err
		}
		binaries[p.String()] = bin
		file := fmt.Sprintf("dra-exporter_%s_%s_%s.tar.gz", r.version, p.os, p.arch)
		var entries []entry
		for _, f := range []struct {
			name, path string
			mode       int64
		}{
			{"dra-exporter", bin, 0o755},
			{"LICENSE", filepath.Join(r.root, "LICENSE"), 0o644},
			{"README.md", filepath.Join(r.root, "README.md"), 0o644},
		} {
			e, err := fileEntry(f.name, f.path, f.mode)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
		if err := writeTarGz(filepath.Join(r.out, file), entries, r.mtime); err != nil {
			return err
		}
		if sums[file], err = sha256File(filepath.Join(r.out, file)); err != nil {
			return err
		}
		files = append(files, file)
	}

	if len(r.imagePlatforms) > 0 {
		var refs []string
		imgs, err := r.buildImages(binaries, &refs)
		if err != nil {
			return err
		}
		files = append(files, imgs...)
		if err := os.WriteFile(filepath.Join(r.out, "images.txt"), []byte(strings.Join(refs, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		files = append(files, "images.txt")
	}

	if r.chart {
		file, err := r.packageChart()
		if err != nil {
			return err
		}
		files = append(files, file)
	}

	if len(r.platforms) == 4 {
		tmpl, err := os.ReadFile(filepath.Join(r.root, "deploy", "krew", r.plugin+".yaml"))
		if err != nil {
			return err
		}
		manifest, err := renderKrew(string(tmpl), r.version, sums)
		if err != nil {
			return err
		}
		file := r.plugin + ".yaml"
		if err := os.WriteFile(filepath.Join(r.out, file), []byte(manifest), 0o644); err != nil {
			return err
		}
		files = append(files, file)
	} else {
		r.logf("not every platform built: no krew manifest")
	}

	sort.Strings(files)
	name := fmt.Sprintf("dra-exporter_%s_checksums.txt", r.version)
	if err := writeChecksums(r.out, name, files); err != nil {
		return err
	}
	r.logf("release %s (%s, %s) in %s: %s", r.version, r.revision, r.mtime.Format(time.RFC3339), r.out, strings.Join(append(files, name), " "))
	return nil
}
