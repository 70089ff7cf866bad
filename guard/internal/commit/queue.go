package commit

import (
	"runtime"
	"sync"
	"time"
)

// queue is group commit for one kind of Redis call, shared by the
// hits' GETs (hitQueue) and the misses' scripts (scriptQueue). A call
// that finds the queue idle marks it busy and is sent at once, on its
// caller's goroutine; a call that finds it busy is appended to q (both
// under mu, by the user of the queue). When the lone call is back,
// loneDone hands what queued meanwhile to a flusher goroutine, which sends
// it in batches of at most max, one batch at a time, until the queue is
// empty and idle again.
type queue[R any] struct {
	max int // most calls in one batch
	// flush sends one batch and answers its callers; late is how long
	// this process kept the flusher from running since it was started
	// (see drain), which no call's RedisTimeout should pay for.
	flush func(batch []R, late time.Duration)
	// yield: after a batch, let the callers it answered queue again before
	// the next batch takes the queue (see drain).
	yield bool

	// window is how many round trips may be in flight at once (at least
	// 1): while one is out, the next may be sent.
	window int

	mu       sync.Mutex
	busy     bool // a call or a batch is in flight
	inflight int  // round trips in flight: lone calls and flushers
	q        []R  // waiting for the next batch
	// flushing counts the flusher goroutines running; drained, made by a
	// waiter, is closed when it drops to 0. Not a sync.WaitGroup: a call
	// still in flight when the Group closes may start a flusher while
	// Close waits, and a WaitGroup's Add must not race with its Wait.
	flushing int
	drained  chan struct{}

	testQueued func(n int) // tests: called under mu with len(q) after a call queued
}

// push appends r, with mu held.
func (c *queue[R]) push(r R) {
	c.q = append(c.q, r)
	if c.testQueued != nil {
		c.testQueued(len(c.q))
	}
	c.kick()
}

// alone reports, with mu held, whether a call may go out at once, on its
// own: a round trip is free and nobody is queued. If so it takes the
// round trip, which its caller gives back with loneDone.
func (c *queue[R]) alone() bool {
	if c.inflight >= max(c.window, 1) || len(c.q) > 0 {
		return false
	}
	c.inflight++
	c.busy = true
	return true
}

// kick starts a flusher, with mu held, when calls are queued and a round
// trip is free.
func (c *queue[R]) kick() {
	if len(c.q) == 0 || c.inflight >= max(c.window, 1) {
		return
	}
	c.inflight++
	c.busy = true
	c.flushing++
	go c.drain(time.Now())
}

// loneDone is called when a lone call is back: the calls that queued
// meanwhile get a flusher goroutine of their own, so that the lone caller
// returns now.
func (c *queue[R]) loneDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	c.busy = c.inflight > 0
	c.kick()
}

// drain flushes the queue until it is empty. It was started at kicked:
// on a starved process it may run much later, and its yields take long.
// That time is the process's, not Redis's: it is handed to flush, whose
// deadlines, counted from when the batch's callers queued, it extends.
func (c *queue[R]) drain(kicked time.Time) {
	defer c.drainDone()
	var batch []R
	late := time.Since(kicked)
	for {
		c.mu.Lock()
		n := min(len(c.q), c.max)
		if n == 0 {
			c.inflight--
			c.busy = c.inflight > 0
			c.mu.Unlock()
			return
		}
		batch = append(batch[:0], c.q[:n]...)
		rest := copy(c.q, c.q[n:])
		clear(c.q[rest:])
		c.q = c.q[:rest]
		c.mu.Unlock()
		c.flush(batch, late)
		clear(batch)
		if !c.yield {
			continue
		}
		// The callers just answered are likely to call again at once: let
		// them queue before the next flush takes the queue. Else the next
		// flush takes only those who queued during this one, these queue
		// behind it, and the callers settle into two cohorts that
		// alternate in half-size batches. Yield while they keep coming, a
		// few times at most.
		yielded := time.Now()
		for range 4 {
			n := c.queued()
			runtime.Gosched()
			if c.queued() == n {
				break
			}
		}
		late += time.Since(yielded)
	}
}

func (c *queue[R]) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

// drainDone settles a flusher, however it ends.
func (c *queue[R]) drainDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushing--; c.flushing == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// wait waits for the flushes running, and for those they hand over to (a
// late call may start one meanwhile: it is waited for too).
func (c *queue[R]) wait() {
	c.mu.Lock()
	if c.flushing == 0 {
		c.mu.Unlock()
		return
	}
	if c.drained == nil {
		c.drained = make(chan struct{})
	}
	ch := c.drained
	c.mu.Unlock()
	<-ch
}
