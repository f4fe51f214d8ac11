// Package bundle is the evidence bundle's file format: a gzipped tar whose
// members are the objects of a cluster as `kubectl get -o yaml` Lists, the
// API server's versions and resource.k8s.io resources, the GPU Operator's
// objects where it runs, and every node agent's /metrics, with a manifest
// that says what was collected, skipped or failed. It imports nothing of
// this module: the bundle command writes it, offline readers (snapshot,
// explain, gates) read it.
package bundle

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Root is the folder every member lives under.
const Root = "dra-bundle/"

// Folders of the members.
const (
	ObjectsDir     = "objects/"      // kubectl get -o yaml Lists the index reads
	GPUOperatorDir = "gpu-operator/" // ClusterPolicy, GPUCluster, NVIDIADriver
	AgentsDir      = "agents/"       // <node>.prom: a node agent's /metrics
	ManifestFile   = "manifest.json"
)

// Format is the version of the layout.
const Format = 1

// maxMember bounds what one member may hold when read: a bundle is evidence
// from a cluster, not a trusted file.
const maxMember = 1 << 30

// Manifest says what the bundle holds.
type Manifest struct {
	Format  int       `json:"format"`
	Created time.Time `json:"created"`
	// Tool is the program and version that wrote it.
	Tool  string `json:"tool"`
	Items []Item `json:"items"`
}

// Item is one thing the collector tried to read.
type Item struct {
	// Path is the member, relative to Root; empty when nothing was written.
	Path string `json:"path,omitempty"`
	What string `json:"what"`
	// Count is the number of objects or series written.
	Count int `json:"count,omitempty"`
	// Skipped says why nothing was collected though nothing failed (a
	// kind the cluster does not serve).
	Skipped string `json:"skipped,omitempty"`
	// Error is why it failed; the rest of the bundle is still written.
	Error string `json:"error,omitempty"`
}

// Writer writes a bundle; Close writes the manifest.
type Writer struct {
	gz       *gzip.Writer
	tw       *tar.Writer
	manifest Manifest
	paths    map[string]bool
}

// NewWriter starts a bundle on w.
func NewWriter(w io.Writer, created time.Time, tool string) *Writer {
	gz := gzip.NewWriter(w)
	return &Writer{gz: gz, tw: tar.NewWriter(gz), manifest: Manifest{Format: Format, Created: created.UTC(), Tool: tool}, paths: map[string]bool{}}
}

// Add writes one member and records it.
func (w *Writer) Add(name, what string, count int, data []byte) error {
	if err := w.write(name, data); err != nil {
		return err
	}
	w.manifest.Items = append(w.manifest.Items, Item{Path: name, What: what, Count: count})
	return nil
}

// Skip records something not collected because the cluster does not have it.
func (w *Writer) Skip(what, why string) {
	w.manifest.Items = append(w.manifest.Items, Item{What: what, Skipped: why})
}

// Fail records something that could not be collected.
func (w *Writer) Fail(what string, err error) {
	w.manifest.Items = append(w.manifest.Items, Item{What: what, Error: err.Error()})
}

// Items returns what was recorded so far.
func (w *Writer) Items() []Item { return w.manifest.Items }

func (w *Writer) write(name string, data []byte) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") || w.paths[name] || name == ManifestFile {
		return fmt.Errorf("bundle member %q: invalid or repeated name", name)
	}
	w.paths[name] = true
	hdr := &tar.Header{Name: Root + name, Mode: 0o644, Size: int64(len(data)), ModTime: w.manifest.Created, Typeflag: tar.TypeReg}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("bundle member %s: %w", name, err)
	}
	if _, err := w.tw.Write(data); err != nil {
		return fmt.Errorf("bundle member %s: %w", name, err)
	}
	return nil
}

// Close writes the manifest and finishes the archive.
func (w *Writer) Close() error {
	raw, err := json.MarshalIndent(w.manifest, "", "  ")
	if err != nil {
		return err
	}
	w.paths[ManifestFile] = false
	hdr := &tar.Header{Name: Root + ManifestFile, Mode: 0o644, Size: int64(len(raw)), ModTime: w.manifest.Created, Typeflag: tar.TypeReg}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := w.tw.Write(raw); err != nil {
		return err
	}
	if err := w.tw.Close(); err != nil {
		return err
	}
	return w.gz.Close()
}

// Bundle is a bundle read back.
type Bundle struct {
	Name     string
	Manifest Manifest
	// Files maps a member's path (relative to Root) to its content.
	Files map[string][]byte
}

// Is reports whether the file is a gzip stream (a bundle, or no file the
// object loader reads).
func Is(name string) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 2)
	if _, err := io.ReadFull(f, magic); err != nil {
		return false
	}
	return magic[0] == 0x1f && magic[1] == 0x8b
}

// ReadFile reads a bundle from a file.
func ReadFile(name string) (*Bundle, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	defer f.Close()
	b, err := Read(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", name, err)
	}
	b.Name = name
	return b, nil
}

// Read reads a bundle. Members outside Root, links and folders are ignored;
// a bundle without a manifest is an error.
func Read(r io.Reader) (*Bundle, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a gzipped bundle: %w", err)
	}
	tr := tar.NewReader(gz)
	b := &Bundle{Files: map[string][]byte{}}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not a tar bundle: %w", err)
		}
		name, ok := strings.CutPrefix(path.Clean(hdr.Name), Root)
		if !ok || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size > maxMember {
			return nil, fmt.Errorf("member %s: %d bytes, more than a bundle member may hold", name, hdr.Size)
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxMember))
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", name, err)
		}
		b.Files[name] = data
	}
	raw, ok := b.Files[ManifestFile]
	if !ok {
		return nil, fmt.Errorf("no %s%s: not a dra-exporter evidence bundle", Root, ManifestFile)
	}
	if err := json.Unmarshal(raw, &b.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	if b.Manifest.Format != Format {
		return nil, fmt.Errorf("bundle format %d, this dra-exporter reads %d", b.Manifest.Format, Format)
	}
	return b, nil
}

// Member is one file of a bundle.
type Member struct {
	Path string
	Data []byte
}

// Under returns the members under a folder (ObjectsDir, AgentsDir), sorted.
func (b *Bundle) Under(dir string) []Member {
	var out []Member
	for p, data := range b.Files {
		if strings.HasPrefix(p, dir) {
			out = append(out, Member{Path: p, Data: data})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Reader returns a member's content as a reader, nil when absent.
func (b *Bundle) Reader(name string) io.Reader {
	data, ok := b.Files[name]
	if !ok {
		return nil
	}
	return bytes.NewReader(data)
}
