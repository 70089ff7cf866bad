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

// readyWatch returns an epoll instance of the fence's own, on which rc's
// socket is registered level-triggered for a byte, a close or an error
// (the runtime's poller has its own, edge-triggered, which it alone may
// drain); -1 when none can be made (the peek is asked then). Asking it
// with a zero timeout costs about half a peek (BenchmarkFenceCheck): while
// nothing arrived since the last time it was found empty, the kernel
// answers from the instance's ready list without looking at the socket,
// and the socket's wake-up puts it on that list as it queues a byte, a FIN
// or a reset.
func readyWatch(rc syscall.RawConn) int {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1
	}
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
		cerr = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		_ = unix.Close(epfd)
		return -1
	}
	return epfd
}

// readyEmpty reports whether the epoll instance epfd (readyWatch) has
// nothing ready: its socket holds no byte, no close and no error, or is
// closed (the instance then forgets it: see fenceConn.closed).
func readyEmpty(epfd int) bool {
	var ev [1]unix.EpollEvent
	// It cannot block (a zero timeout): no scheduler bookkeeping.
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&ev[0])), 1, 0, 0, 0)
	return errno == 0 && n == 0
}

// closeWatch closes an epoll instance of readyWatch.
func closeWatch(epfd int) { _ = unix.Close(epfd) }

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

// readOnce is one read(2) of the socket, for RawConn.Read. The reader's
// state says "reading" before the system call, so a hit that saw it wait
// and then found the socket empty knows no byte was taken meanwhile; and
// "waiting" only after the kernel had nothing.
func (c *fenceConn) readOnce(fd uintptr) bool {
	for {
		c.gen++
		c.state.Store(c.gen << 1)
		n, err := syscall.Read(int(fd), c.p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.state.Store(c.gen<<1 | 1)
			return false
		}
		c.n, c.err = max(n, 0), err
		return true
	}
}

// shutdownSocket ends rc's connection at once (a FIN to the peer), for a
// socket that something besides its descriptor holds: close(2) alone
// would end it only once that lets go (an io_uring poll: arrivals).
func shutdownSocket(rc syscall.RawConn) {
	_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
}
