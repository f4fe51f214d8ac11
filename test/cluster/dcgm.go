package cluster

import (
	_ "embed"
	"net/http"
)

// DCGMExposition is a recorded NVIDIA dcgm-exporter /metrics page (4.x
// format: gpu, UUID, pci_bus_id, device, modelName, Hostname labels) for the
// GPUs of DemoNodes, with their simulated UUIDs. The demo has no GPUs, so no
// dcgm-exporter: serving this as a static scrape target gives the recording
// rules of rules/gpu.yaml real input. Half of the GPUs are idle (0-3%) and
// half busy, so that idle allocated GPUs and activity on GPUs no claim holds
// both show. A test checks that its UUIDs are those of DemoNodes.
//
//go:embed testdata/dcgm-exporter.prom
var DCGMExposition []byte

// StaticTarget serves a fixed exposition on /metrics, as a scrape target.
type StaticTarget struct {
	Addr string // host:port
	srv  *http.Server
}

// ServeStatic serves body on 127.0.0.1 at a free port until Stop.
func ServeStatic(body []byte) (*StaticTarget, error) {
	return ServeFunc(func() ([]byte, error) { return body, nil })
}

// Stop stops serving.
func (s *StaticTarget) Stop() { _ = s.srv.Close() }
