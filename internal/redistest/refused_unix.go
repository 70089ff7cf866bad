//go:build unix

package redistest

import (
	"net"
	"strconv"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:port") where a TCP
// connection is refused, for tests of a dead Redis or a dead upstream. The
// port stays bound, without listening and without SO_REUSEADDR, until the
// test ends, so no listener of this test or of another can be given it
// meanwhile: a port freed by closing a listener can be handed to the next
// one that asks for port 0 (a proxy in the same test, a server of a
// package running beside it), and the "dead" address then answers.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	port, h, err := bindLoopback(false)
	if err != nil {
		t.Fatalf("redistest: a refused address: %v", err)
	}
	t.Cleanup(func() { releasePorts([]portHold{h}) })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
