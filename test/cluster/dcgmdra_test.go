package cluster

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DCGMWithDRA copies a held GPU's series once per holding container with
// dcgm-exporter's DRA labels (replacing its own device-independent ones of
// the same name), and leaves a GPU nobody holds as it is.
func TestDCGMWithDRA(t *testing.T) {
	page := []byte(`# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",device="nvidia0",Hostname="n1"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",device="nvidia1",Hostname="n1"} 5
`)
	holders := map[string][]DRAHolder{
		"GPU-a": {
			{Namespace: "llm", Pod: "p", Container: "vllm", ClaimNamespace: "llm", ClaimName: "c", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0"},
			{Namespace: "llm", Pod: "p", Container: "sidecar", ClaimNamespace: "llm", ClaimName: "c", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0"},
			{Namespace: "v", Pod: "m", Container: "app", ClaimNamespace: "v", ClaimName: "mig", Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-0-mig-1g10gb-19-0", MIGProfile: "1g.10gb", MIGUUID: "MIG-x"},
		},
	}
	out, err := DCGMWithDRA(page, holders)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]float64{}
	for _, m := range families["DCGM_FI_DEV_GPU_UTIL"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		got[l["UUID"]+" "+l["pod"]+"/"+l["container"]+" "+l["dra_claim_name"]+" "+l["device"]+" "+l["dra_device_name"]+" "+l["dra_mig_profile"]] = m.GetGauge().GetValue()
	}
	want := map[string]float64{
		"GPU-a p/vllm c nvidia0 gpu-0 ":                         80,
		"GPU-a p/sidecar c nvidia0 gpu-0 ":                      80,
		"GPU-a m/app mig nvidia0 gpu-0-mig-1g10gb-19-0 1g.10gb": 80,
		"GPU-b /  nvidia1  ":                                    5,
	}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %v (present %v), want %v; all: %v", k, got[k], got[k] != 0, v, got)
		}
	}
	if _, err := DCGMWithDRA([]byte("not a page {"), nil); err == nil {
		t.Error("a page that does not parse: no error")
	}
}
