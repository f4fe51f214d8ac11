package node

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// The images the node runs. None can be pulled here: each is a one-layer
// image around a static Go binary of test/node/images, written as an OCI
// archive and imported into containerd (pods use imagePullPolicy: Never).
const (
	PauseImage    = "localhost/dra-e2e/pause:v1"
	WorkloadImage = "localhost/dra-e2e/workload:v1"
)

// testImage is one image: the program under test/node/images and its name.
type testImage struct {
	ref     string
	program string // package directory under test/node/images
}

var testImages = []testImage{
	{PauseImage, "pause"},
	{WorkloadImage, "workload"},
}

// buildImages builds the test images' binaries with the go command (static,
// CGO_ENABLED=0) and writes each as an OCI archive in dir; it returns the
// archives.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	var out []string
	for _, img := range testImages {
		bin := filepath.Join(dir, img.program)
		// By import path: the test runs inside the module, and a -trimpath build
		// (make test's GOFLAGS) knows no source file's place on disk.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, imagesPackage+"/"+img.program)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build image program %s: %v: %s", img.program, err, msg)
		}
		archive := bin + ".oci.tar"
		if err := writeOCIArchive(archive, img.ref, bin, "/"+img.program); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.ref, err)
		}
		out = append(out, archive)
	}
	return out, nil
}

// imagesPackage holds one main package per test image.
const imagesPackage = "github.com/dra-exporter/dra-exporter/test/node/images"

// writeOCIArchive writes an OCI image layout (image-spec v1.1: oci-layout,
// index.json, blobs) as a tar: one uncompressed layer holding the binary at
// entrypoint, run as root (the workload prints what it was given; the
// exporter's own image, which runs non-root, is `make image`'s). The index
// names the image with containerd's io.containerd.image.name annotation,
// which `ctr images import` reads.
func writeOCIArchive(path, ref, binary, entrypoint string) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	name := entrypoint[1:]
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": []string{entrypoint}, "WorkingDir": "/"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{"io.containerd.image.name": ref}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []ociDescriptor{manifestDesc},
	})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	out := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	}
	for _, file := range files {
		if err := out.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := out.Write(file.data); err != nil {
			return err
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	return f.Close()
}

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func descriptor(mediaType string, data []byte) ociDescriptor {
	sum := sha256.Sum256(data)
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
}

func blobPath(d ociDescriptor) string { return "blobs/sha256/" + d.Digest[len("sha256:"):] }
