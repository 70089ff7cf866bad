package tier

import (
	"net"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// watchedPair returns a watched TCP connection with arrivals, and its
// peer; it skips where io_uring does not behave as arrivals needs.
func watchedPair(t *testing.T) (*fenceConn, net.Conn) {
	t.Helper()
	if !uringWorks() {
		t.Skip("io_uring is missing or refused here: every check asks the kernel")
	}
	raw, peer := tcpPair(t)
	_, fc := watch(raw, true)
	if fc.arr == nil {
		t.Fatal("no arrivals watch for a TCP connection where io_uring works")
	}
	t.Cleanup(func() { _ = fc.Close() })
	return fc, peer
}

// spared reports whether, once the instance's thread has run the work
// an arrival left (the flag down, no run under way), a kernel check that
// finds the socket empty lets the next checks be spared (quiet). The
// thread is woken again by the completions its own run posted, so a
// check may be thrown away a few times: it is tried again, within 5 s.
func spared(t *testing.T, fc *fenceConn) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if fc.arr.mark() == 0 {
			runtime.Gosched() // the work is not run yet
			continue
		}
		if !fc.empty() {
			t.Fatal("not empty with nothing sent")
		}
		if fc.arr.quiet() {
			return true
		}
	}
	return false
}

// TestArrivalsSeenBeforeWriteReturns: once a check found the socket empty,
// the next checks are answered from shared memory (arrivals.quiet); yet
// a byte, a FIN or a reset the peer sent is seen by the first check made
// after the peer's write (or close) returned, with no wait: the kernel
// raised the flag in the write's own call. Writes from this goroutine and
// from another thread (an OS thread of its own, handing over once its
// write returned), many times over; a miss would let the tier serve a
// copy whose report is on the socket.
func TestArrivalsSeenBeforeWriteReturns(t *testing.T) {
	for _, end := range []string{"fin", "reset"} {
		t.Run(end, func(t *testing.T) {
			fc, peer := watchedPair(t)
			written := make(chan struct{})
			next := make(chan bool)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for range next {
					if _, err := peer.Write([]byte{'x'}); err != nil {
						t.Error(err)
					}
					written <- struct{}{}
				}
			}()
			defer close(next)
			buf := make([]byte, 16)
			const n = 2000
			for i := range n {
				// Empty: a kernel check records it, then the checks are spared.
				if !spared(t, fc) {
					t.Fatalf("round %d: the checks are never spared: arrivals does not hold", i)
				}
				if !fc.empty() {
					t.Fatalf("round %d: not empty with nothing sent", i)
				}
				if i%2 == 0 {
					if _, err := peer.Write([]byte{'x'}); err != nil {
						t.Fatal(err)
					}
				} else {
					next <- true
					<-written
				}
				if fc.arr.quiet() || fc.empty() {
					t.Fatalf("round %d: a byte written before the check was not seen (quiet %v)", i, fc.arr.quiet())
				}
				_ = fc.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := fc.Conn.Read(buf); err != nil {
					t.Fatal(err)
				}
			}
			if !spared(t, fc) {
				t.Fatal("the checks are not spared before the end")
			}
			if end == "reset" {
				_ = peer.(*net.TCPConn).SetLinger(0)
			}
			_ = peer.Close()
			if fc.arr.quiet() || fc.empty() {
				t.Fatalf("a %s sent before the check was not seen", end)
			}
		})
	}
}

// TestArrivalsCloseEndsOwner: closing the connection ends the thread of
// its io_uring instance; the checks then ask the kernel, and a connection
// closed says not empty.
func TestArrivalsCloseEndsOwner(t *testing.T) {
	fc, _ := watchedPair(t)
	if !spared(t, fc) {
		t.Fatal("the checks are not spared on an empty socket")
	}
	a := fc.arr
	_ = fc.Close()
	if a.quiet() || fc.empty() {
		t.Fatal("a closed connection's checks are still spared")
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the instance's thread did not end on Close")
	}
}

// TestArrivalsDeadAsksKernel: once the instance can no longer tell (its
// poll ended, its thread stopped: dead), no check is spared, and a byte
// sent is seen.
func TestArrivalsDeadAsksKernel(t *testing.T) {
	fc, peer := watchedPair(t)
	if !spared(t, fc) {
		t.Fatal("the checks are not spared on an empty socket")
	}
	fc.arr.dead.Store(true)
	if fc.arr.quiet() {
		t.Fatal("a check spared by an instance that can no longer tell")
	}
	if !fc.empty() || fc.arr.quiet() {
		t.Fatal("a kernel check of an empty socket: not empty, or spared after")
	}
	if _, err := peer.Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	if fc.empty() {
		t.Fatal("a byte sent was not seen")
	}
}

// TestArrivalsKeepThreads: an instance's thread is given back, not ended,
// when the instance closes. An ended thread takes with it every child
// process started from it with Pdeathsig (as the test kit starts
// redis-server): before, the guard's tests lost their servers at random
// ("connection refused"). Children are started from many threads, then
// instances come and go; every child must live on.
func TestArrivalsKeepThreads(t *testing.T) {
	if !uringWorks() {
		t.Skip("io_uring is missing or refused here")
	}
	var children []*exec.Cmd
	for range 8 {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Skip("no sleep(1) to start:", err)
		}
		children = append(children, cmd)
		runtime.Gosched()
	}
	defer func() {
		for _, c := range children {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for range 40 {
		raw, _ := tcpPair(t)
		_, fc := watch(raw, true)
		_ = fc.Close()
		<-fc.arr.done
	}
	for i, c := range children {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
		if err != nil || pid != 0 {
			t.Fatalf("child %d ended (%v, %v): a thread it was started from ended", i, ws, err)
		}
	}
}

// TestArrivalsBounded: no more than maxArrivals instances (each an OS
// thread) are live at once; a connection past the bound has none, and
// its checks ask the kernel; one that ends makes room.
func TestArrivalsBounded(t *testing.T) {
	if !uringWorks() {
		t.Skip("io_uring is missing or refused here")
	}
	defer func(n int64) { maxArrivals = n }(maxArrivals)
	maxArrivals = liveArrivals.Load() + 2
	var fcs []*fenceConn
	var peers []net.Conn
	for range 3 {
		raw, peer := tcpPair(t)
		_, fc := watch(raw, true)
		fcs, peers = append(fcs, fc), append(peers, peer)
	}
	if fcs[0].arr == nil || fcs[1].arr == nil || fcs[2].arr != nil {
		t.Fatalf("instances %v %v %v; want the first two only", fcs[0].arr != nil, fcs[1].arr != nil, fcs[2].arr != nil)
	}
	if !fcs[2].empty() {
		t.Fatal("not empty with nothing sent")
	}
	if _, err := peers[2].Write([]byte{'x'}); err != nil {
		t.Fatal(err)
	}
	if fcs[2].empty() {
		t.Fatal("a byte sent was not seen without an instance")
	}
	_ = fcs[0].Close()
	<-fcs[0].arr.done
	raw, _ := tcpPair(t)
	_, fc := watch(raw, true)
	if fc.arr == nil {
		t.Fatal("no instance once one ended")
	}
	for _, c := range append(fcs[1:], fc) {
		_ = c.Close()
	}
}
