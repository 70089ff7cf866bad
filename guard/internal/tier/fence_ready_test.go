package tier

import (
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
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
		if fc.epfd < 0 {
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

// TestReadyWatchReleased: the epoll instance of a report connection is
// closed once its connection is gone and collected, so reconnects do not
// pile up descriptors.
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
		_ = held[i].Close()
	}
	if got := polls(); got < before+len(held) {
		t.Fatalf("%d epoll instances, want at least %d while the connections are referenced", got, before+len(held))
	}
	runtime.KeepAlive(held)
	held = nil
	eventually(t, func() bool { runtime.GC(); return polls() <= before }, "the epoll instances of closed connections were never released")
}
