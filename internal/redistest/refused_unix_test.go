//go:build unix

package redistest

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestRefusedAddr: a dial to the address is refused, and, until the test
// ends, no listener can be given its port, neither by asking for it nor
// by asking for any port (the kernel's port-0 choice). A port freed by
// closing a listener, the way tests chose a dead address before, fails
// the first check: it can be listened on again at once.
func TestRefusedAddr(t *testing.T) {
	t.Parallel()
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("a dial to %s was accepted", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("a dial to %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener was given %s while it is held", addr)
	}
	// Many port-0 listeners at once, none of them handed the held port.
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	neverHanded(t, 2000, p)
}
