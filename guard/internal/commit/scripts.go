package commit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"
)

// The read and fill scripts of concurrent misses, batched like hits
// (the hit queue's): a call that arrives while another call of the same script
// is in flight is queued, and the queue goes out as one pipeline when the
// call in flight is back (group commit). A lone call is sent at once, as
// before; a herd of misses on different keys (a cold start, a flushed
// Redis) shares round trips, so its socket reads and writes no longer grow
// with the number of keys. Each queued call is answered within
// RedisTimeout (padded) of when it queued, not counting the time this
// process kept the flusher from running (batches go out in queue order,
// each bounded so from its oldest call), and its caller judges its
// own outcome, so the breaker sees every call as before. On a
// *redis.ClusterClient the pipeline is split by node.

// Scripts batches concurrent calls of one script.
type Scripts struct {
	queue[*scriptReq]
	rdb      redis.UniversalClient
	script   *redis.Script
	rt       func() time.Duration // RedisTimeout, padded (see NewScripts)
	batching bool                 // false: every call goes out on its own
}

// scriptReq is one queued call; see getReq for who owns it when.
type scriptReq struct {
	call  lua.Call
	enq   time.Time
	val   []any
	err   error
	state atomic.Int32 // reqWaiting, reqAnswered, reqAbandoned
	done  chan struct{}
}

// NewScripts returns the batcher of script's calls on rdb, each answered
// within timeout() (RedisTimeout, padded: see NewHits), asked when the
// call is sent. Batches hold at most max calls; with max at most 1, every
// call goes out on its own.
func NewScripts(rdb redis.UniversalClient, script *redis.Script, max int, timeout func() time.Duration) *Scripts {
	q := &Scripts{rdb: rdb, script: script, rt: timeout, batching: max > 1}
	q.max, q.flush = max, q.flushScripts
	return q
}

// Call calls the script with c, within timeout() of the call or when ctx
// ends, if that is sooner.
func (q *Scripts) Call(ctx context.Context, c lua.Call) ([]any, error) {
	if q.batching {
		q.mu.Lock()
		if !q.alone() {
			r := &scriptReq{call: c, enq: time.Now(), done: make(chan struct{}, 1)}
			q.push(r)
			q.mu.Unlock()
			return r.wait(ctx)
		}
		q.mu.Unlock()
		// Deferred: the queue must move on however this call ends.
		defer q.loneDone()
	}
	rctx, cancel := context.WithTimeout(ctx, q.rt())
	defer cancel()
	return q.script.Run(rctx, q.rdb, c.Keys, c.Args...).Slice()
}

// wait returns the answer to r, or ctx's error if the caller leaves first.
func (r *scriptReq) wait(ctx context.Context) ([]any, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqAbandoned) {
			return nil, ctx.Err()
		}
		<-r.done
	}
	return r.val, r.err
}

// flushScripts sends batch as one pipeline and answers its callers.
func (q *Scripts) flushScripts(batch []*scriptReq, late time.Duration) {
	ctx, cancel := context.WithDeadline(context.Background(), batch[0].enq.Add(q.rt()+late))
	defer cancel()
	calls := make([]lua.Call, len(batch))
	for i, r := range batch {
		calls[i] = r.call
	}
	for i, c := range lua.Scripts(ctx, q.rdb, q.script, calls) {
		r := batch[i]
		r.val, r.err = c.Slice()
		if r.state.CompareAndSwap(reqWaiting, reqAnswered) {
			r.done <- struct{}{}
		}
	}
}

// Wait waits for the flushes running.
func (q *Scripts) Wait() {
	if q.batching {
		q.queue.wait()
	}
}

// OnQueued sets a func called, under the queue's lock, with the length of
// the queue after each call queued (tests).
func (q *Scripts) OnQueued(f func(n int)) { q.testQueued = f }
