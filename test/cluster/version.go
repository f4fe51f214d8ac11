package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// OldestMinor is the oldest Kubernetes minor the exporter supports: the
// first release that serves resource.k8s.io/v1.
const OldestMinor = 34

// Version is the Kubernetes release of the control-plane binaries.
type Version struct {
	Git   string // as the binary prints it: v1.34.5
	Minor int    // 34
}

func (v Version) String() string { return v.Git }

// versionRE matches `kube-apiserver --version`: "Kubernetes v1.34.5".
var versionRE = regexp.MustCompile(`^Kubernetes (v1\.(\d+)\.\d+\S*)$`)

// ParseVersion reads the output of `kube-apiserver --version`.
func ParseVersion(out string) (Version, error) {
	m := versionRE.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return Version{}, fmt.Errorf("kube-apiserver --version printed %q, not \"Kubernetes v1.<minor>.<patch>\" (build it with `make controlplane`, which stamps the version)", strings.TrimSpace(out))
	}
	minor, err := strconv.Atoi(m[2])
	if err != nil {
		return Version{}, fmt.Errorf("kube-apiserver --version: minor %q: %w", m[2], err)
	}
	return Version{Git: m[1], Minor: minor}, nil
}

// BinaryVersion asks the kube-apiserver in binDir for its release.
func BinaryVersion(binDir string) (Version, error) {
	out, err := exec.Command(filepath.Join(binDir, "kube-apiserver"), "--version").CombinedOutput()
	if err != nil {
		return Version{}, fmt.Errorf("kube-apiserver --version: %w: %s", err, out)
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return Version{}, err
	}
	if v.Minor < OldestMinor {
		return Version{}, fmt.Errorf("control plane %s in %s: the exporter reads resource.k8s.io/v1, served from 1.%d", v, binDir, OldestMinor)
	}
	return v, nil
}

// componentFlags are the --feature-gates and --runtime-config the harness
// passes to kube-apiserver, kube-scheduler and kube-controller-manager of
// a release: each runs with its release's defaults, but for 1.37's beta
// gang scheduling (PodGroup, scheduling.k8s.io/v1beta1, served with
// --runtime-config) and PodGroup claims (DRAWorkloadResourceClaims), which
// the gang tests need. The gates of older releases are not the same
// (GenericWorkload is alpha in 1.35 and 1.36 with another API; 1.34 has
// none): an unknown gate stops the component.
func componentFlags(v Version) (gates, runtimeConfig string) {
	if v.Minor >= 37 {
		return "GenericWorkload=true,DRAWorkloadResourceClaims=true", "scheduling.k8s.io/v1beta1=true"
	}
	return "", ""
}

// Feature is a Kubernetes feature some tests need, and the first minor
// whose control plane, as the harness starts it, has it: on by default
// from that release (the history of k8s.io/kubernetes
// pkg/features/kube_features.go), or turned on by componentFlags.
type Feature struct {
	Name  string
	Since int
}

// The features the e2e tests need beyond resource.k8s.io/v1 as 1.34
// serves it by default.
var (
	FeaturePartitionableDevices = Feature{"partitionable devices (DRAPartitionableDevices, KEP-4815)", 36}
	FeatureConsumableCapacity   = Feature{"consumable capacity (DRAConsumableCapacity, KEP-5075)", 36}
	FeatureBindingConditions    = Feature{"device binding conditions (DRADeviceBindingConditions, KEP-5007)", 36}
	FeatureDeviceTaints         = Feature{"device taints on ResourceSlices (DRADeviceTaints, KEP-5055)", 36}
	FeatureExtendedResource     = Feature{"DRA-backed extended resources (DRAExtendedResource, KEP-5004)", 36}
	FeatureDeviceTaintRules     = Feature{"DeviceTaintRules in resource.k8s.io/v1 (DRADeviceTaintRules)", 37}
	FeatureGangScheduling       = Feature{"PodGroup gang scheduling (GenericWorkload, scheduling.k8s.io/v1beta1)", 37}
	FeaturePodGroupClaims       = Feature{"PodGroup resource claims (DRAWorkloadResourceClaims)", 37}
	// FeatureAllocationTimestamp: the API server keeps
	// status.allocation.allocationTimestamp only with binding conditions on.
	FeatureAllocationTimestamp = Feature{"status.allocation.allocationTimestamp (with DRADeviceBindingConditions)", 36}
)

// Has reports whether the control plane has the feature.
func (v Version) Has(f Feature) bool { return v.Minor >= f.Since }

// Missing explains why a test of f cannot run on v ("" when it can).
func (v Version) Missing(f Feature) string {
	if v.Has(f) {
		return ""
	}
	return fmt.Sprintf("Kubernetes %s has no %s: on by default from 1.%d", v, f.Name, f.Since)
}

// versionFlags are the --feature-gates and --runtime-config of the
// release (componentFlags), as command-line arguments; runtime-config only
// for kube-apiserver.
func (cp *ControlPlane) versionFlags(apiServer bool) []string {
	gates, runtimeConfig := componentFlags(cp.Version)
	var out []string
	if gates != "" {
		out = append(out, "--feature-gates="+gates)
	}
	if apiServer && runtimeConfig != "" {
		out = append(out, "--runtime-config="+runtimeConfig)
	}
	return out
}
