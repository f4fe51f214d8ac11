// Package nvidia is the one definition of the NVIDIA DRA driver's object
// shape (kubernetes-sigs/dra-driver-nvidia-gpu) that the test fixtures, the
// simulated nodes of the e2e harness and demo, the benchmark generator and
// the fuzz target build on: driver gpu.nvidia.com, one pool per node named
// after the node, devices gpu-<minor> and
// gpu-<parentMinor>-mig-<profile>-<profileID>-<placementStart> with the
// attributes the driver publishes, its health taints, and the DeviceClasses
// its Helm chart installs.
//
// Read from the driver's source, kubernetes-sigs/dra-driver-nvidia-gpu at
// 9593204 (August 2026; NVIDIA/k8s-dra-driver-gpu before the move), files
// under cmd/gpu-kubelet-plugin/; the line numbers cited are that commit's.
//
// It is a leaf: nothing in the exporter depends on it, which reads any
// driver's slices.
package nvidia

import (
	"fmt"
	"maps"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the driver, its classes and the extended resource the GPU class
// serves.
const (
	Driver           = "gpu.nvidia.com"
	GPUClass         = "gpu.nvidia.com"
	MIGClass         = "mig.nvidia.com"
	ExtendedResource = "nvidia.com/gpu"

	GPUClassSelector = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
	MIGClassSelector = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
)

// Products the fixtures use, as the driver writes productName.
const (
	H100 = "NVIDIA H100 80GB HBM3"
	H200 = "NVIDIA H200 141GB HBM3e"
	A100 = "NVIDIA A100-SXM4-40GB"
	L4   = "NVIDIA L4"
)

// DriverVersion is the NVIDIA driver version the fixtures publish, and
// CUDADriverVersion the CUDA version that driver supports.
const (
	DriverVersion     = "580.65.6"
	CUDADriverVersion = "13.0.0"
)

type product struct {
	memory, architecture, cc string
}

var products = map[string]product{
	H100: {"80Gi", "Hopper", "9.0.0"},
	H200: {"141Gi", "Hopper", "9.0.0"},
	A100: {"40Gi", "Ampere", "8.0.0"},
	L4:   {"24Gi", "Ada Lovelace", "8.9.0"},
}

func productOf(name string) product {
	if p, ok := products[name]; ok {
		return p
	}
	return products[H100]
}

// Classes returns the DeviceClasses the driver's chart installs:
// gpu.nvidia.com, which also serves the extended resource nvidia.com/gpu,
// and mig.nvidia.com.
func Classes() []*resourceapi.DeviceClass {
	extended := ExtendedResource
	return []*resourceapi.DeviceClass{
		{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: GPUClass},
			Spec: resourceapi.DeviceClassSpec{
				Selectors:            CEL(GPUClassSelector),
				ExtendedResourceName: &extended,
			},
		},
		{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: MIGClass},
			Spec:       resourceapi.DeviceClassSpec{Selectors: CEL(MIGClassSelector)},
		},
	}
}

// CEL returns device selectors of the expressions.
func CEL(exprs ...string) []resourceapi.DeviceSelector {
	out := make([]resourceapi.DeviceSelector, len(exprs))
	for i, e := range exprs {
		out[i] = resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}}
	}
	return out
}

func str(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
func version(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: &s}
}

// GPUDevice is a full GPU as the driver publishes it (GpuInfo.Attributes,
// deviceinfo.go:170-218): type gpu, uuid, productName, brand, architecture,
// cudaComputeCapability, driverVersion and cudaDriverVersion, and its memory
// as capacity (by product; an unknown product gets an H100's). The driver
// publishes no index or minor attribute since v25.12.0 (NVIDIA commits
// 36fc80ab and 50d90da0): a GPU's minor number is in its name only.
func GPUDevice(name, uuid, productName string) resourceapi.Device {
	return device(name, "gpu", uuid, productName, productOf(productName).memory)
}

