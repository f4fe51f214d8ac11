package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// image is one of the two images of a release.
type image struct {
	name   string // repository name under -registry
	layout string // tools/image's layout directory of one architecture
}

var images = []image{
	{"dra-exporter", "oci"},
	{"dra-exporter-node-agent", "agent-oci"},
}

// buildImages builds both images for every image platform with tools/image
// (one architecture per run: the static exporter, the cgo agent on
// Debian's libc6 and libgcc-s1 of that architecture), then joins each
// image's architectures into one OCI image index, written as an OCI
// layout in a tar file. It returns the file names, and appends each
// index's reference and digest to refs.
func (r *release) buildImages(binaries map[string]string, refs *[]string) ([]string, error) {
	tool := filepath.Join(r.work, "image-tool")
	cmd := exec.Command("go", "build", "-o", tool, ".")
	cmd.Dir = filepath.Join(r.root, "tools", "image")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build tools/image: %v\n%s", err, b)
	}
	perArch := map[string]string{}
	for _, p := range r.imagePlatforms {
		arch := p.arch
		static, ok := binaries["linux/"+arch]
		if !ok {
			static = filepath.Join(r.work, "linux_"+arch, "dra-exporter")
			if err := r.goBuild("linux", arch, false, "", nil, static); err != nil {
				return nil, err
			}
		}
		cc, env, err := r.cgoCompiler(arch)
		if err != nil {
			return nil, fmt.Errorf("the node agent for %s needs cgo: %w", arch, err)
		}
		agent := filepath.Join(r.work, "agent_"+arch, "dra-exporter")
		if err := r.goBuild("linux", arch, true, cc, env, agent); err != nil {
			return nil, err
		}
		apt := r.apt(arch)
		if err := apt.update(); err != nil {
			return nil, err
		}
		pkgs, err := apt.resolve(r.agentDebs)
		if err != nil {
			return nil, err
		}
		debs, err := apt.download(pkgs, filepath.Join(r.cache, "debian", "debs"))
		if err != nil {
			return nil, err
		}
		rootfs := filepath.Join(r.work, "agent-rootfs-"+arch)
		if err := extract(debs, rootfs); err != nil {
			return nil, err
		}
		out := filepath.Join(r.work, "image-"+arch)
		cmd := exec.Command(tool, "-binary", static, "-license", filepath.Join(r.root, "LICENSE"), "-out", out,
			"-ref", r.imageRef("dra-exporter"), "-version", r.version, "-revision", r.revision, "-arch", arch,
			"-agent-binary", agent, "-agent-ref", r.imageRef("dra-exporter-node-agent"),
			"-agent-rootfs", rootfs, "-agent-packages", strings.Join(pkgs, ","))
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(r.mtime.Unix(), 10))
		r.logf("tools/image linux/%s", arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("tools/image linux/%s: %v\n%s", arch, err, b)
		}
		perArch[arch] = out
	}

	var files []string
	for _, im := range images {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range r.imagePlatforms {
			img, err := onlyImage(filepath.Join(perArch[p.arch], im.layout))
			if err != nil {
				return nil, err
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: p.arch},
			}})
		}
		ref := r.imageRef(im.name)
		tag, err := name.NewTag(ref)
		if err != nil {
			return nil, fmt.Errorf("image reference %q: %w", ref, err)
		}
		dir := filepath.Join(r.work, "index-"+im.name)
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		l, err := layout.Write(dir, empty.Index)
		if err != nil {
			return nil, err
		}
		if err := l.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag.TagStr(),
		})); err != nil {
			return nil, err
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		*refs = append(*refs, ref+"@"+d.String())
		entries, err := dirEntries(dir, "")
		if err != nil {
			return nil, err
		}
		file := fmt.Sprintf("%s_%s_oci-layout.tar", im.name, r.version)
		if err := writeTarFile(filepath.Join(r.out, file), entries, r.mtime); err != nil {
			return nil, err
		}
		r.logf("%s %s (%d platforms) -> %s", ref, d, len(r.imagePlatforms), file)
		files = append(files, file)
	}
	return files, nil
}

// onlyImage reads the one image of a tools/image layout.
func onlyImage(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d manifests, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

func (r *release) imageRef(repo string) string {
	return r.registry + "/" + repo + ":" + r.version
}
