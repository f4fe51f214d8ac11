package collector_test

import (
	"fmt"
	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dra-exporter/dra-exporter/collector"
	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/selfmetrics"
)

// tinyCluster: node-1 publishes two H100s; llm-0 is Ready on gpu-0; llm-1
// waits for its template claim (claim_not_created); ext asks for
// nvidia.com/gpu and its claim waits for a device (capacity_exhausted);
// claim idle holds gpu-1 for nobody since 20 minutes (a leak past the 5m
// grace); dp runs on the device-plugin node; done has finished; class
// "profiled" fails on every device (no profile attribute on full GPUs).
func tinyCluster(t *testing.T) *index.Index {
	t.Helper()
	llm0 := Ready(Bound(WithClaimStatus(WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "llm-gpu"), "gpu", "llm-0-gpu"), "node-1"))
	llm0.Labels = map[string]string{"app": "llm", "team": "ml", "secret": "x"}
	llm1 := WithTemplateClaim(Pod("llm-1", "uid-llm-1"), "gpu", "llm-gpu-v2")
	llm1.Labels = map[string]string{"app": "llm"}
	ext := WithExtendedClaimStatus(WithLimit(Pod("ext", "uid-ext"), GPUResource, 1), "ext-gpu")
	dp := Running(Bound(WithLimit(Pod("dp", "uid-dp"), GPUResource, 1), "dp-node"))
	done := Finished(Bound(WithTemplateClaim(Pod("done", "uid-done"), "gpu", "t"), "node-1"), corev1.PodSucceeded)
	return Build(t, index.Config{Now: func() time.Time { return T0 }, DevicePluginResources: []string{GPUResource}},
		GPUClass(), MIGClass(), DeviceClass("profiled", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"),
		Node("node-1", 0), Node("dp-node", 4),
		Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1")),
		llm0, llm1, ext, dp, done,
		ReservedFor(Allocated(OwnedBy(Claim("llm-0-gpu", "uid-c0"), llm0, "gpu"), "node-1", T0.Add(-time.Hour), Result("gpu", "node-1", "gpu-0")), llm0),
		Allocated(CreatedAt(Claim("idle", "uid-idle"), T0.Add(-time.Hour)), "node-1", T0.Add(-20*time.Minute), Result("gpu", "node-1", "gpu-1")),
		ExtendedFor(Claim("ext-gpu", "uid-ext-gpu", Request("container-0-request-0", GPUClassName)), ext),
	)
}

// header returns the HELP and TYPE lines of a family, from its descriptor.
func header(defs []*family.Def, name string) string {
	for _, d := range defs {
		if d.Name == name {
			help := strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(d.Help)
			return fmt.Sprintf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, d.Type)
		}
	}
	return "# no family " + name + "\n"
}

// expect assembles an exposition: family name, then its sample lines.
func expect(defs []*family.Def, families ...any) string {
	var b strings.Builder
	for _, f := range families {
		switch v := f.(type) {
		case expected:
			b.WriteString(header(defs, v.name))
			for _, s := range v.samples {
				b.WriteString(v.name + s + "\n")
			}
		}
	}
	return b.String()
}

// expected is a family's name and sample lines.
type expected struct {
	name    string
	samples []string
}

func fam(name string, samples ...string) expected { return expected{name, samples} }

func exporterFor(ix *index.Index, cs ...engine.Collector) *engine.Exporter {
	return engine.NewExporter(ix, func() time.Time { return T0 }, false, slog.New(slog.DiscardHandler), cs...)
}

