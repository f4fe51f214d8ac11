package family

import (
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/shard"
)

func TestUniqueGauge(t *testing.T) {
	a := New("dra_test_a", TypeGauge, "A.", "x", "y")
	b := New("dra_test_b", TypeGauge, "B.", "x", "y")
	e := NewEmitter(shard.Shard{})
	e.UniqueGauge(a, 1, "1", "2")
	e.UniqueGauge(a, 1, "1", "2") // dropped
	e.UniqueGauge(a, 1, "12", "") // a different label set, not a collision
	e.UniqueGauge(b, 1, "1", "2") // another family
	e.Gauge(a, 1, "3", "4")
	var got []string
	for _, s := range e.Samples() {
		got = append(got, s.Def.Name+"|"+strings.Join(s.LabelValues, ","))
	}
	want := []string{"dra_test_a|1,2", "dra_test_a|12,", "dra_test_b|1,2", "dra_test_a|3,4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("emitted %v, want %v", got, want)
	}
}

// NewSplit cuts the HELP line at the first sentence, or at a NUL.
func TestNewSplit(t *testing.T) {
	for _, c := range []struct{ text, help, doc string }{
		{"One sentence.", "One sentence.", ""},
		{"The help. The guidance. More of it.", "The help.", "The guidance. More of it."},
		{"Help with e.g. a dot.\x00The guidance.", "Help with e.g. a dot.", "The guidance."},
	} {
		d := NewSplit("dra_test", TypeGauge, c.text)
		if d.Help != c.help || d.Doc != c.doc {
			t.Errorf("NewSplit(%q): help %q, doc %q; want %q, %q", c.text, d.Help, d.Doc, c.help, c.doc)
		}
	}
}
