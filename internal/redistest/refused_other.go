//go:build !unix

package redistest

import (
	"net"
	"testing"
)

// RefusedAddr returns a loopback address where a TCP connection is
// refused. Without Unix sockets to hold the port bound, it is a port a
// listener just freed, which another listener may be handed later.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: a refused address: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
