package tier

import (
	"net"
	"sync/atomic"
	"syscall"
)

// The fence of the in-process tier. Redis sends the report of a change to
// every listening Group in the event-loop turn that sends the writer its
// reply, so the report reaches this host before the writer can tell anyone
// the change is done. But the goroutine that applies it may run later: on
// a loaded host, milliseconds later. Meanwhile a request that another node
// answered "done" could be served the replaced copy. So the tier serves a
// copy only while every report connection is quiet: its goroutine waits in
// a Read that began after it applied every report it had read, and the
// socket has received no byte since that Read began (the kernel's count of
// bytes received, TCP_INFO on Linux). Anything else (a report being read
// or applied, bytes waiting) sends the call to Redis, as a miss of the
// tier would. It costs a hit one getsockopt per report connection (one per
// master), and nothing else.
//
// Why "began after it applied": the report goroutine reads through
// go-redis's buffered reader, which asks for more bytes only when the ones
// it holds do not make a whole message; and each message it parses is
// applied before the next is asked for. So when a Read begins, every whole
// report among the bytes read before was applied, and what remains of
// them is the start of a report the rest of which has not arrived.
//
// A connection the fence cannot watch (TLS, a Unix socket, a platform
// without TCP_INFO) leaves the tier as it was before the fence: a change
// is dropped when its report is applied, within milliseconds.

// fenceConn is a report connection's socket, watched for the fence.
type fenceConn struct {
	net.Conn
	rc syscall.RawConn
	// entered is 1 + total when the Read in progress began, 0 when no Read
	// is in progress.
	entered atomic.Uint64
	total   uint64 // bytes returned by every Read: the reading goroutine's
}

// unfenced stands for a report connection the fence cannot watch.
var unfenced = &fenceConn{}

// watch returns cn wrapped for the fence, and the fenceConn that watches
// it (unfenced when it cannot be watched).
func watch(cn net.Conn) (net.Conn, *fenceConn) {
	tc, ok := cn.(*net.TCPConn)
	if !ok || !tcpInfoWorks {
		return cn, unfenced
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return cn, unfenced
	}
	fc := &fenceConn{Conn: cn, rc: rc}
	return fc, fc
}

func (c *fenceConn) Read(p []byte) (int, error) {
	c.entered.Store(c.total + 1)
	n, err := c.Conn.Read(p)
	c.entered.Store(0)
	c.total += uint64(max(n, 0))
	return n, err
}

// Quiet reports whether every report that reached this connection's socket
// has been applied (see above); always true for unfenced.
func (c *fenceConn) Quiet() bool {
	if c == unfenced {
		return true
	}
	e := c.entered.Load()
	if e == 0 {
		return false
	}
	got, ok := bytesReceived(c.rc)
	return ok && got == e-1
}
