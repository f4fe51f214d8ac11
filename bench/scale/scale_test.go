package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestSmallRun runs the whole benchmark at 300 claims (without the compared
// exporter, which make test does not build) and checks that every figure
// the README's table shows was measured and is plausible: a harness that
// silently measured nothing would print a table of zeros.
func TestSmallRun(t *testing.T) {
	bin := os.Getenv(cluster.EnvBinDir)
	exporter := os.Getenv("DRA_E2E_EXPORTER")
	if bin == "" || exporter == "" {
		if os.Getenv("DRA_E2E_SKIP") == "1" {
			t.Skip("no control plane binaries or exporter (DRA_E2E_SKIP=1)")
		}
		t.Fatalf("set %s and DRA_E2E_EXPORTER (make test does)", cluster.EnvBinDir)
	}
	o := options{n: 300, workers: 8, scrapes: 12, churnRate: 20, concurrent: 8, controlPlane: bin, exporter: exporter, dir: filepath.Join(t.TempDir(), "cp")}
	rep, err := run(context.Background(), o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Floor == nil || rep.Floor.Objects["pods"] != rep.Cluster.Pods || rep.Floor.Objects["resourceclaims"] != rep.Cluster.Claims {
		t.Fatalf("floor %+v, cluster %+v", rep.Floor, rep.Cluster)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want the exporter's", len(rep.Results))
	}
	r := rep.Results[0]
	switch {
	case rep.Floor.SettleSeconds < 1, r.SettleSeconds < 1:
		t.Errorf("waited %.1fs and %.1fs for a quiet control plane; each sync starts after at least a second's look", rep.Floor.SettleSeconds, r.SettleSeconds)
	case r.ReadySeconds <= 0, r.SyncCPUSeconds <= 0:
		t.Errorf("ready %.3fs, sync CPU %.3fs", r.ReadySeconds, r.SyncCPUSeconds)
	case r.RSSAfterSyncBytes < 10<<20, r.RSSAfter10ScrapesBytes < 10<<20, r.GoHeapInuseBytes <= 0:
		t.Errorf("RSS %d/%d, heap %d", r.RSSAfterSyncBytes, r.RSSAfter10ScrapesBytes, r.GoHeapInuseBytes)
	case len(r.Scrapes) != o.scrapes, r.ScrapeP50Seconds <= 0, r.ScrapeP99Seconds < r.ScrapeP50Seconds:
		t.Errorf("%d scrapes, p50 %.3f, p99 %.3f", len(r.Scrapes), r.ScrapeP50Seconds, r.ScrapeP99Seconds)
	case r.GzipBytes <= 0, r.GzipBytes >= r.Bytes:
		t.Errorf("gzip %d bytes of %d", r.GzipBytes, r.Bytes)
	}
	kinds := map[string]bool{}
	for _, k := range churnMix {
		kinds[k] = true
	}
	if ch := r.Churn; ch == nil || ch.Errors > 0 || len(ch.Writes) != len(kinds) {
		t.Errorf("churn round: %+v", ch)
	} else if len(r.ChurnScrapes) != o.scrapes || r.ChurnScrapeP50Seconds <= 0 || r.RSSAfterChurnBytes < 10<<20 {
		t.Errorf("churn round: %d scrapes, p50 %.3f, RSS %d", len(r.ChurnScrapes), r.ChurnScrapeP50Seconds, r.RSSAfterChurnBytes)
	} else if r.ChurnInconsistent > 0 || r.ChurnClaimsChecked != rep.Cluster.Claims {
		t.Errorf("churn round: %d inconsistent scrapes (%s), %d claims checked of %d", r.ChurnInconsistent, r.ChurnInconsistency, r.ChurnClaimsChecked, rep.Cluster.Claims)
	}
	if f := r.Formats; f == nil {
		t.Error("no protobuf scrapes or bursts")
	} else {
		if !strings.HasPrefix(f.ProtoContentType, "application/vnd.google.protobuf") || len(f.ProtoScrapes) != 10 || f.ProtoP50Seconds <= 0 || f.ProtoBytes <= 0 {
			t.Errorf("protobuf scrapes: %q, %d, p50 %.3f, %d bytes", f.ProtoContentType, len(f.ProtoScrapes), f.ProtoP50Seconds, f.ProtoBytes)
		}
		for name, b := range map[string]Burst{"protobuf": f.ProtoBurst, "text": f.TextBurst} {
			if b.Failed > 0 || b.P50Seconds <= 0 || b.MaxSeconds < b.P50Seconds || b.IdleRSSBytes < 10<<20 || b.PeakRSSBytes < b.IdleRSSBytes {
				t.Errorf("%s burst: %+v", name, b)
			}
		}
	}
	// About 9.5 series per claim (bench/README.md), and at least one per pod.
	if r.Series < rep.Cluster.Pods || r.Series > 20*rep.Cluster.Claims {
		t.Errorf("%d series for %d claims", r.Series, rep.Cluster.Claims)
	}
	if md := rep.Markdown(); len(md) < 200 {
		t.Errorf("markdown table too short:\n%s", md)
	}
}

// The churn round's check of one scrape: each claim in exactly one state.
func TestClaimStatesConsistent(t *testing.T) {
	ok := []byte(`dra_claim_info{claim="a",lane="dra",namespace="ns",pod="",pod_uid=""} 1
dra_claim_status{claim="a",namespace="ns",state="allocated"} 0
dra_claim_status{claim="a",namespace="ns",state="reserved"} 1
dra_claim_status{claim="a",namespace="ns",state="unallocated"} 0
`)
	if n, err := claimStatesConsistent(ok); n != 1 || err != nil {
		t.Errorf("consistent scrape: %d claims, %v", n, err)
	}
	twice := append(ok, []byte(`dra_claim_status{claim="a",namespace="ns",state="allocated"} 1
`)...)
	if _, err := claimStatesConsistent(twice); err == nil {
		t.Error("a claim in two states passed")
	}
	none := []byte(`dra_claim_info{claim="b",lane="dra",namespace="ns",pod="",pod_uid=""} 1
`)
	if _, err := claimStatesConsistent(none); err == nil {
		t.Error("a claim in no state passed")
	}
}
