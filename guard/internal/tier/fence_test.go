package tier

import (
	"net"
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
// reader waits in a Read, the kernel has received no byte since that Read
// began, and the connection is established; one check serves the hits of
// the next Window while that Read lasts, no longer. A connection the
// kernel cannot be asked of is always quiet (the barrier alone bounds it).
func TestFenceConn(t *testing.T) {
	if !tcpInfoWorks {
		t.Skip("no TCP_INFO here: the barrier alone bounds the tier")
	}
	raw, peer := tcpPair(t)
	cn, fc := watch(raw)
	if !fc.watched || cn != net.Conn(fc) {
		t.Fatal("a TCP connection is not watched")
	}
	now := nanotime()
	if fc.Quiet(now) {
		t.Error("quiet with no Read in progress")
	}
	// A Read begins (set by hand, so that no byte is consumed).
	fc.entered.Store(fc.total + 1)
	if !fc.Quiet(now) {
		t.Fatal("not quiet in a Read with nothing received")
	}
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// Within Window of the check, its verdict stands; past it, the kernel
	// is asked again and the bytes are seen.
	if !fc.Quiet(now + int64(Window)) {
		t.Error("a check not reused within its Window")
	}
	deadline := time.Now().Add(5 * time.Second)
	for fc.Quiet(nanotime() + int64(Window) + 1) {
		if time.Now().After(deadline) {
			t.Fatal("bytes received during a Read never seen")
		}
		runtime.Gosched()
	}
	// The reader reads them, then waits in its next Read: a new Read, so
	// the old check serves no more.
	fc.entered.Store(0)
	buf := make([]byte, 5)
	if n, err := fc.Read(buf); err != nil || n != 5 {
		t.Fatalf("Read: %d %v", n, err)
	}
	fc.entered.Store(fc.total + 1)
	if !fc.Quiet(nanotime()) {
		t.Error("not quiet in the next Read, everything read applied")
	}
	// A close is no byte, yet it ends the connection's quiet.
	_ = peer.Close()
	deadline = time.Now().Add(5 * time.Second)
	for fc.Quiet(nanotime() + int64(Window) + 1) {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection stayed quiet")
		}
		runtime.Gosched()
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if cn, fc := watch(a); fc.watched || !fc.Quiet(nanotime()) || cn == nil {
		t.Error("a connection the kernel cannot be asked of is not always quiet")
	}
}

// TestBarriers: a barrier's confirmation marks what was sent before it
// applied; only one that came back within the lag counts.
func TestBarriers(t *testing.T) {
	var b barriers
	if b.recent(nanotime(), time.Hour) {
		t.Error("recent with no barrier confirmed")
	}
	if b.confirmed() {
		t.Error("a confirmation with no barrier in flight counted")
	}
	_ = b.send(func() error { return nil })
	sent := nanotime()
	_ = b.send(func() error { return nil })
	if !b.confirmed() {
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
	if b.recent(nanotime(), time.Hour) || b.confirmed() {
		t.Error("reset kept a barrier")
	}
}

// TestFencedNotWhileBarrierOut: a watched report connection found quiet
// fences nothing while one of its barriers is in flight. Redis puts the
// barrier's reply and the reports of the same turn of its event loop
// behind the writer's reply then, so the writer may hear back before the
// report reaches this host (BenchmarkLocalCoherence saw copies served
// 14-66 µs after a change returned so).
func TestFencedNotWhileBarrierOut(t *testing.T) {
	if !tcpInfoWorks {
		t.Skip("no TCP_INFO here: the barrier alone bounds the tier")
	}
	raw, _ := tcpPair(t)
	_, fc := watch(raw)
	fc.entered.Store(fc.total + 1) // the reader waits in a Read: quiet
	tr := &tracker{}
	tr.fc.Store(fc)
	c := &coherence{lag: time.Hour}
	c.all.Store(&[]*tracker{tr})
	_ = tr.bar.send(func() error { return nil })
	tr.bar.confirmed()
	if !c.fenced(nanotime()) {
		t.Fatal("not fenced: quiet, a barrier back, none out")
	}
	_ = tr.bar.send(func() error { return nil })
	if c.fenced(nanotime()) {
		t.Error("fenced while a barrier is in flight")
	}
	tr.bar.confirmed()
	if !c.fenced(nanotime()) {
		t.Error("not fenced once the barrier came back")
	}
}
