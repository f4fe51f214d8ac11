package collector_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/index"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// The conditions a driver writes into a claim's status.devices, one-hot
// over their status; a device listed twice (two shares) is written once,
// and a claim without status.devices has no series.
func TestClaimDeviceConditions(t *testing.T) {
	attaching := Allocated(Claim("attaching", "uid-a"), "node-1", T0, Result("gpu", "node-1", "gpu-0"))
	attaching.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
		Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0",
		Conditions: []metav1.Condition{
			{Type: "gpu.example.com/attached", Status: metav1.ConditionFalse, Reason: "Attaching"},
			{Type: "Ready", Status: metav1.ConditionUnknown},
		},
	}}
	shared := Allocated(Claim("shared", "uid-s"), "node-1", T0, Result("gpu", "node-1", "gpu-1"), Result("gpu2", "node-1", "gpu-1"))
	shared.Status.Devices = []resourceapi.AllocatedDeviceStatus{
		{Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-1", ShareID: Ptr("a"),
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
		{Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-1", ShareID: Ptr("b"),
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}},
	}
	plain := Allocated(Claim("plain", "uid-p"), "node-1", T0, Result("gpu", "node-1", "gpu-2"))
	ix := Build(t, index.Config{}, GPUClass(),
		Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1"), GPUDevice("gpu-2", "GPU-2")),
		attaching, shared, plain)
	exp := exporterFor(ix, collector.NewClaimDeviceCollector())
	row := func(claim, device, cond string, t, f, u int) []string {
		l := `{claim="` + claim + `",condition="` + cond + `",device="` + device + `",driver="gpu.nvidia.com",namespace="prod",pool="node-1",status="`
		return []string{l + `false"} ` + strconv.Itoa(f), l + `true"} ` + strconv.Itoa(t), l + `unknown"} ` + strconv.Itoa(u)}
	}
	var samples []string
	samples = append(samples, row("attaching", "gpu-0", "Ready", 0, 0, 1)...)
	samples = append(samples, row("attaching", "gpu-0", "gpu.example.com/attached", 0, 1, 0)...)
	samples = append(samples, row("shared", "gpu-1", "Ready", 1, 0, 0)...)
	compareAndLint(t, exp, expect(exp.Defs(), fam("dra_claim_device_condition", samples...)))

	// A driver that clears the conditions takes the series away.
	attaching = attaching.DeepCopy()
	attaching.Status.Devices = nil
	Upsert(t, ix, attaching, true)
	want := expect(exp.Defs(), fam("dra_claim_device_condition", row("shared", "gpu-1", "Ready", 1, 0, 0)...))
	if err := testutil.CollectAndCompare(exp, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
