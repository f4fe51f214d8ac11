package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/klog/v2"

	"github.com/dra-exporter/dra-exporter/internal/kube"
	"github.com/dra-exporter/dra-exporter/internal/selfmetrics"
)

// The reason label's values are the informer layer's classification.
func TestWatchErrorReasonsAgree(t *testing.T) {
	if !slices.Equal(kube.WatchErrorReasons, selfmetrics.WatchErrorReasons) {
		t.Errorf("kube classifies %v, the self-metrics export %v", kube.WatchErrorReasons, selfmetrics.WatchErrorReasons)
	}
}

// client-go's log lines (klog) come out of the exporter's logger, in its
// format, not as klog's text among them.
func TestKlogGoesThroughTheLogger(t *testing.T) {
	var out bytes.Buffer
	w := webFlags{}
	app := kingpin.New("test", "")
	w.register(app, ":0")
	if _, err := app.Parse([]string{"--log.format=json"}); err != nil {
		t.Fatal(err)
	}
	w.logger(&out)
	defer klog.ClearLogger()
	klog.InfoS("Warning: watch ended with error", "reflector", "pods", "err", "very short watch")
	klog.Flush()
	line := out.String()
	for _, want := range []string{`"msg":"Warning: watch ended with error"`, `"reflector":"pods"`} {
		if !strings.Contains(line, want) {
			t.Errorf("klog's line through the logger: %q, want %s in it", line, want)
		}
	}
}
