//go:build unix

package bench

import (
	"net"
	"syscall"
)

// pendingBytes reports whether bytes wait to be read in c's socket,
// without reading them (and whatever c's read deadline says).
func pendingBytes(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
