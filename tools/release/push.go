package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push sends a built release (-out) to a registry: each image's index,
// with both architectures, as <registry>/<image>:<version>, and the chart
// as oci://<registry>/charts/dra-exporter:<chart version>. Credentials:
// REGISTRY_USER and REGISTRY_PASSWORD, or the docker config's; -insecure
// talks plain HTTP (a registry on localhost).
func (r *release) push(insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	user, password := os.Getenv("REGISTRY_USER"), os.Getenv("REGISTRY_PASSWORD")
	if user != "" {
		auth = remote.WithAuth(&authn.Basic{Username: user, Password: password})
	}
	for _, im := range images {
		file := filepath.Join(r.out, fmt.Sprintf("%s_%s_oci-layout.tar", im.name, r.version))
		dir, err := os.MkdirTemp("", "dra-exporter-push-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		entries, err := readTar(file)
		if err != nil {
			return fmt.Errorf("%s (make release VERSION=%s first): %w", file, r.version, err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, filepath.FromSlash(e.name))
			if e.dir {
				err = os.MkdirAll(p, 0o755)
			} else if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.WriteFile(p, e.data, 0o644)
			}
			if err != nil {
				return err
			}
		}
		top, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			return err
		}
		m, err := top.IndexManifest()
		if err != nil {
			return err
		}
		if len(m.Manifests) != 1 {
			return fmt.Errorf("%s holds %d manifests, want one image index", file, len(m.Manifests))
		}
		idx, err := top.ImageIndex(m.Manifests[0].Digest)
		if err != nil {
			return err
		}
		ref, err := name.NewTag(r.imageRef(im.name), opts...)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, idx, auth); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		d, _ := idx.Digest()
		fmt.Printf("%s@%s\n", ref, d)
	}
	if r.helm == "" {
		return fmt.Errorf("-helm is required to push the chart")
	}
	chart := filepath.Join(r.out, fmt.Sprintf("%s-%s.tgz", chartName, strings.TrimPrefix(r.version, "v")))
	host := strings.SplitN(r.registry, "/", 2)[0]
	regConfig := filepath.Join(r.out, ".helm-registry.json")
	defer os.Remove(regConfig)
	if user != "" {
		args := []string{"registry", "login", host, "--username", user, "--password-stdin", "--registry-config", regConfig}
		if insecure {
			args = append(args, "--insecure")
		}
		cmd := exec.Command(r.helm, args...)
		cmd.Stdin = strings.NewReader(password)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("helm registry login %s: %v\n%s", host, err, b)
		}
	}
	args := []string{"push", chart, "oci://" + r.registry + "/charts"}
	if user != "" {
		args = append(args, "--registry-config", regConfig)
	}
	if insecure {
		args = append(args, "--plain-http")
	}
	b, err := exec.Command(r.helm, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm push: %v\n%s", err, b)
	}
	fmt.Print(string(b))
	return nil
}
