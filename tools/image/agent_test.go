package main

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// agentImageDir returns the directory holding the agent's image: `make
// image`'s, or one the test builds from a cgo binary on the host's own
// libc6 and libgcc-s1 files (the packages make image downloads).
func agentImageDir(t *testing.T) string {
	if dir := os.Getenv(EnvImageDir); dir != "" {
		return dir
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("not a Debian host: make image-test builds the agent's image from Debian's packages")
	}
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	out, err := exec.Command("dpkg", "-L", "libc6", "libgcc-s1").Output()
	if err != nil {
		t.Fatalf("dpkg -L: %v", err)
	}
	for _, path := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		info, err := os.Lstat(path)
		if err != nil || path == "/." {
			continue
		}
		dst := filepath.Join(rootfs, path)
		// A merged-/usr host makes /lib a link to usr/lib; in the
		// package it is a directory.
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			info = st
		}
		switch {
		case info.IsDir():
			must(t, os.MkdirAll(dst, 0o755))
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(path)
			must(t, err)
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			must(t, os.Symlink(target, dst))
		case info.Mode().IsRegular():
			data, err := os.ReadFile(path)
			must(t, err)
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			must(t, os.WriteFile(dst, data, info.Mode().Perm()))
		}
	}
	bin := filepath.Join(dir, "dra-exporter")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/prometheus/common/version.Version=test", "-o", bin, "./cmd/dra-exporter")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	a := AgentOptions{Options: Options{Binary: bin, Out: dir, Ref: "ghcr.io/dra-exporter/dra-exporter-node-agent:test", Version: "test", Revision: "abc", Arch: "amd64", License: filepath.Join("..", "..", "LICENSE"), Created: time.Unix(0, 0).UTC()},
		RootFS: rootfs, Packages: []string{"libc6=host", "libgcc-s1=host"}}
	img, err := BuildAgent(a)
	must(t, err)
	must(t, WriteAs(a.Ref, img, filepath.Join(dir, "agent-oci"), filepath.Join(dir, "dra-exporter-node-agent.tar")))
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentImage reads the agent's image back (layout and tarball), checks
// its config, unpacks its root file system and runs the binary there, in a
// chroot: version, and gpu-check with no GPU library (as on a node without
// the NVIDIA runtime), which must report the source unavailable, not crash.
func TestAgentImage(t *testing.T) {
	dir := agentImageDir(t)
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "agent-oci"))
	must(t, err)
	im, err := idx.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 1 {
		t.Fatalf("layout holds %d manifests, want 1", len(im.Manifests))
	}
	fromLayout, err := idx.Image(im.Manifests[0].Digest)
	must(t, err)
	fromTar, err := tarball.ImageFromPath(filepath.Join(dir, "dra-exporter-node-agent.tar"), nil)
	must(t, err)
	a, _ := fromLayout.ConfigName()
	b, _ := fromTar.ConfigName()
	if a != b {
		t.Errorf("layout config %s, tarball config %s: not the same image", a, b)
	}
	cf, err := fromTar.ConfigFile()
	must(t, err)
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/dra-exporter"}) || !slices.Equal(c.Cmd, []string{"node"}) || c.User != User {
		t.Errorf("entrypoint %q cmd %q user %q, want [/dra-exporter] [node] %s", c.Entrypoint, c.Cmd, c.User, User)
	}
	if !strings.Contains(c.Labels["org.opencontainers.image.base.name"], "libc6=") {
		t.Errorf("base.name label %q does not name the Debian packages", c.Labels["org.opencontainers.image.base.name"])
	}
	layers, err := fromTar.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers (%v), want 2: the Debian packages and the binary", len(layers), err)
	}

	root := unpack(t, fromTar)
	license, err := os.ReadFile(filepath.Join(root, "licenses", "LICENSE"))
	must(t, err)
	checkLicense(t, license)
	bin := filepath.Join(root, "dra-exporter")
	ef, err := elf.Open(bin)
	must(t, err)
	interp := ""
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			data, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(data), "\x00")
		}
	}
	ef.Close()
	if interp == "" {
		t.Fatal("the agent's binary is static: it cannot load libnvidia-ml.so.1 (cgo build expected)")
	}
	if _, err := os.Stat(filepath.Join(root, interp)); err != nil {
		t.Fatalf("the image has no %s, the binary's loader: %v", interp, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot chroot into the unpacked image to run the binary")
	}
	out, err := exec.Command("chroot", root, "/dra-exporter", "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dra-exporter, version") {
		t.Fatalf("chroot %s /dra-exporter version: %v\n%s", root, err, out)
	}
	out, err = exec.Command("chroot", root, "/dra-exporter", "gpu-check", "--reads=1", "--nvidia-smi=", "--proc-root=", "--kubelet.pod-resources-socket=").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "no GPU source serves (auto)") {
		t.Errorf("gpu-check without GPU libraries: %v, want exit 1 and the source reported unavailable:\n%s", err, out)
	}
}

// unpack writes the image's flattened file system into a directory.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	fs := mutate.Extract(img)
	defer fs.Close()
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err)
		dst := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			must(t, os.MkdirAll(dst, 0o755))
		case tar.TypeSymlink:
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			must(t, os.Symlink(h.Linkname, dst))
		case tar.TypeReg:
			must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			must(t, err)
			_, err = io.Copy(f, tr)
			f.Close()
			must(t, err)
		}
	}
	return root
}
