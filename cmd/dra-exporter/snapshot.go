package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/objects"
	"github.com/dra-exporter/dra-exporter/internal/offline"
)

func snapshot(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Prints the metrics the exporter would serve for the objects in the files (kubectl get -o yaml Lists, "+
		"multi-document YAML or JSON), without latency histograms, process and self-metrics.", stdout, stderr)
	from := app.Flag("from", "File of objects to read (repeatable).").Required().PlaceHolder("FILE").Strings()
	nowFlag := app.Flag("now", "The time to evaluate at, RFC3339 (default: now). Grace periods count to it.").PlaceHolder("RFC3339").String()
	var cfg config
	cfg.register(app)
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	now, err := parseNow(*nowFlag)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 2
	}
	collectors, err := cfg.collectors()
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 2
	}
	clock := func() time.Time { return now }
	ix, problems, err := offline.Build(*from, cfg.trimmer(), cfg.indexConfig(clock, nil))
	reportProblems(stderr, problems)
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	out, err := engine.Render(engine.NewExporter(ix, clock, false, logger, collectors...))
	if err != nil {
		fmt.Fprintln(stderr, prog+":", err)
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

// reportProblems lists skipped objects: each malformed one with its error,
// then the objects of kinds the exporter does not use (a `kubectl get all`
// has many), counted and named by file, document, item and kind.
func reportProblems(w io.Writer, problems []objects.Problem) {
	var ignored []objects.Problem
	for _, p := range problems {
		if errors.Is(p.Err, objects.ErrIgnoredKind) {
			ignored = append(ignored, p)
			continue
		}
		fmt.Fprintln(w, "skipped:", p)
	}
	if len(ignored) > 0 {
		fmt.Fprintf(w, "skipped %d objects of kinds dra-exporter does not use:\n", len(ignored))
		for _, p := range ignored {
			fmt.Fprintf(w, "  %s\n", p.Location())
		}
	}
}

var _ engine.Source = (*index.Index)(nil)
