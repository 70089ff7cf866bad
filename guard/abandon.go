package guard

import (
	"context"
	"math"
	"time"
)

// A loader is called with a ctx that ends after LoadTimeout, but nothing
// makes it return then: a loader that ignores its ctx (a driver call with no
// deadline, a lock it waits on) would hold its flight, its lease (renewed by
// the watchdog, so no other node could refresh the key) and Close (which
// waits for background refreshes) for as long as it runs. So the guard
// waits for a loader only LoadTimeout plus a grace, then abandons it: its
// callers get ErrLoadTimeout, the lease is settled as for any failed load,
// and the loader's goroutine is left to finish on its own. Its result, if
// it ever comes, is dropped.

// loadGrace is how long past LoadTimeout the guard still waits for a
// loader to return: a tenth of LoadTimeout, at least 1ms and at most 1s, so
// that a loader that does honour its ctx returns its own error.
func loadGrace(timeout time.Duration) time.Duration {
	return min(max(timeout/10, time.Millisecond), time.Second)
}

// awaitLoader waits for a loader's result on done, LoadTimeout and its
// grace at most; ok is false when the loader was abandoned. ctx is the
// loader's, whose deadline is LoadTimeout: an abandoned loader's ctx is
// done, with DeadlineExceeded, before awaitLoader returns. (After a stall
// of the process both timers had passed, and the caller's deferred
// cancel could run before the deadline's timer: the loader was told
// Canceled, as if its caller had left, and a proxy in front of a slow
// upstream logged a timeout as a cancelled call.)
func awaitLoader[R any](g *Group, ctx context.Context, done <-chan R) (r R, ok bool) {
	d := g.opts.LoadTimeout + loadGrace(g.opts.LoadTimeout)
	if d < 0 {
		d = math.MaxInt64 // a LoadTimeout of "forever" must not overflow
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r = <-done:
		return r, true
	case <-t.C:
		<-ctx.Done() // its deadline passed already: at once
		return r, false
	}
}
