// Package rules holds dra-exporter's Prometheus rule bundle: the alerting and
// recording rules in this directory's *.yaml files, their promtool unit tests
// in tests/, and Go tests that hold the bundle to its conventions (metric
// names that exist, severities, annotations, runbooks, coverage).
//
// The rule files are plain Prometheus rule files, the single source; the
// chart and the e2e test read them as they are. Files embeds them for Go
// code that loads the bundle.
package rules

import "embed"

// Files holds the rule files (*.yaml, without the tests).
//
//go:embed *.yaml
var Files embed.FS