// device has the attributes every device type shares.
func device(name, typ, uuid, productName, memory string) resourceapi.Device {
	p := productOf(productName)
	return resourceapi.Device{
		Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":                  str(typ),
			"uuid":                  str(uuid),
			"productName":           str(productName),
			"brand":                 str("Nvidia"),
			"architecture":          str(p.architecture),
			"cudaComputeCapability": version(p.cc),
			"driverVersion":         version(DriverVersion),
			"cudaDriverVersion":     version(CUDADriverVersion),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse(memory)},
		},
	}
}

// PCIBusIDAttribute is the standard attribute the driver publishes a GPU's
// PCI address under (k8s.io/dynamic-resource-allocation/deviceattribute,
// set from GetPCIBusIDAttribute in nvlib.go:547), on the GPU and on each of
// its MIG devices (mig.go:176-178).
const PCIBusIDAttribute = "resource.kubernetes.io/pciBusID"

// WithMinor adds what a host gives a GPU beside its minor number: its PCI
// bus ID. (The name carries the minor: DeviceName.)
func WithMinor(d resourceapi.Device, minor int) resourceapi.Device {
	d.Attributes[PCIBusIDAttribute] = str(PCIBusID(minor))
	return d
}

// PCIBusID is the PCI address the fixtures give the GPU with this minor.
func PCIBusID(minor int) string { return fmt.Sprintf("0000:%02x:00.0", 0x1b+minor) }

// DeviceName is the driver's name of the GPU with this minor number
// (GpuInfo.CanonicalName, deviceinfo.go:124-126).
func DeviceName(minor int) string { return fmt.Sprintf("gpu-%d", minor) }

// MIGName is the driver's name of a MIG device (MigSpecTuple.ToCanonicalName,
// mig.go:111-114): the parent's minor, the profile without dots and made
// RFC 1123 compliant (toRFC1123Compliant, mig.go:249-262: lower case, any
// other character than a-z, 0-9, '-' and '.' becomes '-', so 1g.10gb+me is
// 1g10gb-me), the GPU instance profile ID and the placement's start memory
// slice. The same name for a static MIG device and a partitionable
// placement.
func MIGName(parentMinor int, profile string, profileID, placementStart int) string {
	p := strings.ToLower(strings.ReplaceAll(profile, ".", ""))
	p = strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, p), "-")
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", parentMinor, p, profileID, placementStart)
}

