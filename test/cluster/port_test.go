package cluster

import (
	"net"
	"strconv"
	"testing"
)

// The ports the harness hands its servers come from below the kernel's
// ephemeral range, where no outgoing connection's source port can take
// them between the check and the server's bind.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= minPort+1 {
		t.Skipf("ephemeral range starts at %d: freePort falls back to the kernel's choice", low)
	}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < minPort || port >= low {
			t.Fatalf("port %d, want one in [%d, %d)", port, minPort, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
}
