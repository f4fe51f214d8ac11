// Command image builds the OCI images without a container engine
// (github.com/google/go-containerregistry), run as 65534:65534 (no
// /etc/passwd needed), and writes each as an OCI image layout and a tarball
// (docker load, crane push). `make image` builds the binaries and runs this;
// its own module keeps go-containerregistry out of the exporter's go.mod.
//
//   - The cluster exporter: one layer holding a static (CGO_ENABLED=0)
//     dra-exporter at /dra-exporter on an empty base; command serve.
//   - The node agent (-agent-binary): the cgo dra-exporter on glibc from
//     Debian's own packages (-agent-rootfs: apt-get download, dpkg-deb -x),
//     or on a base image tarball (-agent-base: NVIDIA's DCGM image for
//     the DCGM variant); command node.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options describe one image.
type Options struct {
	Binary   string    // the static dra-exporter binary
	License  string    // the LICENSE file, at /licenses/LICENSE in the image
	Out      string    // output directory: <out>/oci (layout), <out>/dra-exporter.tar
	Ref      string    // image reference, e.g. ghcr.io/dra-exporter/dra-exporter:v0.1.0
	Version  string    // org.opencontainers.image.version
	Revision string    // org.opencontainers.image.revision
	Arch     string    // GOARCH of the binary
	Created  time.Time // image creation time (SOURCE_DATE_EPOCH: reproducible)
}

// User is the image's user: nobody, by number.
const User = "65534:65534"

func main() {
	var o Options
	flag.StringVar(&o.Binary, "binary", "", "The static dra-exporter binary (CGO_ENABLED=0).")
	flag.StringVar(&o.License, "license", "", "The LICENSE file, copied to /licenses/LICENSE in both images (required).")
	flag.StringVar(&o.Out, "out", "bin/image", "Output directory.")
	flag.StringVar(&o.Ref, "ref", "ghcr.io/dra-exporter/dra-exporter:dev", "Image reference (repository:tag) written into the tarball and the layout.")
	flag.StringVar(&o.Version, "version", "dev", "Version label.")
	flag.StringVar(&o.Revision, "revision", "unknown", "Revision label.")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "Architecture of the binary.")
	var a AgentOptions
	flag.StringVar(&a.Binary, "agent-binary", "", "The node agent's dra-exporter (cgo); empty: no agent image.")
	flag.StringVar(&a.RootFS, "agent-rootfs", "", "Directory of the extracted Debian packages the agent's image stands on.")
	packages := flag.String("agent-packages", "", "Those packages, name=version, comma-separated (for the image's labels).")
	flag.StringVar(&a.Base, "agent-base", "", "An image tarball to build the agent on instead of -agent-rootfs (the DCGM variant: NVIDIA's DCGM image).")
	flag.StringVar(&a.Ref, "agent-ref", "ghcr.io/dra-exporter/dra-exporter-node-agent:dev", "The agent image's reference.")
	flag.Parse()
	o.Created = time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "image: SOURCE_DATE_EPOCH:", err)
			os.Exit(2)
		}
		o.Created = time.Unix(sec, 0).UTC()
	}
	if err := build(o, a, *packages); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(o Options, a AgentOptions, packages string) error {
	if o.Binary != "" {
		img, err := Build(o)
		if err != nil {
			return err
		}
		if err := Write(o, img); err != nil {
			return err
		}
		report(o.Ref, img, o.Out, "oci", "dra-exporter.tar")
	}
	if a.Binary == "" {
		return nil
	}
	a.Out, a.Version, a.Revision, a.Arch, a.Created, a.License = o.Out, o.Version, o.Revision, o.Arch, o.Created, o.License
	if packages != "" {
		a.Packages = strings.Split(packages, ",")
	}
	img, err := BuildAgent(a)
	if err != nil {
		return err
	}
	if err := WriteAs(a.Ref, img, filepath.Join(a.Out, "agent-oci"), filepath.Join(a.Out, "dra-exporter-node-agent.tar")); err != nil {
		return err
	}
	report(a.Ref, img, a.Out, "agent-oci", "dra-exporter-node-agent.tar")
	return nil
}

func report(ref string, img v1.Image, out, layout, tarName string) {
	d, _ := img.Digest()
	fmt.Printf("%s %s\n  layout  %s\n  tarball %s\n", ref, d, filepath.Join(out, layout), filepath.Join(out, tarName))
}

// Build makes the image from the binary.
func Build(o Options) (v1.Image, error) {
	if o.Binary == "" {
		return nil, fmt.Errorf("-binary is required")
	}
	layer, err := binaryLayer(o.Binary, o.License, o.Created)
	if err != nil {
		return nil, err
	}
	img, cf, err := appendLayer(emptyOCI(), layer, "tools/image: /dra-exporter (static, CGO_ENABLED=0), /licenses/LICENSE", o.Created)
	if err != nil {
		return nil, err
	}
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		Entrypoint:   []string{"/dra-exporter"},
		Cmd:          []string{"serve"},
		User:         User,
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"9877/tcp": {}},
		Labels:       o.labels("dra-exporter", "Prometheus exporter for Kubernetes Dynamic Resource Allocation (DRA) on GPU clusters"),
	}
	return mutate.ConfigFile(img, cf)
}

// Write writes the OCI layout and the tarball.
func Write(o Options, img v1.Image) error {
	return WriteAs(o.Ref, img, filepath.Join(o.Out, "oci"), filepath.Join(o.Out, "dra-exporter.tar"))
}

// WriteAs writes img as an OCI layout in dir and a tarball at tarPath.
func WriteAs(refName string, img v1.Image, dir, tarPath string) error {
	ref, err := name.ParseReference(refName)
	if err != nil {
		return fmt.Errorf("reference %q: %w", refName, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.Identifier(),
	})); err != nil {
		return err
	}
	return tarball.WriteToFile(tarPath, ref, img)
}

// labels are an image's OCI annotations.
func (o Options) labels(title, description string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.source":      "https://github.com/dra-exporter/dra-exporter",
		"org.opencontainers.image.url":         "https://github.com/dra-exporter/dra-exporter",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
}

// emptyOCI is an empty OCI image.
func emptyOCI() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

// appendLayer adds a layer with its history entry and returns the image
// and a copy of its config to fill in.
func appendLayer(base v1.Image, layer v1.Layer, createdBy string, created time.Time) (v1.Image, *v1.ConfigFile, error) {
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Author: "dra-exporter tools/image", CreatedBy: createdBy, Created: v1.Time{Time: created},
	}})
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	return img, cf.DeepCopy(), nil
}
