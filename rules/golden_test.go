package rules

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// TestRulesOnGoldenScenarios evaluates the bundle, with every `for:` set to
// 0s as the e2e test does, over the exposition the exporter renders for each
// golden scenario (testdata/*/metrics.prom), and checks that the claim, pod
// and DeviceClass alerts fire for exactly the series that call for them,
// with the series' labels. It ties the rules to what the exporter really
// emits: a renamed label or reason breaks it.
func TestRulesOnGoldenScenarios(t *testing.T) {
	bin := promtool(t)
	scenarios, _ := filepath.Glob("../testdata/*/metrics.prom")
	if len(scenarios) == 0 {
		t.Fatal("no golden scenarios in testdata/*/metrics.prom")
	}
	dir := t.TempDir()
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		raw = zeroForRE.ReplaceAll(raw, []byte("${1}for: 0s"))
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	alertNames := slices.Sorted(func(yield func(string) bool) {
		for name := range alertsOf(loadBundle(t)) {
			if !yield(name) {
				return
			}
		}
	})

	// One promtool test group per scenario; each expects silence from every
	// alert at 2m, so promtool prints what fires.
	type alertTest struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []any  `yaml:"exp_alerts"`
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type group struct {
		Name          string      `yaml:"name"`
		Interval      string      `yaml:"interval"`
		InputSeries   []series    `yaml:"input_series"`
		AlertRuleTest []alertTest `yaml:"alert_rule_test"`
	}
	var groups []group
	want := map[string]map[string]bool{} // scenario -> expected alert keys
	for _, path := range scenarios {
		name := filepath.Base(filepath.Dir(path))
		samples := readExposition(t, path)
		g := group{Name: name, Interval: "1m"}
		// The exporter is up: DRAExporterDown would fire otherwise.
		g.InputSeries = append(g.InputSeries, series{`up{job="dra-exporter", instance="dra-exporter:9877"}`, "1x3"})
		for _, s := range samples {
			g.InputSeries = append(g.InputSeries, series{s.text, strings.Repeat(s.value+" ", 3) + s.value})
		}
		for _, a := range alertNames {
			g.AlertRuleTest = append(g.AlertRuleTest, alertTest{EvalTime: "2m", Alertname: a, ExpAlerts: []any{}})
		}
		groups = append(groups, g)
		want[name] = expectedGoldenAlerts(samples)
	}
	testFile := map[string]any{
		"rule_files":          files,
		"evaluation_interval": "1m",
		"group_eval_order":    groupNames(t),
		"tests":               groups,
	}
	raw, err := yaml.Marshal(testFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "golden_test.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := runPromtool(t, bin, dir, "test", "rules", "golden_test.yaml")
	if strings.Contains(out, "many-to-many") {
		t.Fatalf("rule evaluation failed on a golden scenario:\n%s", out)
	}

	got := firedAlerts(out)
	for scenario, keys := range want {
		for key := range keys {
			if !got[scenario][key] {
				t.Errorf("%s: expected alert %s, it did not fire", scenario, key)
			}
		}
		for key := range got[scenario] {
			if keys[key] {
				continue
			}
			alert, _, _ := strings.Cut(key, "{")
			if !unassertedGoldenAlerts[alert] {
				t.Errorf("%s: unexpected alert %s", scenario, key)
			}
		}
	}
	if t.Failed() {
		t.Logf("promtool output:\n%s", out)
	}
}

// unassertedGoldenAlerts may fire on a golden scenario without this test
// predicting them: whether a class is near exhaustion depends on how full
// the scenario's cluster is.
var unassertedGoldenAlerts = map[string]bool{"DRADeviceClassNearExhaustion": true}

var zeroForRE = regexp.MustCompile(`(?m)^(\s*)for:\s*\S+\s*$`)

type sample struct {
	text   string // name{labels} as exposed
	name   string
	labels map[string]string
	value  string
}

var (
	sampleRE = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})? (\S+)$`)
	labelRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

func readExposition(t *testing.T, path string) []sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var samples []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: cannot read %q", path, line)
		}
		s := sample{text: m[1] + m[2], name: m[1], labels: parseLabels(m[2]), value: m[3]}
		samples = append(samples, s)
	}
	return samples
}

func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for _, m := range labelRE.FindAllStringSubmatch(s, -1) {
		v, err := strconv.Unquote(`"` + m[2] + `"`)
		if err != nil {
			v = m[2]
		}
		labels[m[1]] = v
	}
	return labels
}

// expectedGoldenAlerts is the specification, in Go, of the alerts a
// scenario's series call for (with for: 0s).
func expectedGoldenAlerts(samples []sample) map[string]bool {
	want := map[string]bool{}
	byLayer := map[string]string{
		"controller":  "DRAPodBlockedController",
		"scheduler":   "DRAPodBlockedScheduler",
		"node":        "DRAPodBlockedNode",
		"application": "DRAPodBlockedApplication",
	}
	classTotal := map[string]float64{}
	waitingForDevices := false
	// Pods by namespace/pod/uid: negative controls, blocked pods, pods not Ready.
	podKey := func(l map[string]string) string { return l["namespace"] + "/" + l["pod"] + "/" + l["pod_uid"] }
	controls, blocked, notReady := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, s := range samples {
		switch s.name {
		case "dra_negative_control":
			controls[podKey(s.labels)] = true
		case "dra_pod_blocked":
			blocked[podKey(s.labels)] = true
		case "dra_pod_ready":
			notReady[podKey(s.labels)] = s.value == "0"
		}
	}
	for _, s := range samples {
		v, _ := strconv.ParseFloat(s.value, 64)
		switch s.name {
		case "dra_pod_blocked":
			if v == 1 && !(s.labels["layer"] == "scheduler" && controls[podKey(s.labels)]) {
				want[alertKey(byLayer[s.labels["layer"]], "warning", s.labels)] = true
				if s.labels["reason"] == "no_devices_for_class" {
					waitingForDevices = true
				}
			}
		case "dra_negative_control":
			switch r := s.labels["reason"]; {
			case v == 0 && (r == "allocated" || r == "started"):
				want[alertKey("DRANegativeControlAllocated", "critical", s.labels)] = true
			case v == 0 && r == "matches_devices":
				want[alertKey("DRANegativeControlMatchesDevices", "warning", s.labels)] = true
			}
		case "dra_pod_gate":
			r := s.labels["reason"]
			if v == 0 && r != "scheduling_gated" && r != "allocation_retried" && notReady[podKey(s.labels)] && !blocked[podKey(s.labels)] {
				want[alertKey("DRAPodPendingUnexplained", "warning", s.labels)] = true
			}
		case "dra_claim_reservation_leak":
			if v != 1 {
				continue
			}
			switch l := s.labels; {
			case l["reason"] == "allocated_unreserved":
				want[alertKey("DRAClaimAllocatedUnreserved", "warning", l)] = true
			case l["reason"] == "pod_stuck_terminating" && l["device"] != "":
				want[alertKey("DRAPodStuckTerminating", "warning", l)] = true
			case l["reason"] == "noexecute_not_evicted":
				want[alertKey("DRAPodNotEvictedFromTaintedDevice", "warning", l)] = true
			case l["device"] != "":
				want[alertKey("DRAClaimReservationLeak", "critical", l)] = true
			case l["reason"] == "owner_missing":
				want[alertKey("DRAClaimOrphaned", "info", l)] = true
			}
		case "dra_pod_lower_priority_holders":
			if v > 0 {
				want[alertKey("DRAPodWaitsBehindLowerPriority", "warning", s.labels)] = true
			}
		case "dra_allocated_device_health":
			if s.labels["health"] == "unhealthy" && v == 1 {
				want[alertKey("DRAPodOnUnhealthyDevice", "critical", s.labels)] = true
			}
		case "dra_allocated_device_taint":
			e, taint := s.labels["effect"], s.labels["taint"]
			switch {
			case v != 1 || e != "NoSchedule" && e != "NoExecute":
			case taint == "gpu.nvidia.com/gpu-lost" || taint == "gpu.nvidia.com/xid":
				want[alertKey("DRAPodOnFailedGPU", "critical", s.labels)] = true
			default:
				want[alertKey("DRAPodOnTaintedDevice", "warning", s.labels)] = true
			}
		case "dra_device_allocation_conflict":
			if v == 1 {
				want[alertKey("DRADeviceDoubleAllocated", "critical", s.labels)] = true
			}
		case "dra_device_class_devices":
			if s.labels["state"] == "total" {
				classTotal[s.labels["device_class"]] += v
			}
		case "dra_device_class_selector_errors":
			if v > 0 {
				want[alertKey("DRADeviceClassSelectorErrors", "warning", map[string]string{"device_class": s.labels["device_class"]})] = true
			}
		case "dra_device_info":
			// The scenarios run no node agent: every node that publishes
			// a device with a GPU UUID is a GPU node without one.
			if s.labels["gpu_uuid"] != "" && s.labels["node"] != "" {
				want[alertKey("DRANodeAgentMissing", "warning", map[string]string{"node": s.labels["node"]})] = true
			}
		}
	}
	for class, total := range classTotal {
		if total == 0 && waitingForDevices {
			want[alertKey("DRADeviceClassNoDevices", "warning", map[string]string{"device_class": class})] = true
		}
	}
	return want
}

// alertKey renders an alert as name{labels} with empty labels dropped, the
// way Prometheus does, and labels sorted.
func alertKey(alert, severity string, labels map[string]string) string {
	l := map[string]string{"severity": severity}
	for k, v := range labels {
		if v != "" {
			l[k] = v
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range l {
			if !yield(k) {
				return
			}
		}
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, l[k]))
	}
	return alert + "{" + strings.Join(parts, ", ") + "}"
}

var (
	groupNameRE = regexp.MustCompile(`(?m)^\s+name: ([^,]+),\s*$`)
	gotLabelsRE = regexp.MustCompile(`(?m)^\s+Labels:(\{.*\})\s*$`)
)

// firedAlerts reads promtool's failure report (every alert was expected to
// be silent) into scenario -> alert keys.
func firedAlerts(out string) map[string]map[string]bool {
	got := map[string]map[string]bool{}
	names := groupNameRE.FindAllStringSubmatchIndex(out, -1)
	for i, m := range names {
		end := len(out)
		if i+1 < len(names) {
			end = names[i+1][0]
		}
		scenario := out[m[2]:m[3]]
		block := out[m[1]:end]
		// Only what promtool got, not what it expected (nothing).
		_, gotPart, ok := strings.Cut(block, "got:[")
		if !ok {
			continue
		}
		if got[scenario] == nil {
			got[scenario] = map[string]bool{}
		}
		for _, lm := range gotLabelsRE.FindAllStringSubmatch(gotPart, -1) {
			labels := parseLabels(lm[1])
			alert, severity := labels["alertname"], labels["severity"]
			delete(labels, "alertname")
			delete(labels, "severity")
			got[scenario][alertKey(alert, severity, labels)] = true
		}
	}
	return got
}

// groupNames lists the bundle's groups, recording groups first.
func groupNames(t *testing.T) []string {
	var recording, alerting []string
	for _, f := range loadBundle(t) {
		for _, g := range f.groups {
			if strings.HasSuffix(g.Name, ".rules") {
				recording = append(recording, g.Name)
			} else {
				alerting = append(alerting, g.Name)
			}
		}
	}
	return append(recording, alerting...)
}
