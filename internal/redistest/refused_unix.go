//go:build unix

package redistest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address ("127.0.0.1:port") where a TCP
// connection is refused, for tests of a dead Redis or a dead upstream. The
// port stays bound, without listening, until the test ends, so no
// listener of this test or of another can be given it meanwhile: a port
// freed by closing a listener can be handed to the next one that asks for
// port 0 (a proxy in the same test, a server of a package running beside
// it), and the "dead" address then answers.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	// Not into the servers a test starts: marked close-on-exec before any
	// fork can copy it (syscall.ForkLock).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatalf("redistest: a socket for a refused address: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("redistest: binding a refused address: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("redistest: the refused address's port: %v", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("redistest: the refused address is a %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.Port))
}