func compareAndLint(t *testing.T, c prometheus.Collector, want string) {
	t.Helper()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Errorf("CollectAndCompare:\n%v", err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatalf("CollectAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestCollectors(t *testing.T) {
	ix := tinyCluster(t)
	podLabels := []string{"app", "team"}
	tests := []struct {
		name     string
		c        engine.Collector
		families []any
	}{
		{"device", collector.NewDeviceCollector(collector.DefaultAttributeLabels), []any{
			fam("dra_device_info",
				`{device="gpu-0",driver="gpu.nvidia.com",gpu_uuid="GPU-0",node="node-1",parent_gpu_uuid="",pool="node-1",product="NVIDIA H100 80GB HBM3",profile="",type="gpu"} 1`,
				`{device="gpu-1",driver="gpu.nvidia.com",gpu_uuid="GPU-1",node="node-1",parent_gpu_uuid="",pool="node-1",product="NVIDIA H100 80GB HBM3",profile="",type="gpu"} 1`),
			fam("dra_device_memory_bytes",
				`{device="gpu-0",driver="gpu.nvidia.com",node="node-1",pool="node-1"} 85899345920`,
				`{device="gpu-1",driver="gpu.nvidia.com",node="node-1",pool="node-1"} 85899345920`),
		}},
		{"deviceclass", collector.NewDeviceClassCollector(), []any{
			fam("dra_device_class_devices",
				`{device_class="gpu.nvidia.com",node="node-1",state="allocated"} 2`,
				`{device_class="gpu.nvidia.com",node="node-1",state="free"} 0`,
				`{device_class="gpu.nvidia.com",node="node-1",state="total"} 2`,
				`{device_class="mig.nvidia.com",node="",state="allocated"} 0`,
				`{device_class="mig.nvidia.com",node="",state="free"} 0`,
				`{device_class="mig.nvidia.com",node="",state="total"} 0`,
				`{device_class="profiled",node="",state="allocated"} 0`,
				`{device_class="profiled",node="",state="free"} 0`,
				`{device_class="profiled",node="",state="total"} 0`),
			fam("dra_device_class_selector_errors",
				`{device_class="gpu.nvidia.com"} 0`,
				`{device_class="mig.nvidia.com"} 0`,
				`{device_class="profiled"} 2`),
			fam("dra_device_class_selector_error_info",
				`{device="gpu-0",device_class="profiled",driver="gpu.nvidia.com",node="node-1",pool="node-1"} 1`,
				`{device="gpu-1",device_class="profiled",driver="gpu.nvidia.com",node="node-1",pool="node-1"} 1`),
		}},
		{"claim", collector.NewClaimCollector(), []any{
			fam("dra_claim_info",
				`{claim="ext-gpu",lane="dra-extended",namespace="prod",pod="ext",pod_uid="uid-ext"} 1`,
				`{claim="idle",lane="dra",namespace="prod",pod="",pod_uid=""} 1`,
				`{claim="llm-0-gpu",lane="dra",namespace="prod",pod="llm-0",pod_uid="uid-llm-0"} 1`),
			fam("dra_claim_status",
				`{claim="ext-gpu",namespace="prod",state="allocated"} 0`,
				`{claim="ext-gpu",namespace="prod",state="reserved"} 0`,
				`{claim="ext-gpu",namespace="prod",state="unallocated"} 1`,
				`{claim="idle",namespace="prod",state="allocated"} 1`,
				`{claim="idle",namespace="prod",state="reserved"} 0`,
				`{claim="idle",namespace="prod",state="unallocated"} 0`,
				`{claim="llm-0-gpu",namespace="prod",state="allocated"} 0`,
				`{claim="llm-0-gpu",namespace="prod",state="reserved"} 1`,
				`{claim="llm-0-gpu",namespace="prod",state="unallocated"} 0`),
			fam("dra_claim_allocation_info",
				`{claim="idle",device="gpu-1",device_class="gpu.nvidia.com",driver="gpu.nvidia.com",gpu_uuid="GPU-1",namespace="prod",node="node-1",pool="node-1",request="gpu"} 1`,
				`{claim="llm-0-gpu",device="gpu-0",device_class="gpu.nvidia.com",driver="gpu.nvidia.com",gpu_uuid="GPU-0",namespace="prod",node="node-1",pool="node-1",request="gpu"} 1`),
			fam("dra_claim_reserved_for_info",
				`{claim="llm-0-gpu",namespace="prod",pod="llm-0",pod_uid="uid-llm-0"} 1`),
		}},
		{"blocked", collector.NewBlockedCollector(), []any{
			fam("dra_pod_blocked",
				`{claim="",device="",device_class="",layer="controller",namespace="prod",node="",pod="llm-1",pod_uid="uid-llm-1",reason="claim_not_created"} 1`,
				`{claim="ext-gpu",device="",device_class="gpu.nvidia.com",layer="scheduler",namespace="prod",node="",pod="ext",pod_uid="uid-ext",reason="capacity_exhausted"} 1`),
		}},
		{"leak", collector.NewLeakCollector(5 * time.Minute), []any{
			fam("dra_claim_reservation_leak",
				`{claim="idle",device="gpu-1",namespace="prod",node="node-1",pod="",pod_uid="",reason="allocated_unreserved"} 1`),
		}},
		{"leak within a longer grace", collector.NewLeakCollector(30 * time.Minute), nil},
		{"lane", collector.NewLaneCollector(), []any{
			fam("dra_lane_devices",
				`{device_class="gpu.nvidia.com",lane="device-plugin",node="dp-node",state="allocated"} 1`,
				`{device_class="gpu.nvidia.com",lane="device-plugin",node="dp-node",state="free"} 3`,
				`{device_class="gpu.nvidia.com",lane="device-plugin",node="dp-node",state="total"} 4`,
				`{device_class="gpu.nvidia.com",lane="dra",node="node-1",state="allocated"} 2`,
				`{device_class="gpu.nvidia.com",lane="dra",node="node-1",state="free"} 0`,
				`{device_class="gpu.nvidia.com",lane="dra",node="node-1",state="total"} 2`),
		}},
		{"pod", collector.NewPodCollector(podLabels), []any{
			fam("dra_pod_info",
				`{lane="device-plugin",namespace="prod",node="dp-node",pod="dp",pod_uid="uid-dp"} 1`,
				`{lane="dra",namespace="prod",node="",pod="llm-1",pod_uid="uid-llm-1"} 1`,
				`{lane="dra",namespace="prod",node="node-1",pod="llm-0",pod_uid="uid-llm-0"} 1`,
				`{lane="dra-extended",namespace="prod",node="",pod="ext",pod_uid="uid-ext"} 1`),
			fam("dra_pod_labels",
				`{label_app="",label_team="",namespace="prod",pod="dp",pod_uid="uid-dp"} 1`,
				`{label_app="",label_team="",namespace="prod",pod="ext",pod_uid="uid-ext"} 1`,
				`{label_app="llm",label_team="",namespace="prod",pod="llm-1",pod_uid="uid-llm-1"} 1`,
				`{label_app="llm",label_team="ml",namespace="prod",pod="llm-0",pod_uid="uid-llm-0"} 1`),
		}},
		{"pod without a label allowlist", collector.NewPodCollector(nil), []any{
			fam("dra_pod_info",
				`{lane="device-plugin",namespace="prod",node="dp-node",pod="dp",pod_uid="uid-dp"} 1`,
				`{lane="dra",namespace="prod",node="",pod="llm-1",pod_uid="uid-llm-1"} 1`,
				`{lane="dra",namespace="prod",node="node-1",pod="llm-0",pod_uid="uid-llm-0"} 1`,
				`{lane="dra-extended",namespace="prod",node="",pod="ext",pod_uid="uid-ext"} 1`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := exporterFor(ix, tt.c)
			compareAndLint(t, exp, expect(exp.Defs(), tt.families...))
		})
	}
}

func TestEmptyClusterEmitsOnlyClassRows(t *testing.T) {
	ix := Build(t, index.Config{}, MIGClass())
	exp := exporterFor(ix, collector.NewDeviceCollector(nil), collector.NewDeviceClassCollector(), collector.NewClaimCollector(),
		collector.NewBlockedCollector(), collector.NewLeakCollector(time.Minute), collector.NewLaneCollector(), collector.NewPodCollector(nil))
	compareAndLint(t, exp, expect(exp.Defs(),
		fam("dra_device_class_devices",
			`{device_class="mig.nvidia.com",node="",state="allocated"} 0`,
			`{device_class="mig.nvidia.com",node="",state="free"} 0`,
			`{device_class="mig.nvidia.com",node="",state="total"} 0`),
		fam("dra_device_class_selector_errors", `{device_class="mig.nvidia.com"} 0`),
	))
}

// Two results naming the same device under the same request (an invalid
// but possible object) must not break the scrape.
func TestDuplicateAllocationResultsDoNotFailTheScrape(t *testing.T) {
	c := Allocated(Claim("dup", "uid-dup"), "node-1", T0, Result("gpu", "node-1", "gpu-0"), Result("gpu", "node-1", "gpu-0"))
	c = ReservedFor(c, Pod("gone", "uid-gone"), Pod("gone", "uid-gone"))
	ix := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0")), c)
	exp := exporterFor(ix, collector.NewClaimCollector(), collector.NewLeakCollector(time.Minute))
	compareAndLint(t, exp, expect(exp.Defs(),
		fam("dra_claim_info", `{claim="dup",lane="dra",namespace="prod",pod="",pod_uid=""} 1`),
		fam("dra_claim_status",
			`{claim="dup",namespace="prod",state="allocated"} 0`,
			`{claim="dup",namespace="prod",state="reserved"} 1`,
			`{claim="dup",namespace="prod",state="unallocated"} 0`),
		fam("dra_claim_allocation_info",
			`{claim="dup",device="gpu-0",device_class="gpu.nvidia.com",driver="gpu.nvidia.com",gpu_uuid="GPU-0",namespace="prod",node="node-1",pool="node-1",request="gpu"} 1`),
		fam("dra_claim_reserved_for_info", `{claim="dup",namespace="prod",pod="gone",pod_uid="uid-gone"} 1`),
		fam("dra_claim_reservation_leak", `{claim="dup",device="gpu-0",namespace="prod",node="node-1",pod="gone",pod_uid="uid-gone",reason="pod_missing"} 1`),
	))
}

// A monitoring agent's admin-access allocation does not hold the GPU, and a
// PodGroup reservation is not a pod: neither appears as such.
func TestAdminAccessAndPodGroupConsumers(t *testing.T) {
	holder := ReservedFor(Allocated(Claim("serving", "uid-serving"), "node-1", T0, Result("gpu", "node-1", "gpu-0")), Pod("llm-0", "uid-llm-0"))
	admin := Result("gpu", "node-1", "gpu-0")
	admin.AdminAccess = Ptr(true)
	dcgm := ReservedFor(Allocated(Claim("dcgm", "uid-dcgm"), "node-1", T0, admin), Pod("dcgm-abcde", "uid-dcgm-pod"))
	gang := Allocated(Claim("gang", "uid-gang"), "node-1", T0, Result("gpu", "node-1", "gpu-1"))
	gang.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "pretrain", UID: "uid-group"}}
	ix := Build(t, index.Config{}, GPUClass(), Slice("node-1", "node-1", 1, GPUDevice("gpu-0", "GPU-0"), GPUDevice("gpu-1", "GPU-1")), holder, dcgm, gang)
	exp := exporterFor(ix, collector.NewClaimCollector())
	want := expect(exp.Defs(),
		fam("dra_claim_allocation_info",
			`{claim="gang",device="gpu-1",device_class="gpu.nvidia.com",driver="gpu.nvidia.com",gpu_uuid="GPU-1",namespace="prod",node="node-1",pool="node-1",request="gpu"} 1`,
			`{claim="serving",device="gpu-0",device_class="gpu.nvidia.com",driver="gpu.nvidia.com",gpu_uuid="GPU-0",namespace="prod",node="node-1",pool="node-1",request="gpu"} 1`),
		fam("dra_claim_reserved_for_info",
			`{claim="dcgm",namespace="prod",pod="dcgm-abcde",pod_uid="uid-dcgm-pod"} 1`,
			`{claim="serving",namespace="prod",pod="llm-0",pod_uid="uid-llm-0"} 1`),
	)
	if err := testutil.CollectAndCompare(exp, strings.NewReader(want), "dra_claim_allocation_info", "dra_claim_reserved_for_info"); err != nil {
		t.Error(err)
	}
}

// histogram renders the sample lines of one histogram series the way the
// text format does, from the bucket bounds and the observed values.
func histogram(labels string, bounds []float64, obs ...float64) []string {
	var out []string
	sum := 0.0
	for _, o := range obs {
		sum += o
	}
	for _, b := range append(append([]float64{}, bounds...), math.Inf(1)) {
		n := 0
		for _, o := range obs {
			if o <= b {
				n++
			}
		}
		le := fmt.Sprint(b)
		if math.IsInf(b, 1) {
			le = "+Inf"
		}
		out = append(out, fmt.Sprintf(`_bucket{%sle="%s"} %d`, labels, le, n))
	}
	l := strings.TrimSuffix(labels, ",")
	out = append(out, fmt.Sprintf(`_sum{%s} %v`, l, sum), fmt.Sprintf(`_count{%s} %d`, l, len(obs)))
	return out
}

var buckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func TestLatency(t *testing.T) {
	l := collector.NewLatency()
	var obs index.Observer = l
	obs.ObserveAllocation(GPUClassName, 300*time.Millisecond)
	obs.ObserveAllocation(GPUClassName, 4*time.Second)
	obs.ObserveRelease(GPUClassName, index.StageUnreserved, 2*time.Second)
	obs.ObservePodStartup(index.LaneDRA, index.StageReady, 45*time.Second)

	var want strings.Builder
	for _, d := range l.Defs() {
		want.WriteString(header(l.Defs(), d.Name))
		var lines []string
		switch d.Name {
		case "dra_claim_allocation_duration_seconds":
			lines = histogram(`device_class="gpu.nvidia.com",`, buckets, 0.3, 4)
		case "dra_claim_release_duration_seconds":
			lines = histogram(`device_class="gpu.nvidia.com",stage="unreserved",`, buckets, 2)
		case "dra_pod_startup_duration_seconds":
			lines = histogram(`lane="dra",stage="ready",`, buckets, 45)
		default:
			t.Fatalf("unexpected family %s", d.Name)
		}
		for _, line := range lines {
			want.WriteString(d.Name + line + "\n")
		}
	}
	compareAndLint(t, l, want.String())
	for _, d := range l.Defs() {
		if !d.Live || d.Type != "histogram" {
			t.Errorf("%s: Live=%v Type=%s, want a live histogram", d.Name, d.Live, d.Type)
		}
	}
}

func TestSelf(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := selfmetrics.NewSelf().WithClock(func() time.Time { return now })
	synced := false
	s.TrackSynced("pods", func() bool { return synced })
	s.TrackSynced("resourceclaims", func() bool { return true })
	s.TrackWatch("pods", func() (bool, time.Time) { return synced, now.Add(-90 * time.Second) })
	s.TrackWatch("resourceclaims", func() (bool, time.Time) { return true, now.Add(-time.Hour) })
	held := true
	s.TrackHeld(func() bool { return held })
	s.Event("pods", "add")
	s.Event("pods", "add")
	s.Event("pods", "delete")
	s.WatchError("resourceclaims", "unreachable")
	s.WatchError("resourceclaims", "expired")
	s.Relisted("resourceclaims")
	s.Rejected("pods")
	s.IndexRebuilt()
	s.APIServerUp(false)
	s.Served("pods", true)
	s.Served("devicetaintrules", false)
	var errs []string
	for _, r := range []string{"pods", "resourceclaims"} {
		for _, reason := range selfmetrics.WatchErrorReasons {
			v := 0
			if r == "resourceclaims" && (reason == "unreachable" || reason == "expired") {
				v = 1
			}
			errs = append(errs, fmt.Sprintf(`{reason=%q,resource=%q} %d`, reason, r, v))
		}
	}
	want := expect(s.Defs(),
		fam("dra_exporter_informer_synced", `{resource="pods"} 0`, `{resource="resourceclaims"} 1`),
		fam("dra_exporter_events_total",
			`{resource="pods",type="add"} 2`, `{resource="pods",type="delete"} 1`, `{resource="pods",type="update"} 0`,
			`{resource="resourceclaims",type="add"} 0`, `{resource="resourceclaims",type="delete"} 0`, `{resource="resourceclaims",type="update"} 0`),
		fam("dra_exporter_watch_errors_total", errs...),
		fam("dra_exporter_watch_healthy", `{resource="pods"} 0`, `{resource="resourceclaims"} 1`),
		fam("dra_exporter_watch_stale_seconds", `{resource="pods"} 90`, `{resource="resourceclaims"} 0`),
		fam("dra_exporter_relists_total", `{resource="pods"} 0`, `{resource="resourceclaims"} 1`),
		fam("dra_exporter_objects_rejected_total", `{resource="pods"} 1`),
		fam("dra_exporter_index_rebuilds_total", ` 1`),
		fam("dra_exporter_verdicts_held", ` 1`),
		fam("dra_exporter_apiserver_up", ` 0`),
		fam("dra_exporter_resource_served", `{resource="devicetaintrules"} 0`, `{resource="pods"} 1`),
	)
	compareAndLint(t, s, want)
	s.APIServerUp(true)
	synced, held = true, false
	after := expect(s.Defs(), fam("dra_exporter_informer_synced", `{resource="pods"} 1`, `{resource="resourceclaims"} 1`),
		fam("dra_exporter_watch_healthy", `{resource="pods"} 1`, `{resource="resourceclaims"} 1`),
		fam("dra_exporter_verdicts_held", ` 0`),
		fam("dra_exporter_apiserver_up", ` 1`))
	if err := testutil.CollectAndCompare(s, strings.NewReader(after), "dra_exporter_informer_synced", "dra_exporter_watch_healthy",
		"dra_exporter_verdicts_held", "dra_exporter_apiserver_up"); err != nil {
		t.Errorf("after sync: %v", err)
	}
}

func TestParseAttributeLabels(t *testing.T) {
	tests := []struct {
		spec    string
		want    []collector.AttributeLabel
		wantErr string
	}{
		{"", nil, ""},
		{" , ", nil, ""},
		{"productName=product,type", []collector.AttributeLabel{{"productName", "product"}, {"type", "type"}}, ""},
		{"productName", []collector.AttributeLabel{{"productName", "product_name"}}, ""},
		{"cudaComputeCapability", []collector.AttributeLabel{{"cudaComputeCapability", "cuda_compute_capability"}}, ""},
		{"gpu.nvidia.com/driverVersion", []collector.AttributeLabel{{"gpu.nvidia.com/driverVersion", "driver_version"}}, ""},
		{"parentUUID", []collector.AttributeLabel{{"parentUUID", "parent_uuid"}}, ""},
		{"resource.kubernetes.io/pciBusID", []collector.AttributeLabel{{"resource.kubernetes.io/pciBusID", "pci_bus_id"}}, ""},
		{"uuid=gpu-uuid", nil, "not a valid label name"},
		{"uuid=9lives", nil, "not a valid label name"},
		{"uuid=__name", nil, "not a valid label name"},
		{"uuid=", nil, "not a valid label name"},
		{"uuid=gpu_uuid", nil, "already used"},
		{"productName=node", nil, "already used"},
		{"pool", nil, "already used"},
		{"productName=product,brand=product", nil, "already used"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := collector.ParseAttributeLabels(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("ParseAttributeLabels(%q) = %v, want %v", tt.spec, got, tt.want)
			}
		})
	}
}

