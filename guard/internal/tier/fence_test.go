package tier

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// TestFenceConn: a watched report connection is quiet only while its
// reader waits after the kernel had nothing for it, and the socket still
// holds no byte and no close; one check serves the hits of the next Window
// while that wait lasts, no longer. A connection the kernel cannot be
// asked of is always quiet (the barrier alone bounds it).
func TestFenceConn(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here: the barrier alone bounds the tier")
	}
	raw, peer := tcpPair(t)
	cn, fc := watch(raw, true)
	if !fc.watched || cn != net.Conn(fc) {
		t.Fatal("a TCP connection is not watched")
	}
	now := nanotime()
	if fc.Quiet(now) {
		t.Error("quiet with no Read in progress")
	}
	// The reader waits (set by hand, so that no byte is consumed).
	fc.state.Store(1)
	if !fc.Quiet(now) {
		t.Fatal("not quiet while the reader waits with nothing received")
	}
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// Within Window of the check, its verdict stands; past it, the kernel
	// is asked again and the bytes are seen.
	if !fc.Quiet(now + int64(Window)) {
		t.Error("a check not reused within its Window")
	}
	eventually(t, func() bool { return !fc.Quiet(nanotime() + int64(Window) + 1) }, "bytes received while the reader waits never seen")
	// The reader reads them: until it waits again it applies them, and
	// the old check serves no more.
	buf := make([]byte, 5)
	if n, err := fc.Read(buf); err != nil || n != 5 {
		t.Fatalf("Read: %d %v", n, err)
	}
	if fc.Quiet(nanotime()) {
		t.Error("quiet after a Read returned, before the next one")
	}
	read := make(chan error, 1)
	go func() {
		_, err := fc.Read(buf)
		read <- err
	}()
	eventually(t, func() bool { return fc.state.Load()&1 == 1 }, "the reader never waited")
	if !fc.Quiet(nanotime()) {
		t.Error("not quiet in the next Read, everything read applied")
	}
	// A close is no byte, yet it ends the connection's quiet.
	_ = peer.Close()
	eventually(t, func() bool { return !fc.Quiet(nanotime() + int64(Window) + 1) }, "a closed connection stayed quiet")
	if err := <-read; err != io.EOF {
		t.Errorf("Read at the close: %v, want io.EOF", err)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if cn, fc := watch(a, true); fc.watched || !fc.Quiet(nanotime()) || cn == nil {
		t.Error("a connection the kernel cannot be asked of is not always quiet")
	}
}

// TestFenceConnRead: the watched connection reads as a net.Conn does, for
// go-redis: bytes, a deadline's timeout, the end of the stream.
func TestFenceConnRead(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here")
	}
	raw, peer := tcpPair(t)
	cn, _ := watch(raw, true)
	if err := cn.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	_, err := cn.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v, want a timeout", err)
	}
	_ = cn.SetReadDeadline(time.Time{})
	if _, err := peer.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if n, err := cn.Read(buf); err != nil || string(buf[:n]) != "abc" {
		t.Fatalf("Read: %q %v, want abc", buf[:n], err)
	}
	_ = peer.Close()
	if _, err := cn.Read(buf); err != io.EOF {
		t.Fatalf("Read at the end: %v, want io.EOF", err)
	}
	_ = cn.Close()
	if _, err := cn.Read(buf); err == nil || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
}

// eventually waits up to 5 s for cond, yielding between tries.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		runtime.Gosched()
	}
}

// TestBarriers: a barrier's confirmation marks what was sent before it
// applied; only one that came back within the lag counts.
func TestBarriers(t *testing.T) {
	var b barriers
	if b.recent(nanotime(), time.Hour) {
		t.Error("recent with no barrier confirmed")
	}
	if b.confirmed(0) {
		t.Error("a confirmation with no barrier in flight counted")
	}
	_ = b.send(func() error { return nil })
	sent := nanotime()
	_ = b.send(func() error { return nil })
	if !b.confirmed(0) {
		t.Fatal("the first barrier's confirmation did not count")
	}
	if a := b.applied.Load(); a > sent {
		t.Errorf("applied %d is the second barrier's time, not the first's (before %d)", a, sent)
	}
	now := nanotime()
	if !b.recent(now, time.Hour) {
		t.Error("a barrier confirmed now is not recent")
	}
	if b.recent(now+int64(2*time.Hour), time.Hour) {
		t.Error("a barrier two hours old is recent within an hour")
	}
	b.reset()
	if b.recent(nanotime(), time.Hour) || b.confirmed(0) {
		t.Error("reset kept a barrier")
	}
}

