package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/offline"
)

func snapshot(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: dra-exporter snapshot --from FILE [--from FILE...] [--now RFC3339] [FLAGS]")
		fmt.Fprintln(stderr, "\nPrints the metrics the exporter would serve for the objects in the files (kubectl get -o yaml Lists,")
		fmt.Fprintln(stderr, "multi-document YAML or JSON), without latency histograms, process and self-metrics.")
		fs.PrintDefaults()
	}
	var cfg config
	cfg.register(fs)
	var from stringList
	fs.Var(&from, "from", "File of objects to read (repeatable).")
	nowFlag := fs.String("now", "", "The time to evaluate at, RFC3339 (default: now). Grace periods count to it.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(from) == 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	now, err := parseNow(*nowFlag)
	if err != nil {
		fmt.Fprintln(stderr, "dra-exporter snapshot:", err)
		return 2
	}
	collectors, err := cfg.collectors()
	if err != nil {
		fmt.Fprintln(stderr, "dra-exporter snapshot:", err)
		return 2
	}
	clock := func() time.Time { return now }
	ix, problems, err := offline.Build(from, cfg.trimmer(), cfg.indexConfig(clock, nil))
	reportProblems(stderr, problems)
	if err != nil {
		fmt.Fprintln(stderr, "dra-exporter snapshot:", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	out, err := collector.Render(collector.NewExporter(ix, clock, false, logger, collectors...))
	if err != nil {
		fmt.Fprintln(stderr, "dra-exporter snapshot:", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		return 1
	}
	return 0
}

func parseNow(s string) (time.Time, error) {
	if s == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--now: %w", err)
	}
	return t, nil
}

// reportProblems lists skipped objects; objects of kinds the exporter does
// not use are summed up rather than listed.
func reportProblems(w io.Writer, problems []objects.Problem) {
	ignored := 0
	for _, p := range problems {
		if errors.Is(p.Err, objects.ErrIgnoredKind) {
			ignored++
			continue
		}
		fmt.Fprintln(w, "skipped:", p)
	}
	if ignored > 0 {
		fmt.Fprintf(w, "skipped %d objects of kinds dra-exporter does not use\n", ignored)
	}
}

var _ collector.Source = (*index.Index)(nil)
