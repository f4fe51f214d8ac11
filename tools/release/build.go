package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// goBuild builds ./cmd/dra-exporter for one platform: -trimpath, no VCS
// stamp and an empty build ID, so that the same commit gives the same
// bytes wherever it is checked out. cc, when set, is the C compiler of a
// cgo build (a cross compiler with its sysroot) and env its environment.
func (r *release) goBuild(goos, goarch string, cgo bool, cc string, env []string, out string) error {
	ldflags := strings.Join([]string{"-s", "-w", "-buildid=",
		"-X", "github.com/prometheus/common/version.Version=" + r.version,
		"-X", "github.com/prometheus/common/version.Revision=" + r.revision,
		"-X", "github.com/prometheus/common/version.Branch=" + r.branch,
		"-X", "github.com/prometheus/common/version.BuildDate=" + r.mtime.Format("20060102-15:04:05"),
	}, " ")
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/dra-exporter")
	cmd.Dir = r.root
	cgoEnabled := "0"
	if cgo {
		cgoEnabled = "1"
	}
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED="+cgoEnabled)
	if cc != "" {
		cmd.Env = append(cmd.Env, "CC="+cc)
	}
	cmd.Env = append(cmd.Env, env...)
	r.logf("go build %s/%s (cgo %v) -> %s", goos, goarch, cgo, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s/%s: %v\n%s", goos, goarch, err, b)
	}
	return nil
}

// debianKeyring signs Debian's package lists (the debian-archive-keyring
// package: Debian's own, and in Ubuntu's universe).
const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// bookworm are Debian 12's sources (deb822): the agent's libraries and the
// cross compiler come from Debian 12 whatever the host runs, so that the
// images do not depend on it.
const bookworm = `Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: ` + debianKeyring + `

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: ` + debianKeyring + `
`

// debian is apt with a state of its own under the cache, one per
// architecture: it lists and downloads the packages of any architecture
// from Debian 12's sources without adding that architecture to the
// host (dpkg --add-architecture changes the machine; this changes nothing
// outside the cache). The lists are fetched once and kept, so that two
// runs download the same versions; delete the directory to refresh them.
type debian struct {
	dir, arch, sources string
	logf               func(string, ...any)
}

func (d debian) opts() []string {
	return []string{
		"-o", "Dir::State=" + filepath.Join(d.dir, "state"),
		"-o", "Dir::State::status=" + filepath.Join(d.dir, "status"),
		"-o", "Dir::Cache=" + filepath.Join(d.dir, "cache"),
		"-o", "Dir::Etc::SourceList=/dev/null",
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(d.dir, "sources"),
		"-o", "APT::Architecture=" + d.arch,
		"-o", "APT::Architectures::=" + d.arch,
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=1",
		"-q",
	}
}

// update fetches the package lists unless they are there.
func (d debian) update() error {
	if _, err := os.Stat(filepath.Join(d.dir, "updated")); err == nil {
		return nil
	}
	for _, p := range []string{"state/lists/partial", "cache/archives/partial", "sources"} {
		if err := os.MkdirAll(filepath.Join(d.dir, p), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(d.dir, "status"), nil, 0o644); err != nil {
		return err
	}
	src := []byte(bookworm)
	if d.sources != "" {
		var err error
		if src, err = os.ReadFile(d.sources); err != nil {
			return fmt.Errorf("the Debian sources (-debian-sources): %w", err)
		}
	} else if _, err := os.Stat(debianKeyring); err != nil {
		return fmt.Errorf("the Debian archive keyring, which signs Debian 12's package lists: %w (apt-get install debian-archive-keyring)", err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "sources", "debian.sources"), src, 0o644); err != nil {
		return err
	}
	d.logf("apt-get update (%s, state in %s)", d.arch, d.dir)
	cmd := exec.Command("apt-get", append(d.opts(), "update")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update (%s): %v\n%s", d.arch, err, b)
	}
	return os.WriteFile(filepath.Join(d.dir, "updated"), nil, 0o644)
}

// resolve pins each package to its candidate version: name=version. A
// package given as name=version stays as it is.
func (d debian) resolve(pkgs []string) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		if strings.Contains(p, "=") {
			out = append(out, p)
			continue
		}
		b, err := exec.Command("apt-cache", append(d.opts(), "policy", p)...).Output()
		if err != nil {
			return nil, fmt.Errorf("apt-cache policy %s (%s): %w", p, d.arch, err)
		}
		v := ""
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "Candidate:" {
				v = f[1]
			}
		}
		if v == "" || v == "(none)" {
			return nil, fmt.Errorf("apt knows no %s for %s", p, d.arch)
		}
		out = append(out, p+"="+v)
	}
	return out, nil
}

