package tier

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The fence of the in-process tier: a copy is served only while no report
// of a change could be waiting to drop it. Two checks:
//
//   - quiet: every report that reached this host was applied. Redis queues
//     the report of a change before the writer's reply, so when both share
//     a host the report is in this host's socket before the writer can tell
//     anyone the change is done; the goroutine that applies it may run
//     later (milliseconds, on a busy process). The reader is quiet while it
//     waits in a Read that began after it applied every report it read
//     (go-redis's buffered reader asks for more bytes only when those it
//     holds do not make a whole message), and the kernel has received no
//     byte since that Read began, and no close (TCP_INFO). One kernel check
//     serves the hits of the next Window, while that Read lasts: a hit
//     costs a system call once per Window at most, and a report that
//     reached the socket more than Window before a call began is never
//     missed by it. Not while a barrier is in flight, though: its reply
//     queued puts the connection behind the writer's in Redis's next
//     write, so the report may follow the writer's reply (barriers.out).
//   - recent: a barrier sent on the report connection (a SUBSCRIBE that
//     changes nothing) came back no longer than Lag ago. Its reply follows
//     every report Redis queued before it, so a change that returned
//     before the barrier was sent was applied; a report delayed, stalled or
//     lost on its way (a slow path, a proxy, a closed connection) stops the
//     tier within Lag, whatever the network does.
//
// So once a change has returned on any node at time t, no call that begins
// after t + Lag is served the copy it replaced (plus the clock skew between
// the two hosts), and where the report was on this host's socket, none
// that begins after t + Window. A connection the kernel cannot be asked of
// (TLS, a Unix socket, another OS) keeps the barrier's bound alone.

// Window is how long one kernel check of a report socket serves hits.
const Window = 20 * time.Microsecond

// fenceConn is a report connection's socket, watched for the fence.
type fenceConn struct {
	net.Conn
	rc      syscall.RawConn // nil: the kernel cannot be asked (the barrier holds)
	watched bool
	// entered is 1 + total when the Read in progress began, 0 when no Read
	// is in progress.
	entered atomic.Uint64
	total   uint64 // bytes returned by every Read: the reading goroutine's
	// The last kernel check that found the reader quiet: the entered value
	// it saw and when (nanotime), under a sequence lock (odd: being
	// written) so that a hit never pairs one check's time with another's
	// Read.
	seq       atomic.Uint64
	checkRead atomic.Uint64
	checkAt   atomic.Int64
}

// watch returns cn wrapped for the fence.
func watch(cn net.Conn) (net.Conn, *fenceConn) {
	fc := &fenceConn{Conn: cn}
	if tc, ok := cn.(*net.TCPConn); ok && tcpInfoWorks {
		if rc, err := tc.SyscallConn(); err == nil {
			fc.rc, fc.watched = rc, true
		}
	}
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
// Window before now (nanotime) has been applied; true for a connection the
// kernel cannot be asked of (the barrier bounds it).
func (c *fenceConn) Quiet(now int64) bool {
	if !c.watched {
		return true
	}
	e := c.entered.Load()
	if e == 0 {
		return false
	}
	if s := c.seq.Load(); s&1 == 0 && c.checkRead.Load() == e && now-c.checkAt.Load() <= int64(Window) && c.seq.Load() == s {
		return true
	}
	got, ok := bytesReceived(c.rc)
	if !ok || got != e-1 {
		return false
	}
	if s := c.seq.Load(); s&1 == 0 && c.seq.CompareAndSwap(s, s+1) {
		c.checkRead.Store(e)
		c.checkAt.Store(now)
		c.seq.Store(s + 2)
	}
	return true
}

// barriers is a report connection's record of its barriers.
type barriers struct {
	sendMu sync.Mutex // keeps sent in the order the barriers go out
	mu     sync.Mutex
	sent   []time.Time // sent, not yet confirmed, in order
	// applied is the local monotonic time (ns since clockBase) the last
	// confirmed barrier was sent: every report queued before it was
	// applied. 0: none yet.
	applied atomic.Int64
	// inflight is len(sent), for the hits (out).
	inflight atomic.Int64
}

// clockBase is the origin of the fence's monotonic clock.
var clockBase = time.Now()

// nanotime is the tier's clock: ns since clockBase, monotonic.
func nanotime() int64 { return int64(time.Since(clockBase)) }

// Nanotime is the tier's clock (ns, monotonic), which Get's times are on.
func Nanotime() int64 { return nanotime() }

// send records a barrier and sends it with f (a SUBSCRIBE on the report
// connection, whose confirmation is the barrier's reply).
func (b *barriers) send(f func() error) error {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	b.inflight.Store(int64(len(b.sent)))
	b.mu.Unlock()
	return f()
}

// confirmed records that the oldest barrier in flight came back (its
// SUBSCRIBE's confirmation); false when none was in flight.
func (b *barriers) confirmed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sent) == 0 {
		return false
	}
	at := b.sent[0]
	b.sent = b.sent[1:]
	b.inflight.Store(int64(len(b.sent)))
	b.applied.Store(int64(at.Sub(clockBase)))
	return true
}

// reset forgets the barriers of a connection that is gone.
func (b *barriers) reset() {
	b.mu.Lock()
	b.sent = nil
	b.inflight.Store(0)
	b.applied.Store(0)
	b.mu.Unlock()
}

// out reports whether a barrier is in flight. Its reply queued on the
// report connection puts that connection behind the others Redis writes
// to in the same turn of its event loop: a writer's reply may then leave
// before the report of its change (seen 14-66 µs before it), so a socket
// found quiet says nothing meanwhile.
func (b *barriers) out() bool { return b.inflight.Load() != 0 }

// recent reports whether a barrier sent within lag of now came back.
func (b *barriers) recent(now int64, lag time.Duration) bool {
	a := b.applied.Load()
	return a != 0 && now-a <= int64(lag)
}
