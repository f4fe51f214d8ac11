package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// TestPrometheusScrapesProtobuf: a real Prometheus scrapes the exporter in
// the protobuf format only (what it asks for first with native histograms
// on) and in the text format, and stores the same cluster series from
// both; the exporter answers the protobuf Accept header with delimited
// protobuf (served from the kept families, engine.Family.WriteProtoTo).
func TestPrometheusScrapesProtobuf(t *testing.T) {
	requireCluster(t)
	bin := os.Getenv(cluster.EnvPrometheus)
	if bin == "" {
		t.Fatalf("%s is not set (make test builds Prometheus and sets it)", cluster.EnvPrometheus)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.exp.URL+"/metrics", nil)
	req.Header.Set("Accept", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,text/plain;version=0.0.4;q=0.3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	format := expfmt.ResponseFormat(resp.Header)
	families := 0
	dec := expfmt.NewDecoder(resp.Body, format)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if err != io.EOF {
				t.Fatalf("decode the protobuf scrape: %v", err)
			}
			break
		}
		if strings.HasPrefix(mf.GetName(), "dra_") {
			families++
		}
	}
	resp.Body.Close()
	if format.FormatType() != expfmt.TypeProtoDelim || families < 10 {
		t.Fatalf("the protobuf Accept header got %q with %d dra_ families", format, families)
	}

	target := strings.TrimPrefix(env.exp.URL, "http://")
	prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary: bin, Dir: filepath.Join(t.TempDir(), "prometheus"), Interval: time.Second,
		ExtraJobs: []cluster.ScrapeJob{
			{Name: "proto", Target: target, HonorLabels: true, ScrapeProtocols: []string{"PrometheusProto"}},
			{Name: "text", Target: target, HonorLabels: true, ScrapeProtocols: []string{"PrometheusText0.0.4"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	// The cluster series of each job, without the job: the same set.
	seriesOf := func(job string) ([]string, error) {
		series, err := prom.QueryAt(ctx, fmt.Sprintf(`{job=%q, __name__=~"dra_.+", __name__!~"dra_exporter_.+"}`, job), time.Now())
		if err != nil {
			return nil, err
		}
		var out []string
		for _, s := range series {
			delete(s.Labels, "job")
			out = append(out, fmt.Sprint(s.Labels, s.Values))
		}
		slices.Sort(out)
		return out, nil
	}
	var proto, text []string
	err = cluster.WaitFor(ctx, 60*time.Second, "the same series through protobuf and text", func(context.Context) (bool, error) {
		var err error
		if proto, err = seriesOf("proto"); err != nil {
			return false, nil
		}
		if text, err = seriesOf("text"); err != nil {
			return false, nil
		}
		return len(proto) > 20 && slices.Equal(proto, text), nil
	})
	if err != nil {
		t.Fatalf("%v: %d series through protobuf, %d through text\n%s", err, len(proto), len(text), cluster.Tail(prom.Log, 20))
	}
	t.Logf("%d cluster series, the same through protobuf and text", len(proto))
}
