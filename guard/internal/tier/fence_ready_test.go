//go:build linux

package tier

import (
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadyWatchAgreesWithPeek: the fence's epoll instance (readyWatch)
// says "nothing for the reader" exactly when a peek of the socket does,
// through random histories of bytes sent, bytes read, a half close (FIN),
// a reset and a local close. The peek is the model: it asks the socket
// itself. An instance that missed a wake-up would say empty while bytes
// wait, for good; one that kept a read socket ready would only cost.
func TestReadyWatchAgreesWithPeek(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here: the barrier alone bounds the tier")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for h := range 60 {
		raw, peer := tcpPair(t)
		_, fc := watch(raw, true)
		if fc.ready == nil {
			t.Fatal("no epoll instance for a TCP connection on Linux")
		}
		buf := make([]byte, 64)
		var ops []string
		agree := func() {
			t.Helper()
			// A segment may still be on its way through the loopback: the
			// two agree once it landed, and a disagreement that lasts is
			// the bug.
			deadline := time.Now().Add(2 * time.Second)
			for {
				want := socketEmpty(fc.rc)
				if fc.empty() == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("history %d (seed %d), after %s: the epoll instance says empty=%v, the peek %v",
						h, seed, strings.Join(ops, " "), !want, want)
				}
				runtime.Gosched()
			}
		}
		agree()
		ended := false
		for range 1 + rng.IntN(30) {
			switch k := rng.IntN(10); {
			case k < 4 && !ended:
				n := 1 + rng.IntN(100)
				ops = append(ops, "write")
				if _, err := peer.Write(make([]byte, n)); err != nil {
					t.Fatal(err)
				}
			case k < 8:
				// Read what is there, if anything, without waiting for more.
				ops = append(ops, "read")
				_ = raw.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, _ = raw.Read(buf[:1+rng.IntN(len(buf)-1)])
				_ = raw.SetReadDeadline(time.Time{})
			case k == 8 && !ended:
				ops = append(ops, "fin")
				_ = peer.(*net.TCPConn).CloseWrite()
				ended = true
			case k == 9 && !ended:
				ops = append(ops, "reset")
				_ = peer.(*net.TCPConn).SetLinger(0)
				_ = peer.Close()
				ended = true
			default:
				continue
			}
			agree()
		}
		_ = fc.Close()
		if fc.empty() {
			t.Fatalf("history %d: a closed connection's socket counts as empty", h)
		}
	}
}

// TestReadyWatchReleased: a connection's epoll instance is closed with
// the connection, not at some later collection (a reconnect storm would
// pile up descriptors: 2,880 in 8 s of CLIENT KILL, a helper found); one
// dropped unclosed goes when it is collected.
func TestReadyWatchReleased(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	isOpen := func(fd int) bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err == nil
	}
	fcs := make([]*fenceConn, 20)
	for i := range fcs {
		raw, _ := tcpPair(t)
		_, fcs[i] = watch(raw, true)
		if fcs[i].ready == nil || !isOpen(fcs[i].ready.fd) {
			t.Fatal("no epoll instance open for a TCP connection on Linux")
		}
	}
	for _, fc := range fcs {
		_ = fc.Close()
	}
	for _, fc := range fcs {
		if fc.arr != nil {
			<-fc.arr.done // its thread closed what it opened (arrivals)
		}
	}
	// Nothing was opened since: a number found open would be one of
	// these instances left open.
	for i, fc := range fcs {
		if !fc.ready.done.Load() || isOpen(fc.ready.fd) {
			t.Errorf("connection %d closed, its epoll instance (fd %d) still open", i, fc.ready.fd)
		}
	}

	var dropped []*readyFD
	for range 5 {
		raw, _ := tcpPair(t)
		_, fc := watch(raw, true)
		dropped = append(dropped, fc.ready) // not the connection: it is dropped unclosed
	}
	eventually(t, func() bool {
		runtime.GC()
		for _, r := range dropped {
			if !r.done.Load() {
				return false
			}
		}
		return true
	}, "the epoll instances of connections dropped unclosed were never released")
}

// TestReadyWatchClosedUnderCheck: a check that began before its
// connection closed, and asks the instance after the socket is gone (which
// leaves the instance with nothing ready), does not say empty.
func TestReadyWatchClosedUnderCheck(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	raw, _ := tcpPair(t)
	_, fc := watch(raw, true)
	// What Close does before it retires the instance: the mark, then the
	// socket.
	fc.closed.Store(true)
	_ = fc.Conn.Close()
	if fc.empty() {
		t.Error("a check between the socket's close and the instance's retirement says empty")
	}
	_ = fc.Close()
}

