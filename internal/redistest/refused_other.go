//go:build !unix

package redistest

import (
	"net"
	"strconv"
	"testing"
)

// RefusedAddr returns a loopback address where a TCP connection is
// refused. Without Unix sockets to hold the port bound, it is a port a
// listener just freed (freePorts), which another listener may be handed
// later.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatalf("redistest: a refused address: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}
