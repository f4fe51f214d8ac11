package node

// The DRA driver on the node: kubernetes-sigs' dra-example-driver's
// kubelet plugin, its features and its DeviceClass.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// DriverFeatures are dra-example-driver v0.4.0's optional features, set
// through the environment variables of its flags
// (cmd/dra-example-kubeletplugin/main.go) and published as its GPU profile
// does (internal/profiles/gpu/gpu.go, EnumerateDevices).
type DriverFeatures struct {
	// Partitions per GPU (GPU_PARTITIONS, KEP-4815): each GPU becomes a
	// counter set, Partitions devices gpu-<i>-partition-<j> and one
	// gpu-<i>-full, all drawing on its counters.
	Partitions int
	// MultipleAllocations (GPU_ALLOW_MULTIPLE_ALLOCATIONS, KEP-5075): every
	// device may be allocated to several requests, each consuming part of
	// its memory and compute capacity.
	MultipleAllocations bool
	// BindingConditions (BINDING_CONDITIONS, KEP-5007): every device carries
	// the binding condition "BindingConditions" (and failure condition
	// "BindingFailureConditions"), which the example controller satisfies.
	BindingConditions bool
}

// devices is how many devices the driver publishes with these features.
func (f DriverFeatures) devices(gpus int) int {
	if f.Partitions > 0 {
		return gpus * (f.Partitions + 1)
	}
	return gpus
}

// StartDriver starts the DRA driver (again, after StopDriver) with its
// default features and waits until its ResourceSlice is published.
func (n *Node) StartDriver(ctx context.Context) error {
	return n.StartDriverWith(ctx, DriverFeatures{})
}

// StartDriverWith starts the DRA driver with features and waits until it
// publishes the devices they give (a slice of the former driver, published
// before, does not count).
func (n *Node) StartDriverWith(ctx context.Context, f DriverFeatures) error {
	health, err := cluster.FreePort()
	if err != nil {
		return err
	}

	if err := os.MkdirAll(CDIRoot, 0o755); err != nil {
		return err
	}
	env := []string{
		"NODE_NAME=" + n.Name,
		"CDI_ROOT=" + CDIRoot,
		"NUM_DEVICES=" + strconv.Itoa(n.devices),
		"KUBECONFIG=" + n.CP.Kubeconfig,
		"DEVICE_PROFILE=gpu",
		"HEALTHCHECK_PORT=" + strconv.Itoa(health),
		"METRICS_PORT=" + strconv.Itoa(n.driverMetricsPort),
		"GPU_PARTITIONS=" + strconv.Itoa(f.Partitions),
		"GPU_ALLOW_MULTIPLE_ALLOCATIONS=" + strconv.FormatBool(f.MultipleAllocations),
		"BINDING_CONDITIONS=" + strconv.FormatBool(f.BindingConditions),
	}
	if err := n.spawn("dra-example-kubeletplugin", n.Bins.Driver, env); err != nil {
		return err
	}
	want := f.devices(n.devices)
	return n.waitFor(ctx, "dra-example-kubeletplugin", "the driver's ResourceSlice", 60*time.Second, func() error {
		slices, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String(),
		})
		if err != nil {
			return err
		}
		for _, s := range slices.Items {
			if s.Spec.Driver != Driver || len(s.Spec.Devices) != want {
				continue
			}
			d := s.Spec.Devices[0]
			if ptr.Deref(d.AllowMultipleAllocations, false) == f.MultipleAllocations && (len(d.BindingConditions) > 0) == f.BindingConditions {
				return nil
			}
		}
		return fmt.Errorf("no slice of %s with %d devices of features %+v yet (%d slices)", Driver, want, f, len(slices.Items))
	})
}

// DriverMetricsTarget is the address (host:port) of the driver's own
// /metrics (dra_example_driver_*), served on the node's address.
func (n *Node) DriverMetricsTarget() string {
	return net.JoinHostPort(n.IP, strconv.Itoa(n.driverMetricsPort))
}

// StopDriver stops the DRA driver; its ResourceSlice stays published.
func (n *Node) StopDriver() { n.stop("dra-example-kubeletplugin") }

// createDeviceClass creates the example driver's DeviceClass, as its Helm
// chart does.
func (n *Node) createDeviceClass(ctx context.Context) error {
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: "device.driver == '" + Driver + "'"},
		}}},
	}
	_, err := n.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
