package podresources

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Server is a pod-resources server with the kubelet's message types on a
// unix socket, for tests and the demo (which have no kubelet): it serves
// whatever Set last gave it.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	Socket string
	grpc   *grpc.Server

	mu   sync.Mutex
	resp *podresourcesv1.ListPodResourcesResponse
}

// Serve listens on socket (removed first if stale).
func Serve(socket string) (*Server, error) {
	_ = os.Remove(socket)
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", socket, err)
	}
	s := &Server{Socket: socket, grpc: grpc.NewServer(), resp: &podresourcesv1.ListPodResourcesResponse{}}
	podresourcesv1.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// Set replaces what List returns.
func (s *Server) Set(resp *podresourcesv1.ListPodResourcesResponse) {
	s.mu.Lock()
	s.resp = resp
	s.mu.Unlock()
}

// Stop stops the server and removes the socket.
func (s *Server) Stop() {
	s.grpc.Stop()
	_ = os.Remove(s.Socket)
}

// List implements podresourcesv1.PodResourcesListerServer.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp, nil
}

// Get implements podresourcesv1.PodResourcesListerServer.
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.resp.GetPodResources() {
		if p.GetName() == req.GetPodName() && p.GetNamespace() == req.GetPodNamespace() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: p}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.GetPodNamespace(), req.GetPodName())
}
