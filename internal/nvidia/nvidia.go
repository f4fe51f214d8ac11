// Package nvidia is the one definition of the NVIDIA DRA driver's object
// shape (kubernetes-sigs/dra-driver-nvidia-gpu) that the test fixtures, the
// simulated nodes of the e2e harness and demo, the benchmark generator and
// the fuzz target build on: driver gpu.nvidia.com, one pool per node named
// after the node, devices gpu-<minor> with the attributes the driver
// publishes, and the DeviceClasses its Helm chart installs.
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

// DriverVersion is the NVIDIA driver version the fixtures publish.
const DriverVersion = "580.65.6"

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
func integer(i int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &i} }

// GPUDevice is a full GPU as the driver publishes it: type gpu, uuid,
// productName, brand, architecture, CUDA compute capability and driver
// version, and its memory as capacity (by product; an unknown product gets
// an H100's).
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
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse(memory)},
		},
	}
}

// WithMinor adds what the driver publishes from a GPU's minor number: index,
// minor and the PCI bus ID.
func WithMinor(d resourceapi.Device, minor int) resourceapi.Device {
	d.Attributes["index"] = integer(int64(minor))
	d.Attributes["minor"] = integer(int64(minor))
	d.Attributes["resource.kubernetes.io/pciBusID"] = str(fmt.Sprintf("0000:%02x:00.0", 0x1b+minor))
	return d
}

// DeviceName is the driver's name of the GPU with this minor number.
func DeviceName(minor int) string { return fmt.Sprintf("gpu-%d", minor) }

// MIGDevice is a MIG instance: type mig, its own uuid, the parent GPU's
// parentUUID, the profile and the instance's memory.
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
	Profile string // "3g.20gb"
	Start   int
	Size    int
	Memory  string
}

// A100Placements are a few of an A100-40GB's placements, chosen to
// overlap: 4g.20gb and the first 3g.20gb take memory slices 0-3, the
// second 3g.20gb slices 4-7, and 1g.5gb slice 6.
var A100Placements = []Placement{
	{Profile: "4g.20gb", Start: 0, Size: 4, Memory: "20Gi"},
	{Profile: "3g.20gb", Start: 0, Size: 4, Memory: "20Gi"},
	{Profile: "3g.20gb", Start: 4, Size: 4, Memory: "20Gi"},
	{Profile: "1g.5gb", Start: 6, Size: 1, Memory: "5Gi"},
}

// memorySlices is how many memory slices an A100 has.
const memorySlices = 8

// CounterSetName is the counter set of the GPU with this minor number.
func CounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counter-set", minor) }

// PlacementName is the driver's name of a placement of a GPU.
func PlacementName(minor int, p Placement) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, strings.ReplaceAll(p.Profile, ".", ""), p.Size, p.Start)
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
