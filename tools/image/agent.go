package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// AgentOptions describe the node agent's image: the cgo dra-exporter (it
// loads libnvidia-ml.so.1, which the NVIDIA container toolkit mounts from
// the driver, and libdcgm.so.4 where present) on glibc from Debian's own
// packages, or on a base image given as a tarball (NVIDIA's DCGM image,
// for the DCGM variant).
type AgentOptions struct {
	Options
	// RootFS is a directory holding the extracted Debian packages
	// (dpkg-deb -x of each): the base layer.
	RootFS string
	// Packages names them, name=version, for the image's labels.
	Packages []string
	// Base, when set, is an image tarball (crane pull, docker save) to
	// build on instead of RootFS.
	Base string
}

// BuildAgent makes the node agent's image.
func BuildAgent(a AgentOptions) (v1.Image, error) {
	if a.Binary == "" {
		return nil, fmt.Errorf("-agent-binary is required")
	}
	var base v1.Image
	var baseName string
	switch {
	case a.Base != "":
		img, err := tarball.ImageFromPath(a.Base, nil)
		if err != nil {
			return nil, fmt.Errorf("-agent-base %s: %w", a.Base, err)
		}
		base, baseName = img, filepath.Base(a.Base)
	case a.RootFS != "":
		layer, err := dirLayer(a.RootFS, a.Created)
		if err != nil {
			return nil, fmt.Errorf("-agent-rootfs: %w", err)
		}
		base, _, err = appendLayer(emptyOCI(), layer, "tools/image: Debian packages (apt-get download, dpkg-deb -x): "+strings.Join(a.Packages, " "), a.Created)
		if err != nil {
			return nil, err
		}
		baseName = "debian packages " + strings.Join(a.Packages, " ")
	default:
		return nil, fmt.Errorf("one of -agent-rootfs and -agent-base is required")
	}
	layer, err := binaryLayer(a.Binary, a.License, a.Created)
	if err != nil {
		return nil, err
	}
	img, cf, err := appendLayer(base, layer, "tools/image: /dra-exporter (cgo, glibc), /licenses/LICENSE", a.Created)
	if err != nil {
		return nil, err
	}
	cf.OS, cf.Architecture = "linux", a.Arch
	cf.Created = v1.Time{Time: a.Created}
	env := cf.Config.Env
	if a.Base == "" {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cf.Config = v1.Config{
		Entrypoint:   []string{"/dra-exporter"},
		Cmd:          []string{"node"},
		User:         User,
		WorkingDir:   "/",
		Env:          env,
		ExposedPorts: map[string]struct{}{"9878/tcp": {}},
		Labels: a.labels("dra-exporter-node-agent",
			"dra-exporter node agent: GPU telemetry (NVML, DCGM) joined to the pods, claims and devices of Kubernetes DRA"),
	}
	cf.Config.Labels["org.opencontainers.image.base.name"] = baseName
	return mutate.ConfigFile(img, cf)
}

// binaryLayer holds /dra-exporter, the project's licence at
// /licenses/LICENSE (the place Red Hat's certification and most
// distributions' images use) and a /tmp (DCGM writes its log and lock
// files there; the chart mounts an emptyDir over it).
func binaryLayer(path, license string, created time.Time) (v1.Layer, error) {
	if license == "" {
		return nil, fmt.Errorf("-license is required: every image carries the project's LICENSE")
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lic, err := os.ReadFile(license)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		h    *tar.Header
		data []byte
	}{
		{&tar.Header{Name: "dra-exporter", Mode: 0o755, Size: int64(len(bin)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}, bin},
		{&tar.Header{Name: "licenses/", Mode: 0o755, ModTime: created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}, nil},
		{&tar.Header{Name: "licenses/LICENSE", Mode: 0o644, Size: int64(len(lic)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}, lic},
		{&tar.Header{Name: "tmp/", Mode: 0o1777, ModTime: created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}, nil},
	} {
		if err := tw.WriteHeader(f.h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return bytesLayer(buf.Bytes())
}

func bytesLayer(data []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// dirLayer archives a directory tree as a layer: files, directories and
// symbolic links (the loader's /lib64/ld-linux-x86-64.so.2 is one), owned
// by root, with the image's time, in a stable order so that the same
// packages give the same digest.
func dirLayer(root string, created time.Time) (v1.Layer, error) {
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != root {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s is empty", root)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, path := range paths {
		info, err := os.Lstat(path)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, path)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: created, Format: tar.FormatPAX}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			continue // devices, sockets: none in a package's data
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return bytesLayer(buf.Bytes())
}
