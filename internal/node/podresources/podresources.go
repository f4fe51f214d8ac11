// Package podresources reads what the kubelet prepared for each pod from its
// pod-resources API (gRPC over a unix socket): device-plugin devices and
// DRA dynamic resources, independent of the API server.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Report is what the kubelet says it prepared.
type Report struct {
	Pods []Pod
	// Dynamic is true when any container carries dynamic resources: the
	// kubelet reports DRA (feature gate KubeletPodResourcesDynamicResources,
	// beta and on by default since 1.34). False means it reports none,
	// which is also what a kubelet with the gate off says.
	Dynamic bool
}

// Pod is one pod of the report (the API names pods by namespace and name;
// the UID comes from the API server's pod).
type Pod struct {
	Namespace, Name string
	// Devices are the device-plugin devices (resource nvidia.com/gpu, ID a
	// GPU UUID for NVIDIA's plugin).
	Devices []Device
	// Claims are the DRA devices prepared for the pod's claims.
	Claims []ClaimDevice
}

// Device is a device-plugin device of a container.
type Device struct {
	Container, Resource, ID string
}

// ClaimDevice is a device the kubelet prepared for a claim of a container.
type ClaimDevice struct {
	Container                 string
	ClaimNamespace, ClaimName string
	Driver, Pool, Device      string
}

// Client talks to one kubelet.
type Client struct {
	socket  string
	timeout time.Duration
	conn    *grpc.ClientConn
}

// ErrNoSocket says the socket does not exist (kubelet not running, the
// hostPath not mounted).
var ErrNoSocket = errors.New("pod-resources socket not found")

// NewClient returns a client of the socket; it connects lazily, so a socket
// that appears later (kubelet restart) is picked up.
func NewClient(socket string, timeout time.Duration) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("pod-resources client %s: %w", socket, err)
	}
	return &Client{socket: socket, timeout: timeout, conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List asks the kubelet for every pod's resources.
func (c *Client) List(ctx context.Context) (*Report, error) {
	if _, err := os.Stat(c.socket); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", c.socket, ErrNoSocket)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(c.conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List: %w", err)
	}
	return Convert(resp), nil
}

// Convert turns the kubelet's message into a Report, skipping empty
// entries rather than failing on them.
func Convert(resp *podresourcesv1.ListPodResourcesResponse) *Report {
	r := &Report{}
	for _, p := range resp.GetPodResources() {
		if p == nil || p.GetName() == "" {
			continue
		}
		pod := Pod{Namespace: p.GetNamespace(), Name: p.GetName()}
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					pod.Devices = append(pod.Devices, Device{Container: c.GetName(), Resource: d.GetResourceName(), ID: id})
				}
			}
			for _, dr := range c.GetDynamicResources() {
				r.Dynamic = true
				for _, cr := range dr.GetClaimResources() {
					if cr.GetDeviceName() == "" {
						continue
					}
					pod.Claims = append(pod.Claims, ClaimDevice{
						Container: c.GetName(), ClaimNamespace: dr.GetClaimNamespace(), ClaimName: dr.GetClaimName(),
						Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Device: cr.GetDeviceName(),
					})
				}
			}
		}
		r.Pods = append(r.Pods, pod)
	}
	return r
}
