package node

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// forwarder serves ports on the machine's loopback and carries each
// connection to the same port on the loopback of the node's network
// namespace: what runs beside the node (the demo's exporter, Prometheus,
// API server) is reachable from the machine without changing its network.
type forwarder struct {
	netns string // /proc/<pid>/ns/net of a process in the node's namespace

	mu        sync.Mutex
	listeners map[int]net.Listener
	wg        sync.WaitGroup
}

func newForwarder(netns string) *forwarder {
	return &forwarder{netns: netns, listeners: map[int]net.Listener{}}
}

// follow serves every port the file lists, reading it again until stop.
// forwardPoll is how often the outside reads the ports asked for.
const forwardPoll = 300 * time.Millisecond

// ForwardDelay is how long after ForwardPort the machine's loopback serves
// the port: a reader that prints the URL for a person waits that long.
const ForwardDelay = 3 * forwardPoll

func (f *forwarder) follow(file string, stop <-chan struct{}) {
	for {
		if data, err := os.ReadFile(file); err == nil {
			for _, line := range strings.Fields(string(data)) {
				if port, err := strconv.Atoi(line); err == nil {
					if err := f.add(port); err != nil {
						fmt.Fprintln(os.Stderr, "real node:", err)
					}
				}
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(forwardPoll):
		}
	}
}

// add serves one port, once.
func (f *forwarder) add(port int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.listeners[port]; ok {
		return nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		f.listeners[port] = nil // said once
		return fmt.Errorf("forward port %d: %w", port, err)
	}
	f.listeners[port] = l
	f.wg.Add(1)
	go f.serve(l, port)
	return nil
}

func (f *forwarder) serve(l net.Listener, port int) {
	defer f.wg.Done()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			inside, err := f.dialInside(port)
			if err != nil {
				return
			}
			defer inside.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(inside, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, inside); done <- struct{}{} }()
			<-done
		}()
	}
}

// dialInside connects to the port from a thread that joined the node's
// network namespace; a socket keeps the namespace it was created in. The
// goroutine ends with its thread locked, so the runtime discards that thread
// rather than reuse it in the wrong namespace.
func (f *forwarder) dialInside(port int) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	out := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(f.netns)
		if err != nil {
			out <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			out <- result{err: fmt.Errorf("join the node's network namespace: %w", err)}
			return
		}
		conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		out <- result{conn, err}
	}()
	r := <-out
	return r.conn, r.err
}

func (f *forwarder) close() {
	f.mu.Lock()
	for _, l := range f.listeners {
		if l != nil {
			l.Close()
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
}
