package tier

import (
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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
		_, fc := watch(raw)
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
	polls := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		n := 0
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "eventpoll") {
				n++
			}
		}
		return n
	}
	before := polls()
	held := make([]net.Conn, 20)
	for i := range held {
		raw, _ := tcpPair(t)
		held[i], _ = watch(raw)
	}
	if got := polls(); got != before+len(held) {
		t.Fatalf("%d epoll instances, want %d", got, before+len(held))
	}
	for _, c := range held {
		_ = c.Close()
	}
	if got := polls(); got != before {
		t.Errorf("%d epoll instances once the connections closed, want %d", got, before)
	}
	runtime.KeepAlive(held)

	for range 5 {
		raw, _ := tcpPair(t)
		watch(raw) // dropped unclosed
	}
	eventually(t, func() bool { runtime.GC(); return polls() <= before }, "the epoll instances of connections dropped unclosed were never released")
}

// TestReadyWatchRetireWhileAsked: an instance retired while checks ask it
// is closed once, when the last of them is done, and no check asks it
// after: with checks, closes and second closes racing, every instance is
// closed exactly once, and a number reused meanwhile is never closed.
func TestReadyWatchRetireWhileAsked(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	raw, _ := tcpPair(t)
	_, fc := watch(raw)
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

	const n = 200
	closed0 = readyClosed.Load()
	for range n {
		raw, _ := tcpPair(t)
		_, fc := watch(raw)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						fc.empty()
					}
				}
			})
		}
		wg.Go(func() { _ = fc.Close() })
		_ = fc.Close()
		close(stop)
		wg.Wait()
		if fc.empty() {
			t.Fatal("a closed connection counts as empty")
		}
		if !fc.ready.done.Load() {
			t.Fatal("an instance left open after its connection closed and its checks ended")
		}
	}
	if got := readyClosed.Load() - closed0; got != n {
		t.Errorf("%d instances closed, want %d: one closed twice or never", got, n)
	}
}
