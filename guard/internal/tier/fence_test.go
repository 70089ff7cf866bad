package tier

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// TestFenceConn: a report connection is quiet only while its reader waits
// in a Read and the kernel has received no byte since that Read began; a
// connection the fence cannot watch is always quiet (the tier as it was
// before the fence).
func TestFenceConn(t *testing.T) {
	if !tcpInfoWorks {
		t.Skip("no TCP_INFO here: every connection is unfenced")
	}
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
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer peer.Close()
	cn, fc := watch(raw)
	if fc == unfenced || cn != net.Conn(fc) {
		t.Fatal("a TCP connection is not watched")
	}
	eventually := func(what string, want bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for fc.Quiet() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: quiet() stayed %v", what, !want)
			}
			runtime.Gosched()
		}
	}
	if fc.Quiet() {
		t.Error("quiet with no Read in progress")
	}
	// A Read begins (set by hand, so that no byte is consumed).
	fc.entered.Store(fc.total + 1)
	if !fc.Quiet() {
		t.Error("not quiet in a Read with nothing received")
	}
	if _, err := peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The kernel has the bytes; the reader has not returned from its Read.
	eventually("bytes received during a Read", false)
	fc.entered.Store(0)
	// The reader reads them, then waits in its next Read.
	buf := make([]byte, 5)
	if n, err := fc.Read(buf); err != nil || n != 5 {
		t.Fatalf("Read: %d %v", n, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = fc.Read(make([]byte, 1))
	}()
	eventually("the next Read waiting, everything read applied", true)
	_ = raw.Close()
	<-done

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if cn, fc := watch(a); fc != unfenced || cn != a || !fc.Quiet() {
		t.Error("a connection the fence cannot watch is not left as it is, always quiet")
	}
}