// download fetches name=version packages into debs (kept: a deb of a
// version is the same file forever) and returns their paths.
func (d debian) download(pkgs []string, debs string) ([]string, error) {
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range pkgs {
		name, version, _ := strings.Cut(p, "=")
		prefix := filepath.Join(debs, name+"_"+strings.ReplaceAll(version, ":", "%3a")+"_")
		// The architecture's own deb, or an arch-independent one.
		find := func() string {
			for _, a := range []string{d.arch, "all"} {
				if _, err := os.Stat(prefix + a + ".deb"); err == nil {
					return prefix + a + ".deb"
				}
			}
			return ""
		}
		pick := find()
		if pick == "" {
			d.logf("apt-get download %s (%s)", p, d.arch)
			cmd := exec.Command("apt-get", append(d.opts(), "download", p)...)
			cmd.Dir = debs
			if b, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("apt-get download %s (%s): %v\n%s", p, d.arch, err, b)
			}
			if pick = find(); pick == "" {
				return nil, fmt.Errorf("apt-get download %s (%s) wrote no %s{%s,all}.deb", p, d.arch, prefix, d.arch)
			}
		}
		paths = append(paths, pick)
	}
	return paths, nil
}

// extract unpacks debs into dir (dpkg-deb -x), dropping the changelogs.
func extract(debs []string, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, deb := range debs {
		if b, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %v\n%s", deb, err, b)
		}
	}
	changelogs, _ := filepath.Glob(filepath.Join(dir, "usr/share/doc/*/changelog*"))
	for _, c := range changelogs {
		// A package's doc directory may be a link to another's: the
		// same file twice.
		if err := os.Remove(c); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// triplets are the GNU names of the architectures the images are built
// for, and the suffix of Debian's cross packages that target them.
var triplets = map[string]struct{ gnu, pkg, cross string }{
	"amd64": {"x86_64-linux-gnu", "x86-64-linux-gnu", "amd64-cross"},
	"arm64": {"aarch64-linux-gnu", "aarch64-linux-gnu", "arm64-cross"},
}

// crossPackages are Debian's cross compiler for a target: gcc, its
// binutils and the target's glibc headers and libraries, all packages of
// the host's architecture.
func crossPackages(target string) []string {
	t := triplets[target]
	return []string{
		"gcc-12-" + t.pkg, "cpp-12-" + t.pkg, "gcc-12-" + t.pkg + "-base", "binutils-" + t.pkg,
		"libgcc-12-dev-" + t.cross, "gcc-12-cross-base", "libgcc-s1-" + t.cross,
		"libc6-" + t.cross, "libc6-dev-" + t.cross, "linux-libc-dev-" + t.cross,
	}
}

// cgoCompiler returns the C compiler of a cgo build for target, and the
// environment it needs: the host's own for the host's architecture,
// Debian's cross compiler (downloaded and unpacked under the cache, not
// installed) for another.
func (r *release) cgoCompiler(target string) (string, []string, error) {
	if target == runtime.GOARCH {
		return "", nil, nil
	}
	t, ok := triplets[target]
	host, ok2 := triplets[runtime.GOARCH]
	if !ok || !ok2 {
		return "", nil, fmt.Errorf("no cross compiler known from %s to %s", runtime.GOARCH, target)
	}
	apt := r.apt(runtime.GOARCH)
	if err := apt.update(); err != nil {
		return "", nil, err
	}
	pkgs, err := apt.resolve(crossPackages(target))
	if err != nil {
		return "", nil, err
	}
	sort.Strings(pkgs)
	debs, err := apt.download(pkgs, filepath.Join(r.cache, "debian", "debs"))
	if err != nil {
		return "", nil, err
	}
	root := filepath.Join(r.cache, "debian", "cross-"+t.gnu)
	stamp := strings.Join(pkgs, "\n")
	if b, err := os.ReadFile(root + ".packages"); err != nil || string(b) != stamp {
		r.logf("unpacking the %s cross compiler into %s", t.gnu, root)
		if err := extract(debs, root); err != nil {
			return "", nil, err
		}
		if err := os.WriteFile(root+".packages", []byte(stamp), 0o644); err != nil {
			return "", nil, err
		}
	}
	gcc := filepath.Join(root, "usr", "bin", t.gnu+"-gcc-12")
	if _, err := os.Stat(gcc); err != nil {
		return "", nil, err
	}
	// binutils' shared libraries of the cross target live in the host's
	// library directory of the unpacked tree.
	return gcc + " --sysroot=" + root, []string{"LD_LIBRARY_PATH=" + filepath.Join(root, "usr", "lib", host.gnu)}, nil
}

func (r *release) apt(arch string) debian {
	return debian{dir: filepath.Join(r.cache, "debian", "apt-"+arch), arch: arch, sources: r.debianSources, logf: r.logf}
}
