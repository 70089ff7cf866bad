package tier

import (
	"io"
	"net"
	"os"
	"runtime"
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
//     holds do not make a whole message), after the kernel had no byte for
//     it, and the socket still holds no byte and no close (asked of an
//     epoll instance of the fence's own, readyWatch, at a third of what
//     TCP_INFO costs; or a peek). One kernel check serves the
//     hits of the next Window, while the reader waits so: a hit
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

// Window is how long one kernel check of a report socket serves hits. It
// is meant to be shorter than the time a writer on this host takes to
// learn that its change is done once the report is on the socket (Redis
// writes the writer's reply after the report, and the writer's goroutine
// must be woken, read it and return), so that a call that begins after
// the writer's call returned is not served by a check made before the
// report arrived. With four readers spinning on two cores, 20 µs let 1
// to 12 of 2,000 changes be read stale, up to 12 µs after they returned;
// 2 µs none, in eight runs (BenchmarkLocalCoherence, standalone and
// cluster). A shorter window costs more checks: with 64 goroutines on two
// cores a hit cost 76-78 ns at 20 µs, 83-92 ns at 2 µs, 103-110 ns at
// 1 µs (BenchmarkTierPeers, 2026-11-29; rueidis DoCache 260-287 ns).
const Window = 2 * time.Microsecond

// fenceConn is a report connection's socket, watched for the fence. Its
// reader reads through the socket itself (RawConn.Read), so that the hits
// know when it waits for bytes: state is the reader's generation times
// two, plus one while it waits after the kernel had nothing for it.
type fenceConn struct {
	net.Conn
	rc      syscall.RawConn // nil: the kernel cannot be asked (the barrier holds)
	watched bool
	state   atomic.Uint64
	// ready is the socket's epoll instance of the fence's own (readyWatch),
	// nil for none (the peek is asked). closed, set before the socket is
	// closed, tells a check that an instance with nothing ready may have
	// forgotten a socket that closed.
	ready  *readyFD
	closed atomic.Bool
	// arr tells that nothing reached the socket since a check found it
	// empty, without asking the kernel (arrivals); nil: every check asks.
	arr *arrivals
	// The reader's own: its generation, and the Read in progress (read
	// is made once, so a Read allocates nothing).
	gen  uint64
	p    []byte
	n    int
	err  error
	read func(fd uintptr) bool
	// The last kernel check that found the reader quiet: the state it saw
	// and when (nanotime), under a sequence lock (odd: being written) so
	// that a hit never pairs one check's time with another's wait.
	seq        atomic.Uint64
	checkState atomic.Uint64
	checkAt    atomic.Int64
}

// watch returns cn wrapped for the fence; with kernel, the kernel is
// asked of it where it can be (a plain TCP connection on Linux).
func watch(cn net.Conn, kernel bool) (net.Conn, *fenceConn) {
	fc := &fenceConn{Conn: cn}
	if tc, ok := cn.(*net.TCPConn); ok && peekWorks && kernel {
		if rc, err := tc.SyscallConn(); err == nil {
			fc.rc, fc.watched = rc, true
			fc.read = fc.readOnce
			if fd := readyWatch(rc); fd >= 0 {
				fc.ready = &readyFD{fd: fd}
				// Should the connection be dropped unclosed.
				runtime.AddCleanup(fc, (*readyFD).retire, fc.ready)
			}
			if fc.arr = newArrivals(rc); fc.arr != nil {
				runtime.AddCleanup(fc, (*arrivals).close, fc.arr)
			}
		}
	}
	return fc, fc
}

// Close closes the connection, saying so to the checks first, and its
// epoll instance once no check uses it.
func (c *fenceConn) Close() error {
	c.closed.Store(true)
	if c.arr != nil {
		c.arr.close()
		// The poll holds the socket until its instance is torn down.
		shutdownSocket(c.rc)
	}
	err := c.Conn.Close()
	c.ready.retire()
	return err
}

// empty reports whether the socket holds nothing for the reader: no byte,
// no close, no error. The epoll instance is asked by one check at a time:
// the kernel answers a zero timeout from its ready list without a lock,
// and a call that finds it while another is moving it (ep_start_scan,
// ep_done_scan) may see nothing ready; a check that finds the instance
// asked peeks instead.
func (c *fenceConn) empty() bool {
	var mark uint64
	if c.arr != nil {
		if c.arr.quiet() {
			// Nothing arrived since a check found it empty.
			return !c.closed.Load()
		}
		mark = c.arr.mark() // before the kernel is asked
	}
	empty := c.askEmpty()
	if empty && c.arr != nil {
		c.arr.checkedEmpty(mark)
	}
	return empty
}

// askEmpty asks the kernel whether the socket holds nothing (empty).
func (c *fenceConn) askEmpty() bool {
	if c.ready != nil {
		if empty, asked := c.ready.empty(); asked {
			// A socket closed under the check leaves the instance empty.
			return empty && !c.closed.Load()
		}
		if c.closed.Load() {
			return false
		}
	}
	return socketEmpty(c.rc)
}

// readyFD is an epoll instance of readyWatch, closed once retired and no
// check uses it: as soon as its connection closes (a reconnect storm
// leaves no descriptors behind waiting for a collection), and never while
// a check may still ask it (a number closed and reused meanwhile could be
// another instance's, whose events the check would take).
type readyFD struct {
	fd   int
	uses atomic.Int64 // checks asking it, plus retired once retired
	done atomic.Bool  // closed
}

// retired marks a readyFD's uses once its connection is closed.
const retired = 1 << 40

// empty asks the instance whether nothing is ready; asked is false once
// it is retired, or while another check asks it.
func (r *readyFD) empty() (empty, asked bool) {
	if !r.enter() {
		return false, false
	}
	empty = readyEmpty(r.fd)
	if r.done.Load() {
		readyAskedClosed.Add(1) // never: the tests count it
	}
	r.leave()
	return empty, true
}

// enter makes the caller the instance's one asker, until its leave; false
// (nothing to leave) once retired, or while another asks it.
func (r *readyFD) enter() bool {
	if r.uses.Add(1) != 1 {
		r.leave()
		return false
	}
	return true
}

func (r *readyFD) leave() {
	if r.uses.Add(-1) == retired {
		r.release()
	}
}

// retire closes the instance now or, if checks ask it, when the last is
// done; none begins after. Nil: nothing to close.
func (r *readyFD) retire() {
	if r == nil {
		return
	}
	for {
		n := r.uses.Load()
		if n >= retired {
			return // retired already
		}
		if r.uses.CompareAndSwap(n, n+retired) {
			if n == 0 {
				r.release()
			}
			return
		}
	}
}

// release closes the instance, once.
func (r *readyFD) release() {
	if r.done.CompareAndSwap(false, true) {
		closeWatch(r.fd)
		readyClosed.Add(1)
	}
}

// readyClosed counts the epoll instances closed, and readyAskedClosed the
// checks that found theirs closed after asking it, for the tests.
var readyClosed, readyAskedClosed atomic.Int64

func (c *fenceConn) Read(p []byte) (int, error) {
	if !c.watched || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.p, c.n, c.err = p, 0, nil
	err := c.rc.Read(c.read)
	c.p = nil
	switch {
	case err != nil: // a deadline, or the connection closed
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: unwrapOp(err)}
	case c.err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", c.err)}
	case c.n == 0:
		return 0, io.EOF
	}
	return c.n, nil
}

