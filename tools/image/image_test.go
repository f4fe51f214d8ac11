package main

import (
	"archive/tar"
	"bytes"
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
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// EnvImageDir names the directory `make image` wrote; the test reads that
// image back. Unset, the test builds a static binary and an image itself.
const EnvImageDir = "DRA_IMAGE_DIR"

func imageDir(t *testing.T) string {
	if dir := os.Getenv(EnvImageDir); dir != "" {
		return dir
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dra-exporter")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/prometheus/common/version.Version=test", "-o", bin, "./cmd/dra-exporter")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := Options{Binary: bin, Out: dir, Ref: "ghcr.io/dra-exporter/dra-exporter:test", Version: "test", Revision: "abc", Arch: "amd64", License: filepath.Join("..", "..", "LICENSE"), Created: time.Unix(0, 0).UTC()}
	img, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(o, img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImage reads the OCI layout and the tarball back and checks the
// config, then extracts /dra-exporter and runs its version command.
func TestImage(t *testing.T) {
	dir := imageDir(t)
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout holds %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want OCI", desc.MediaType)
	}
	if desc.Annotations["org.opencontainers.image.ref.name"] == "" {
		t.Error("layout manifest has no ref.name annotation")
	}
	fromLayout, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(filepath.Join(dir, "dra-exporter.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string]v1.Image{"layout": fromLayout, "tarball": fromTar} {
		t.Run(name, func(t *testing.T) { checkImage(t, img) })
	}
	a, _ := fromLayout.ConfigName()
	b, _ := fromTar.ConfigName()
	if a != b {
		t.Errorf("layout config %s, tarball config %s: not the same image", a, b)
	}
}

func checkImage(t *testing.T, img v1.Image) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/dra-exporter"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q cmd %q, want [/dra-exporter] [serve]", c.Entrypoint, c.Cmd)
	}
	if c.User != User {
		t.Errorf("user %q, want %q (non-root)", c.User, User)
	}
	if cf.OS != "linux" {
		t.Errorf("os %q", cf.OS)
	}
	for _, l := range []string{"org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.title"} {
		if c.Labels[l] == "" {
			t.Errorf("label %s missing", l)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1 on an empty base", len(layers), err)
	}

	// Extract the binary from the flattened filesystem and run it.
	fs := mutate.Extract(img)
	defer fs.Close()
	tr := tar.NewReader(fs)
	bin := filepath.Join(t.TempDir(), "dra-exporter")
	found := false
	var license []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == "licenses/LICENSE" {
			license, _ = io.ReadAll(tr)
		}
		if strings.TrimPrefix(h.Name, "/") != "dra-exporter" {
			continue
		}
		found = true
		if h.Mode&0o111 == 0 {
			t.Errorf("/dra-exporter mode %o is not executable", h.Mode)
		}
		f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if !found {
		t.Fatal("no /dra-exporter in the image")
	}
	checkLicense(t, license)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("dra-exporter version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dra-exporter, version") {
		t.Errorf("dra-exporter version printed %q", out)
	}
	// Static: a binary on an empty base has no loader to find.
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked; the image has no libc")
		}
	}
}

// checkLicense: the image carries the repository's LICENSE, byte for byte.
func checkLicense(t *testing.T, got []byte) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("..", "..", "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("/licenses/LICENSE: %d bytes, want the repository's LICENSE (%d bytes)", len(got), len(want))
	}
}