// ProfileIDs are the GPU instance profile IDs NVML gives each MIG profile
// (nvmlGpuInstanceProfileInfo_t.id, what `nvidia-smi mig -lgip` lists as
// ID), per product; the driver puts the ID in the device name
// (MigSpec.Tuple, mig.go:93-100). The ID follows the profile's shape, so
// 1g.10gb is 15 on an A100-40GB (two memory slices) and 19 on an H100.
var ProfileIDs = map[string]map[string]int{
	A100: {"1g.5gb": 19, "1g.5gb+me": 20, "1g.10gb": 15, "2g.10gb": 14, "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0},
	H100: {"1g.10gb": 19, "1g.10gb+me": 20, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "4g.40gb": 5, "7g.80gb": 0},
}

// ProfileID is the GPU instance profile ID of a product's MIG profile; it
// panics on a pair the fixtures do not know, a bug in a test.
func ProfileID(productName, profile string) int {
	id, ok := ProfileIDs[productName][profile]
	if !ok {
		panic(fmt.Sprintf("nvidia: no GPU instance profile ID for %s on %s", profile, productName))
	}
	return id
}

// MIGDevice is a MIG instance (MigDeviceInfo.GetDevice, deviceinfo.go:258-281,
// and CommonAttributesMig, mig.go:139-187): type mig, its own uuid, the
// parent GPU's parentUUID, the profile and the parent's product attributes,
// and the instance's memory.
func MIGDevice(name, uuid, parentUUID, profile, productName, memory string) resourceapi.Device {
	d := device(name, "mig", uuid, productName, memory)
	d.Attributes["parentUUID"] = str(parentUUID)
	d.Attributes["profile"] = str(profile)
	return d
}

// Slice is the ResourceSlice the driver publishes for a node: pool = node
// name, one slice per pool.
func Slice(name, node string, generation int64, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   Driver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// Placement is a MIG placement of a partitionable GPU (KEP-4815): a
// profile at a start memory slice, covering size memory slices.
type Placement struct {
	Profile   string // "3g.20gb"
	ProfileID int    // the GPU instance profile ID, ProfileIDs
	Start     int
	Size      int
	Memory    string
}

// A100Placements are a few of an A100-40GB's placements, chosen to
// overlap: 4g.20gb and the first 3g.20gb take memory slices 0-3, the
// second 3g.20gb slices 4-7, and 1g.5gb slice 6.
var A100Placements = []Placement{
	{Profile: "4g.20gb", ProfileID: 5, Start: 0, Size: 4, Memory: "20Gi"},
	{Profile: "3g.20gb", ProfileID: 9, Start: 0, Size: 4, Memory: "20Gi"},
	{Profile: "3g.20gb", ProfileID: 9, Start: 4, Size: 4, Memory: "20Gi"},
	{Profile: "1g.5gb", ProfileID: 19, Start: 6, Size: 1, Memory: "5Gi"},
}

// memorySlices is how many memory slices an A100 has.
const memorySlices = 8

// CounterSetName is the counter set of the GPU with this minor number
// (GpuInfo.GetSharedCounterSetName, partitions.go:62-64); its memory slices
// are counters memory-slice-<i> (memsliceCounterName, partitions.go:251-253).
func CounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counter-set", minor) }

// PlacementName is the driver's name of a placement of a GPU.
func PlacementName(minor int, p Placement) string {
	return MIGName(minor, p.Profile, p.ProfileID, p.Start)
}

// PartitionableSlices are the two slices a node of partitionable A100s
// publishes, as the API requires them (a slice has devices or shared
// counters, never both): one with a counter set per GPU (memory and its
// eight memory slices), one with each whole GPU and its placements, which
// consume the memory slices they cover. The pool is the node, with
// resourceSliceCount 2. uuids are the GPUs' UUIDs, by minor number.
func PartitionableSlices(node string, generation int64, uuids ...string) []*resourceapi.ResourceSlice {
	counters := Slice(node+"-"+Driver+"-counters", node, generation)
	devices := Slice(node+"-"+Driver+"-devices", node, generation)
	for minor, uuid := range uuids {
		set := CounterSetName(minor)
		all := map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(productOf(A100).memory)}}
		for i := range memorySlices {
			all[fmt.Sprintf("memory-slice-%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
		}
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourceapi.CounterSet{Name: set, Counters: all})
		gpu := WithMinor(GPUDevice(DeviceName(minor), uuid, A100), minor)
		gpu.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: maps.Clone(all)}}
		devices.Spec.Devices = append(devices.Spec.Devices, gpu)
		for _, p := range A100Placements {
			d := device(PlacementName(minor, p), "mig", "", A100, p.Memory)
			delete(d.Attributes, "uuid") // a placement has no MIG device (and UUID) until it is prepared
			d.Attributes["parentUUID"] = str(uuid)
			d.Attributes["profile"] = str(p.Profile)
			use := map[string]resourceapi.Counter{"memory": {Value: resource.MustParse(p.Memory)}}
			for i := p.Start; i < p.Start+p.Size; i++ {
				use[fmt.Sprintf("memory-slice-%d", i)] = resourceapi.Counter{Value: resource.MustParse("1")}
			}
			d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: use}}
			devices.Spec.Devices = append(devices.Spec.Devices, d)
		}
	}
	counters.Spec.Pool.ResourceSliceCount = 2
	devices.Spec.Pool.ResourceSliceCount = 2
	return []*resourceapi.ResourceSlice{counters, devices}
}