// unwrapOp returns the cause of an error of RawConn.Read.
func unwrapOp(err error) error {
	if oe, ok := err.(*net.OpError); ok {
		return oe.Err
	}
	return err
}

// Quiet reports whether every report that reached this connection's socket
// Window before now (nanotime) has been applied; true for a connection the
// kernel cannot be asked of (the barrier bounds it).
func (c *fenceConn) Quiet(now int64) bool {
	if !c.watched {
		return true
	}
	st := c.state.Load()
	if st&1 == 0 {
		return false // reading, or applying what it read
	}
	if s := c.seq.Load(); s&1 == 0 && c.checkState.Load() == st && now-c.checkAt.Load() <= int64(Window) && c.seq.Load() == s {
		return true
	}
	// Waiting since the kernel had nothing; quiet if it still has nothing
	// (no byte, no close) and the reader did not begin a read(2) since it
	// was seen waiting (it says so before the call).
	if !c.empty() || c.state.Load() != st {
		return false
	}
	if s := c.seq.Load(); s&1 == 0 && c.seq.CompareAndSwap(s, s+1) {
		c.checkState.Store(st)
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
	// rtt is how long the recent barriers took to come back (ns): the
	// latest, or less than a quarter below the one before, so a slow one
	// weighs for a few barriers.
	rtt atomic.Int64
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
// SUBSCRIBE's confirmation); false when none was in flight. A barrier
// vouches for the reports of what Redis tracks for this node; under
// TrackHeld that is also what its tracked reader read, which the barrier
// says nothing of: limit (nanotime, 0: none) is when that reader was last
// known alive (readerProof), and applied goes no later.
func (b *barriers) confirmed(limit int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sent) == 0 {
		return false
	}
	at := b.sent[0]
	b.sent = b.sent[1:]
	b.inflight.Store(int64(len(b.sent)))
	applied := int64(at.Sub(clockBase))
	if limit > 0 {
		applied = min(applied, limit)
	}
	b.applied.Store(applied)
	old := b.rtt.Load()
	b.rtt.Store(max(int64(time.Since(at)), old-old/4))
	return true
}

// slow records that a round trip the barriers wait on (the tracked
// reader's CLIENT ID, checkReader) took d (ns): the next barriers go out
// that much earlier (next), as for a slow barrier.
func (b *barriers) slow(d int64) {
	for {
		old := b.rtt.Load()
		if d <= old || b.rtt.CompareAndSwap(old, d) {
			return
		}
	}
}

// next returns how long from now (nanotime) the next barrier is due: Lag
// after the last one confirmed was sent, less four of the recent round
// trips (at least Lag/10, at most Lag/2), so that it is back before the
// hits must stop. As late as that, because a hit is not served while a
// barrier is in flight (out). Zero when none came back yet.
func (b *barriers) next(now int64, lag time.Duration) time.Duration {
	a := b.applied.Load()
	if a == 0 {
		return 0
	}
	spare := min(max(4*time.Duration(b.rtt.Load()), lag/10), lag/2)
	return max(time.Duration(a+int64(lag-spare)-now), 0)
}

// reset forgets the barriers of a connection that is gone.
func (b *barriers) reset() {
	b.mu.Lock()
	b.sent = nil
	b.inflight.Store(0)
	b.applied.Store(0)
	b.rtt.Store(0)
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
