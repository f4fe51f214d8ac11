package cluster

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freePort returns a loopback port that is free now, chosen below the
// kernel's ephemeral range. A port the kernel hands out for ":0" comes from
// that range, from which it also takes the source port of every outgoing
// connection: between the check and the server's bind a client may take it
// (etcd's "bind: address already in use" in a make test, with the suites'
// clients connecting all the while). Below the range only another
// listener can take it.
func freePort() (int, error) {
	low := ephemeralLow()
	for range 200 {
		if low <= minPort+1 {
			break
		}
		port := minPort + rand.IntN(low-minPort)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// minPort is the lowest port freePort picks (above the well-known and most
// registered services' ports).
const minPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 32768 when it cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) { return freePort() }
