package commit

import (
	"context"
	"sync/atomic"
	"time"
)

// A lone hit's GET is bounded by RedisTimeout. A context.WithTimeout of its
// own costs a hit five of its twelve allocations and a timer, so the
// hits of a Group share deadline contexts instead: each one ends
// RedisTimeout after it was made, and a hit takes the newest one while it
// still has at least nine tenths of RedisTimeout to run, else makes the
// next. A hit is thus bounded by between 0.9 and 1 RedisTimeout, and a
// Group under load makes about ten contexts per RedisTimeout, not one per
// hit.
//
// The hit keeps its caller's values (a tracing span, say), not its
// cancellation: go-redis bounds a command in flight by its deadline and
// never by cancellation, so only a wait for a pooled connection would
// have ended sooner, and that wait is bounded by the same deadline.

// sharedDeadline hands out the deadline contexts of a Group's hits.
type sharedDeadline struct {
	cur atomic.Pointer[deadline]
}

// deadline is a context's deadline and done channel, closed by a timer at
// that deadline.
type deadline struct {
	until time.Time
	done  chan struct{}
}

// bounded returns ctx's values bounded by a deadline between 0.9 and 1
// timeout from now.
func (s *sharedDeadline) bounded(ctx context.Context, timeout time.Duration) context.Context {
	now := time.Now()
	d := s.cur.Load()
	if d == nil || d.until.Sub(now) < timeout-timeout/10 {
		d = &deadline{until: now.Add(timeout), done: make(chan struct{})}
		time.AfterFunc(timeout, func() { close(d.done) })
		s.cur.Store(d)
	}
	return &boundedCtx{d: d, values: ctx}
}

// boundedCtx is a context that ends at a shared deadline and answers
// Value from the caller's ctx.
type boundedCtx struct {
	d      *deadline
	values context.Context
}

func (b *boundedCtx) Deadline() (time.Time, bool) { return b.d.until, true }
func (b *boundedCtx) Done() <-chan struct{}       { return b.d.done }
func (b *boundedCtx) Value(key any) any           { return b.values.Value(key) }

func (b *boundedCtx) Err() error {
	select {
	case <-b.d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// hasSooner reports whether ctx ends within timeout from now.
func hasSooner(ctx context.Context, timeout time.Duration) bool {
	dl, has := ctx.Deadline()
	return has && time.Until(dl) <= timeout
}
