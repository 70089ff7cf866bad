package tier

import (
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peekWorks: Linux tells, without blocking, whether a socket holds a byte
// or a close for its reader (recv with MSG_PEEK|MSG_DONTWAIT).
const peekWorks = true

// peekCall is one peek: its buffer and the function RawConn.Control runs,
// made once, so that a check allocates nothing.
type peekCall struct {
	buf   [1]byte
	empty bool
	fn    func(fd uintptr)
}

var peekCalls = sync.Pool{New: func() any {
	c := new(peekCall)
	c.fn = func(fd uintptr) {
		// It cannot block (MSG_DONTWAIT): no scheduler bookkeeping.
		_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.buf[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		c.empty = errno == unix.EAGAIN
	}
	return c
}}

// socketEmpty reports whether rc's socket holds nothing for its reader: no
// byte, no close, no error (a FIN reads as 0 bytes, a reset as an error).
func socketEmpty(rc syscall.RawConn) bool {
	c := peekCalls.Get().(*peekCall)
	c.empty = false
	err := rc.Control(c.fn)
	empty := err == nil && c.empty
	peekCalls.Put(c)
	return empty
}

// tcpInfoWorks: Linux reports the bytes a TCP socket received (since 4.1)
// and its state.
const tcpInfoWorks = true

// tcpInfoCall is one getsockopt(TCP_INFO): its buffer and the function
// RawConn.Control runs, made once, so that a check allocates nothing.
type tcpInfoCall struct {
	info unix.TCPInfo
	ok   bool
	fn   func(fd uintptr)
}

var tcpInfoCalls = sync.Pool{New: func() any {
	c := new(tcpInfoCall)
	c.fn = func(fd uintptr) {
		n := uint32(unsafe.Sizeof(c.info))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
			uintptr(unsafe.Pointer(&c.info)), uintptr(unsafe.Pointer(&n)), 0)
		// A kernel before 4.1 returns a shorter struct, without the count.
		c.ok = errno == 0 && uintptr(n) >= unsafe.Offsetof(c.info.Bytes_received)+unsafe.Sizeof(c.info.Bytes_received)
	}
	return c
}}

// bytesReceived returns the bytes the kernel received on rc's socket
// (tcpi_bytes_received), and false when it cannot tell or the connection
// is no longer established (a FIN or a reset is no byte, yet it ends the
// reports).
func bytesReceived(rc syscall.RawConn) (uint64, bool) {
	c := tcpInfoCalls.Get().(*tcpInfoCall)
	c.ok = false
	err := rc.Control(c.fn)
	got := c.info.Bytes_received
	ok := err == nil && c.ok && c.info.State == unix.BPF_TCP_ESTABLISHED
	tcpInfoCalls.Put(c)
	return got, ok
}
