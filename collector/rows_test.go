package collector

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// compareLines reads label values back from rendered lines: its order must
// be the order of the values themselves (in label-name order), whatever
// they hold: escapes, bytes below the quote, one value a prefix of another.
func TestCompareLinesFollowsLabelValues(t *testing.T) {
	d := newDef("dra_test_rows", typeGauge, "Rows.", "zeta", "alpha", "mid")
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
		a := sample{def: d, v: 1, lvs: []string{value(), value(), value()}}
		b := sample{def: d, v: 2, lvs: []string{value(), value(), value()}}
		if rng.IntN(3) == 0 {
			b.lvs[1] = a.lvs[1] // alpha, the first in label order, often equal
		}
		want := 0
		for _, i := range d.labelOrder() {
			if c := strings.Compare(a.lvs[i], b.lvs[i]); c != 0 {
				want = c
				break
			}
		}
		la, lb := line{text: d.appendLine(nil, a)}, line{text: d.appendLine(nil, b)}
		if got := compareLines(la, lb); sign(got) != want {
			t.Fatalf("compareLines(%q, %q) = %d, label values compare %d", la.text, lb.text, got, want)
		}
	}
}