func TestDefaultAttributeLabelsRoundTrip(t *testing.T) {
	spec := collector.FormatAttributeLabels(collector.DefaultAttributeLabels)
	got, err := collector.ParseAttributeLabels(spec)
	if err != nil {
		t.Fatalf("the defaults do not parse: %v", err)
	}
	if !slices.Equal(got, collector.DefaultAttributeLabels) {
		t.Errorf("ParseAttributeLabels(%q) = %v, want %v", spec, got, collector.DefaultAttributeLabels)
	}
}

// Attribute labels read qualified and bare attribute names alike.
func TestDeviceCollectorAttributeForms(t *testing.T) {
	dev := GPUDevice("gpu-0", "GPU-0")
	dev.Attributes["resource.kubernetes.io/pciBusID"] = StrAttr("0000:1b:00.0")
	ix := Build(t, index.Config{}, Slice("node-1", "node-1", 1, dev))
	attrs, err := collector.ParseAttributeLabels("resource.kubernetes.io/pciBusID=pci_bus,gpu.nvidia.com/productName=product")
	if err != nil {
		t.Fatal(err)
	}
	exp := exporterFor(ix, collector.NewDeviceCollector(attrs))
	compareAndLint(t, exp, expect(exp.Defs(),
		fam("dra_device_info", `{device="gpu-0",driver="gpu.nvidia.com",gpu_uuid="GPU-0",node="node-1",pci_bus="0000:1b:00.0",pool="node-1",product="NVIDIA H100 80GB HBM3"} 1`),
		fam("dra_device_memory_bytes", `{device="gpu-0",driver="gpu.nvidia.com",node="node-1",pool="node-1"} 85899345920`),
	))
}

