package engine

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/family"
)

// compareLines reads label values back from rendered lines: its order must
// be the order of the values themselves (in label-name order), whatever
// they hold: escapes, bytes below the quote, one value a prefix of another.
func TestCompareLinesFollowsLabelValues(t *testing.T) {
	d := family.New("dra_test_rows", family.TypeGauge, "Rows.", "zeta", "alpha", "mid")
	alphabet := []string{"", "a", "b", " ", "!", `"`, `\`, "\n", "n", "ab", "a b", "é"}
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	sign := func(n int) int { return min(max(n, -1), 1) }
	for range 20000 {
		a := family.Sample{Def: d, Value: 1, LabelValues: []string{value(), value(), value()}}
		b := family.Sample{Def: d, Value: 2, LabelValues: []string{value(), value(), value()}}
		if rng.IntN(3) == 0 {
			b.LabelValues[1] = a.LabelValues[1] // alpha, the first in label order, often equal
		}
		want := 0
		for _, i := range d.LabelOrder() {
			if c := strings.Compare(a.LabelValues[i], b.LabelValues[i]); c != 0 {
				want = c
				break
			}
		}
		la, lb := line{text: d.AppendLine(nil, a)}, line{text: d.AppendLine(nil, b)}
		if got := compareLines(la, lb); sign(got) != want {
			t.Fatalf("compareLines(%q, %q) = %d, label values compare %d", la.text, lb.text, got, want)
		}
	}
}
