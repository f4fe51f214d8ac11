package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is one file of an archive. Archives are reproducible: entries
// sorted by name, owned by 0:0 with no user or group names, every time
// the commit's (SOURCE_DATE_EPOCH), and a gzip header without a name or
// a time.
type entry struct {
	name string
	mode int64
	data []byte
	dir  bool
}

// fileEntry reads a file into an entry named name.
func fileEntry(name, path string, mode int64) (entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return entry{}, err
	}
	return entry{name: name, mode: mode, data: data}, nil
}

// dirEntries reads a directory tree into entries named under prefix
// (regular files and directories; the tree holds nothing else).
func dirEntries(root, prefix string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := prefix + filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			out = append(out, entry{name: name + "/", mode: 0o755, dir: true})
		case d.Type().IsRegular():
			e, err := fileEntry(name, path, 0o644)
			if err != nil {
				return err
			}
			out = append(out, e)
		default:
			return fmt.Errorf("%s: neither a file nor a directory", path)
		}
		return nil
	})
	return out, err
}

// writeTar writes entries as a tar stream, sorted, with fixed metadata.
func writeTar(w io.Writer, entries []entry, mtime time.Time) error {
	sorted := append([]entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	tw := tar.NewWriter(w)
	for i, e := range sorted {
		if i > 0 && sorted[i-1].name == e.name {
			return fmt.Errorf("archive entry %s twice", e.name)
		}
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uid: 0, Gid: 0, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeTarGz writes entries as a .tar.gz file.
func writeTarGz(path string, entries []entry, mtime time.Time) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	// No name, no time: the header is the same in every run.
	if err := writeTar(zw, entries, mtime); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeTarFile writes entries as an uncompressed .tar file (the image
// layouts: their layers are compressed already).
func writeTarFile(path string, entries []entry, mtime time.Time) error {
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, mtime); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// readTarGz reads a .tar.gz file's regular files and directories
// (helm's chart package).
func readTarGz(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return readTarStream(path, zr)
}

// readTar reads a .tar file's regular files and directories (an image's
// layout).
func readTar(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readTarStream(path, f)
}

func readTarStream(path string, r io.Reader) ([]entry, error) {
	tr := tar.NewReader(r)
	var out []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out = append(out, entry{name: strings.TrimSuffix(h.Name, "/") + "/", mode: 0o755, dir: true})
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			mode := int64(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			out = append(out, entry{name: h.Name, mode: mode, data: data})
		default:
			return nil, fmt.Errorf("%s: %s is neither a file nor a directory", path, h.Name)
		}
	}
}