func TestPodLabelsAllowlistSanitized(t *testing.T) {
	p := WithTemplateClaim(Pod("llm-0", "uid-llm-0"), "gpu", "t")
	p.Labels = map[string]string{"app.kubernetes.io/name": "vllm", "9lives": "cat", "team-name": "ml", "app.kubernetes.io_name": "dup"}
	ix := Build(t, index.Config{}, p)
	exp := exporterFor(ix, collector.NewPodCollector([]string{"app.kubernetes.io/name", "9lives", "team-name", "app.kubernetes.io_name"}))
	var names []string
	for _, d := range exp.Defs() {
		if d.Name == "dra_pod_labels" {
			names = append(names, d.Labels...)
		}
	}
	sort.Strings(names)
	wantNames := []string{"label__lives", "label_app_kubernetes_io_name", "label_team_name", "namespace", "pod", "pod_uid"}
	if fmt.Sprint(names) != fmt.Sprint(wantNames) {
		t.Errorf("dra_pod_labels labels = %v, want %v (the second key mapping to label_app_kubernetes_io_name is dropped)", names, wantNames)
	}
	compareAndLint(t, exp, expect(exp.Defs(),
		fam("dra_pod_info", `{lane="dra",namespace="prod",node="",pod="llm-0",pod_uid="uid-llm-0"} 1`),
		fam("dra_pod_labels", `{label__lives="cat",label_app_kubernetes_io_name="vllm",label_team_name="ml",namespace="prod",pod="llm-0",pod_uid="uid-llm-0"} 1`),
	))
}