// TestBarrierNext: the next barrier is due Lag after the last confirmed one
// was sent, less four recent round trips, at least Lag/10, at most Lag/2;
// at once when none came back.
func TestBarrierNext(t *testing.T) {
	const lag = 100 * time.Millisecond
	var b barriers
	if got := b.next(nanotime(), lag); got != 0 {
		t.Fatalf("next with none back: %v, want 0", got)
	}
	_ = b.send(func() error { return nil })
	b.confirmed(0)
	a := b.applied.Load()
	for _, tc := range []struct {
		rtt, want time.Duration
	}{
		{0, lag - lag/10},
		{time.Millisecond, lag - lag/10},
		{5 * time.Millisecond, lag - 20*time.Millisecond},
		{time.Second, lag / 2},
	} {
		b.rtt.Store(int64(tc.rtt))
		if got := b.next(a, lag); got != tc.want {
			t.Errorf("rtt %v: next %v after the last was sent, want %v", tc.rtt, got, tc.want)
		}
	}
	if got := b.next(a+int64(lag), lag); got != 0 {
		t.Errorf("next once overdue: %v, want 0", got)
	}
}

// TestFencedNotWhileBarrierOut: a watched report connection found quiet
// fences nothing while one of its barriers is in flight. Redis puts the
// barrier's reply and the reports of the same turn of its event loop
// behind the writer's reply then, so the writer may hear back before the
// report reaches this host (BenchmarkLocalCoherence saw copies served
// 14-66 µs after a change returned so).
func TestFencedNotWhileBarrierOut(t *testing.T) {
	if !peekWorks {
		t.Skip("no peek here: the barrier alone bounds the tier")
	}
	raw, _ := tcpPair(t)
	_, fc := watch(raw, true)
	fc.state.Store(1) // the reader waits, nothing received: quiet
	tr := &tracker{}
	tr.fc.Store(fc)
	c := &coherence{lag: time.Hour}
	c.all.Store(&[]*tracker{tr})
	_ = tr.bar.send(func() error { return nil })
	tr.bar.confirmed(0)
	if !c.fenced(nanotime()) {
		t.Fatal("not fenced: quiet, a barrier back, none out")
	}
	_ = tr.bar.send(func() error { return nil })
	if c.fenced(nanotime()) {
		t.Error("fenced while a barrier is in flight")
	}
	tr.bar.confirmed(0)
	if !c.fenced(nanotime()) {
		t.Error("not fenced once the barrier came back")
	}
}

// BenchmarkFenceCheck: the check a hit pays when hits are more than
// Window apart (HTTP rates): "check" as the fence makes it (with io_uring,
// from shared memory while nothing arrived: arrivals); "epoll" the kernel
// asked, the fence's epoll instance, as every check did before arrivals
// and still does where io_uring cannot be used; the peek it asked before
// that (and still does where no instance can be made) and TCP_INFO, which
// it asked before that (and the tracked reader's watch still does).
//
//	go test -run '^$' -bench FenceCheck ./guard/internal/tier
func BenchmarkFenceCheck(b *testing.B) {
	if !peekWorks {
		b.Skip("no peek here")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	_, fc := watch(raw, true)
	fc.state.Store(1) // the reader waits
	b.Run("check", func(b *testing.B) {
		if fc.ready == nil {
			b.Skip("no epoll instance")
		}
		now := max(nanotime(), fc.checkAt.Load()) // after every earlier check
		for b.Loop() {
			now += int64(Window) + 1 // past the last check's Window
			if !fc.Quiet(now) {
				b.Fatal("not quiet")
			}
		}
	})
	b.Run("epoll", func(b *testing.B) {
		if fc.ready == nil {
			b.Skip("no epoll instance")
		}
		for b.Loop() {
			if !fc.askEmpty() {
				b.Fatal("not empty")
			}
		}
	})
	b.Run("peek", func(b *testing.B) {
		for b.Loop() {
			if !socketEmpty(fc.rc) {
				b.Fatal("not empty")
			}
		}
	})
	b.Run("tcpinfo", func(b *testing.B) {
		for b.Loop() {
			if _, ok := bytesReceived(fc.rc); !ok {
				b.Fatal("not established")
			}
		}
	})
}
