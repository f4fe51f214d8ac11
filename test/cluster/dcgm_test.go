package cluster

import (
	"bytes"
	"fmt"
	"sort"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The recorded dcgm-exporter page names exactly the GPUs of DemoNodes
// (DRA and device-plugin nodes) by their simulated UUIDs, in the series
// the recording rules read, so that a change to the simulation cannot leave
// the dashboards' dcgm-exporter panels silently empty.
func TestDCGMExpositionMatchesDemoGPUs(t *testing.T) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(DCGMExposition))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range DemoNodes {
		for i := 0; i < n.GPUs+n.DevicePluginGPUs; i++ {
			want = append(want, fmt.Sprintf("%s %s", n.Name, GPUUUID(n.Name, i)))
		}
	}
	sort.Strings(want)
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE"} {
		f, ok := families[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		var got []string
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got = append(got, l["Hostname"]+" "+l["UUID"])
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: GPUs\n%v\nwant those of DemoNodes\n%v", name, got, want)
		}
	}
}

// The demo's node agents read DCGMRecording: every GPU of every node, with
// the UUID the slices publish and the fields the rules read.
func TestDCGMRecordingCoversDemoNodes(t *testing.T) {
	for _, n := range DemoNodes {
		rec, err := DCGMRecording(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if want := n.GPUs + n.DevicePluginGPUs; len(rec.GPUs) != want {
			t.Fatalf("%s: %d GPUs recorded, want %d", n.Name, len(rec.GPUs), want)
		}
		for i, g := range rec.GPUs {
			if g.Index != i || g.UUID != GPUUUID(n.Name, i) {
				t.Errorf("%s: GPU %d is index %d UUID %s, want %s", n.Name, i, g.Index, g.UUID, GPUUUID(n.Name, i))
			}
			for _, f := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} {
				if _, ok := g.Fields[f]; !ok {
					t.Errorf("%s: GPU %d has no %s", n.Name, i, f)
				}
			}
		}
		if _, err := rec.Reading(); err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
	}
	if _, err := DCGMRecording("no-such-node"); err == nil {
		t.Error("a node the page does not have: no error")
	}
}
