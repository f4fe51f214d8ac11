package cluster

import (
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out   string
		minor int
		err   string
	}{
		{out: "Kubernetes v1.34.5\n", minor: 34},
		{out: "Kubernetes v1.37.2", minor: 37},
		{out: "Kubernetes v1.36.0-rc.1", minor: 36},
		// An unstamped build (no -X ...version.gitVersion) cannot be told apart.
		{out: "Kubernetes v0.0.0-master+$Format:%H$", err: "not \"Kubernetes v1.<minor>.<patch>\""},
		{out: "", err: "printed \"\""},
	} {
		v, err := ParseVersion(tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseVersion(%q): error %v, want one containing %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || v.Minor != tc.minor || v.Git != strings.TrimPrefix(strings.TrimSpace(tc.out), "Kubernetes ") {
			t.Errorf("ParseVersion(%q) = %+v, %v; want minor %d", tc.out, v, err, tc.minor)
		}
	}
}

// Each release gets only the flags it knows: an unknown feature gate or
// API group version stops the component at startup.
func TestComponentFlags(t *testing.T) {
	for _, tc := range []struct {
		minor                int
		gates, runtimeConfig string
	}{
		{minor: 34},
		{minor: 35},
		{minor: 36},
		{minor: 37, gates: "GenericWorkload=true,DRAWorkloadResourceClaims=true", runtimeConfig: "scheduling.k8s.io/v1beta1=true"},
	} {
		g, r := componentFlags(Version{Minor: tc.minor})
		if g != tc.gates || r != tc.runtimeConfig {
			t.Errorf("1.%d: gates %q runtime-config %q; want %q %q", tc.minor, g, r, tc.gates, tc.runtimeConfig)
		}
	}
}

func TestVersionMissing(t *testing.T) {
	old, cur := Version{Git: "v1.34.5", Minor: 34}, Version{Git: "v1.37.2", Minor: 37}
	if msg := old.Missing(FeatureDeviceTaintRules); !strings.Contains(msg, "v1.34.5 has no DeviceTaintRules") || !strings.Contains(msg, "from 1.37") {
		t.Errorf("Missing on 1.34: %q", msg)
	}
	for _, f := range []Feature{FeaturePartitionableDevices, FeatureConsumableCapacity, FeatureBindingConditions, FeatureDeviceTaints,
		FeatureExtendedResource, FeatureDeviceTaintRules, FeatureGangScheduling, FeaturePodGroupClaims, FeatureAllocationTimestamp} {
		if msg := cur.Missing(f); msg != "" {
			t.Errorf("1.37 lacks %s: %q", f.Name, msg)
		}
		if old.Has(f) {
			t.Errorf("1.34 has %s, which its defaults leave off", f.Name)
		}
	}
}
