package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), "test")
	if err := w.Add(ObjectsDir+"pods.yaml", "pods", 2, []byte("kind: List\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(AgentsDir+"node-1.prom", "agent", 4, []byte("dra_node_podresources_up 1\n")); err != nil {
		t.Fatal(err)
	}
	w.Skip("gpuclusters.nvidia.com", "not served")
	w.Fail("events", errors.New("forbidden"))
	for _, bad := range []string{"", "/etc/passwd", "../x", ObjectsDir + "pods.yaml", ManifestFile} {
		if err := w.Add(bad, "bad", 0, nil); err == nil {
			t.Errorf("Add(%q) accepted a name it must refuse", bad)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Under(ObjectsDir); len(got) != 1 || string(got[0].Data) != "kind: List\n" {
		t.Errorf("objects: %+v", got)
	}
	if got := b.Under(AgentsDir); len(got) != 1 || got[0].Path != AgentsDir+"node-1.prom" {
		t.Errorf("agents: %+v", got)
	}
	if n := len(b.Manifest.Items); n != 4 || b.Manifest.Items[2].Skipped != "not served" || b.Manifest.Items[3].Error != "forbidden" {
		t.Errorf("manifest items: %+v", b.Manifest.Items)
	}
}

func TestReadRefusesWhatIsNoBundle(t *testing.T) {
	tarOf := func(files map[string]string) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for name, data := range files {
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte(data))
		}
		_ = tw.Close()
		_ = gz.Close()
		return buf.Bytes()
	}
	for name, data := range map[string][]byte{
		"not gzip": []byte("apiVersion: v1\nkind: List\n"),
		"gzip, not tar": func() []byte {
			var b bytes.Buffer
			g := gzip.NewWriter(&b)
			_, _ = g.Write([]byte("hello"))
			_ = g.Close()
			return b.Bytes()
		}(),
		"no manifest":  tarOf(map[string]string{Root + ObjectsDir + "pods.yaml": "kind: List"}),
		"other format": tarOf(map[string]string{Root + ManifestFile: `{"format": 99}`}),
		"broken JSON":  tarOf(map[string]string{Root + ManifestFile: `{"format": `}),
		"outside root": tarOf(map[string]string{"elsewhere/" + ManifestFile: `{"format": 1}`}),
	} {
		if _, err := Read(bytes.NewReader(data)); err == nil {
			t.Errorf("%s: read without an error", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: an empty error", name)
		}
	}
}
