package collector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// familyLines returns the sample lines of the named families in a scrape,
// rendered by TextFamilies (cached path) or Render (Collect path).
func familyLines(t *testing.T, x *engine.Exporter, cached bool, names ...string) map[string][]string {
	t.Helper()
	var text string
	if cached {
		var b []byte
		for _, f := range x.TextFamilies(false) {
			b = f.AppendTo(b)
		}
		text = string(b)
	} else {
		out, err := engine.Render(x)
		if err != nil {
			t.Fatal(err)
		}
		text = string(out)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				got[n] = append(got[n], line)
			}
		}
	}
	return got
}

// While a resource is stale the verdict families read as at the last scrape
// every resource was current for, so that pods back from an outage before
// their claims cannot read as leaks; the other families follow the index;
// once current again, the verdicts are computed afresh.
func TestVerdictsHeldWhileStale(t *testing.T) {
	for _, cached := range []bool{true, false} {
		name := "Collect"
		if cached {
			name = "TextFamilies"
		}
		t.Run(name, func(t *testing.T) {
			p := Ready(Bound(WithClaimStatus(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "tmpl"), "gpu", "llm-0-gpu"), "node-1"))
			c := ReservedFor(Allocated(OwnedBy(Claim("llm-0-gpu", "uid-c"), p, "gpu"), "node-1", T0, Result("gpu", "node-1", "gpu-0")), p)
			pending := WithTemplateClaim(Pod("llm-1", "uid-llm-1"), "gpu", "tmpl")
			ix := Build(t, index.Config{Now: func() time.Time { return T0 }}, GPUClass(), Node("node-1", 0),
				Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), p, c, pending)
			stale := false
			x := engine.NewExporter(ix, func() time.Time { return T0 }, false, nil,
				collector.ClusterCollectors(collector.Config{UnreservedGrace: time.Minute})...).
				HoldVerdictsWhen(func() bool { return stale })
			fams := []string{"dra_claim_reservation_leak", "dra_pod_blocked", "dra_pod_gate", "dra_pod_info"}

			before := familyLines(t, x, cached, fams...)
			if len(before["dra_claim_reservation_leak"]) != 0 || len(before["dra_pod_blocked"]) != 1 || len(before["dra_pod_info"]) != 2 {
				t.Fatalf("before: %v", before)
			}
			// Pods come back first: llm-0 is gone and llm-1 with it, the
			// claim still names llm-0.
			stale = true
			Del(t, ix, p)
			Del(t, ix, pending)
			during := familyLines(t, x, cached, fams...)
			for _, f := range []string{"dra_claim_reservation_leak", "dra_pod_blocked", "dra_pod_gate"} {
				if strings.Join(during[f], "\n") != strings.Join(before[f], "\n") {
					t.Errorf("%s while stale:\n%v\nwant as before:\n%v", f, during[f], before[f])
				}
			}
			if len(during["dra_pod_info"]) != 0 {
				t.Errorf("dra_pod_info is not a verdict and follows the index: %v", during["dra_pod_info"])
			}
			stale = false
			after := familyLines(t, x, cached, fams...)
			if got := after["dra_claim_reservation_leak"]; len(got) != 1 || !strings.Contains(got[0], `reason="pod_missing"`) {
				t.Errorf("leaks once current: %v, want the claim's pod_missing", got)
			}
			if len(after["dra_pod_blocked"]) != 0 {
				t.Errorf("blocked once current: %v", after["dra_pod_blocked"])
			}
			if len(before["dra_pod_gate"]) != 2 || len(after["dra_pod_gate"]) != 0 {
				t.Errorf("api gates before %v, once current %v: want both pods', then none", before["dra_pod_gate"], after["dra_pod_gate"])
			}
		})
	}
}

// Stale before any scrape: nothing to hold, the verdicts are left out.
func TestVerdictsWithheldBeforeAnyCurrentScrape(t *testing.T) {
	ix := Build(t, index.Config{}, GPUClass(), WithTemplateClaim(Pod("llm-1", "uid-llm-1"), "gpu", "tmpl"))
	x := engine.NewExporter(ix, func() time.Time { return T0 }, false, nil, collector.ClusterCollectors(collector.Config{})...).
		HoldVerdictsWhen(func() bool { return true })
	got := familyLines(t, x, true, "dra_pod_blocked", "dra_pod_info")
	if len(got["dra_pod_blocked"]) != 0 || len(got["dra_pod_info"]) != 1 {
		t.Errorf("got %v, want no verdicts and the pod's info", got)
	}
}