// TestReadyWatchConcurrentChecks: checks of many goroutines at once never
// say empty while a byte waits unread. The kernel answers a zero timeout
// from the instance's ready list without a lock, and a call finding it
// while another moves it may see nothing: one check asks the instance at
// a time, the others peek.
func TestReadyWatchConcurrentChecks(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	raw, peer := tcpPair(t)
	_, fc := watch(raw, true)
	if _, err := peer.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return !socketEmpty(fc.rc) }, "the byte never arrived")
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				if fc.empty() {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of 160,000 checks said empty with a byte unread", n)
	}
}

// TestReadyWatchRetireWhileAsked: an instance retired while a check asks
// it is closed once, when the check is done, and no check asks it after:
// with checks, closes and second closes racing, every instance is closed
// exactly once, no check finds its instance closed after asking it, and
// none that began after Close returned says empty.
func TestReadyWatchRetireWhileAsked(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	raw, _ := tcpPair(t)
	_, fc := watch(raw, true)
	r := fc.ready
	r.uses.Add(1) // a check asking it
	closed0 := readyClosed.Load()
	_ = fc.Close()
	if r.done.Load() {
		t.Fatal("closed while a check asks it")
	}
	if _, asked := r.empty(); asked {
		t.Error("a check began on a retired instance")
	}
	r.leave()
	if !r.done.Load() || readyClosed.Load() != closed0+1 {
		t.Fatal("not closed when the last check was done")
	}
	runtime.KeepAlive(fc) // its cleanup is no part of this

	const n = 200
	closed0, asked0 := readyClosed.Load(), readyAskedClosed.Load()
	for range n {
		raw, _ := tcpPair(t)
		_, fc := watch(raw, true)
		stop := make(chan struct{})
		var closedAt atomic.Bool
		var late atomic.Int64 // checks begun after Close returned that said empty
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := closedAt.Load()
					if fc.empty() && after {
						late.Add(1)
					}
				}
			})
		}
		wg.Go(func() { _ = fc.Close() })
		_ = fc.Close()
		closedAt.Store(true)
		close(stop)
		wg.Wait()
		if late.Load() != 0 {
			t.Fatalf("%d checks begun after Close returned said empty", late.Load())
		}
		if !fc.ready.done.Load() {
			t.Fatal("an instance left open after its connection closed and its checks ended")
		}
	}
	if got := readyClosed.Load() - closed0; got != n {
		t.Errorf("%d instances closed, want %d: one closed twice or never", got, n)
	}
	if got := readyAskedClosed.Load() - asked0; got != 0 {
		t.Errorf("%d checks asked an instance already closed", got)
	}
}

// TestReadyFDModel checks a readyFD against a model over random histories
// of checks entering and leaving, retirements (a Close, a second Close)
// and the collector's cleanup (only once no check holds the connection):
// a check enters only while it would be the one asker of an instance not
// retired; the instance is closed exactly when it is retired and nobody
// asks it, and once.
func TestReadyFDModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for h := range 300 {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		r := &readyFD{fd: fd}
		closed0 := readyClosed.Load()
		asking := make([]bool, 1+rng.IntN(4))
		retiredM := false
		var ops []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("history %d (seed %d) after %v: %s", h, seed, ops, fmt.Sprintf(format, args...))
		}
		for range 1 + rng.IntN(40) {
			i := rng.IntN(len(asking))
			someone := slices.Contains(asking, true)
			switch k := rng.IntN(10); {
			case k < 4 && !asking[i]:
				ops = append(ops, fmt.Sprintf("enter%d", i))
				want := !retiredM && !someone
				if got := r.enter(); got != want {
					fail("enter = %v, want %v", got, want)
				}
				asking[i] = want
			case k < 7 && asking[i]:
				ops = append(ops, fmt.Sprintf("leave%d", i))
				r.leave()
				asking[i] = false
			case k < 9:
				ops = append(ops, "retire")
				r.retire()
				retiredM = true
			case !someone:
				ops = append(ops, "cleanup")
				r.retire()
				retiredM = true
			default:
				continue
			}
			want := retiredM && !slices.Contains(asking, true)
			if r.done.Load() != want {
				fail("closed = %v, want %v", r.done.Load(), want)
			}
			isOpen := func() bool { _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); return err == nil }
			if want == isOpen() {
				fail("descriptor open = %v with the instance closed = %v", !want, want)
			}
		}
		for i := range asking {
			if asking[i] {
				r.leave()
			}
		}
		r.retire()
		if !r.done.Load() || readyClosed.Load()-closed0 != 1 {
			fail("closed %d times at the end, want once", readyClosed.Load()-closed0)
		}
	}
}
