package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fast path's GETs, batched when callers overlap. A GET costs Redis
// 0.4 µs, but its round trip costs the client and the server a socket write
// and a read each, and under concurrency those system calls, not Redis, are
// what a hit pays for. So the hit GETs of callers that arrive while another
// is in flight are queued, and sent as one pipeline as soon as the GET or
// pipeline in flight comes back (group commit): a lone caller's GET goes out
// at once, on its own goroutine, exactly as before; concurrent callers share
// round trips, one pipeline at a time.
//
// The batcher is the guard's own rather than go-redis's AutoPipeline, which
// is marked experimental: this one needs only Pipeline, which every
// UniversalClient has, and on a *redis.ClusterClient Pipeline splits the
// batch by node. Each queued caller still waits on its own ctx and is
// answered within RedisTimeout of when it queued; it judges its own
// outcome (success, failure, or no verdict when it left): the breaker sees
// every caller as it did when each sent its own GET.
//
// Pipelines bypass go-redis's client-side cache, so on a client with
// client-side caching every hit is a plain GET, which that cache can serve
// without a round trip (see the package doc).

// defaultHitBatch is the default of Options.MaxHitBatch.
const defaultHitBatch = 256

// hitQueue batches concurrent fast-path GETs. A nil *hitQueue sends every
// GET on its own.
type hitQueue struct {
	commitQueue[*getReq]
	rdb redis.UniversalClient
	rt  time.Duration // RedisTimeout
}

// getReq is one queued GET. Its owner is the caller until it is queued,
// the flusher until the flusher answers it (state 0 → 1) or finds it
// abandoned (state 2), then the caller again, or the pool.
type getReq struct {
	name  string
	enq   time.Time // when it was queued: its RedisTimeout runs from here
	val   string
	err   error
	state atomic.Int32 // reqWaiting, reqAnswered, reqAbandoned
	done  chan struct{}
}

const (
	reqWaiting int32 = iota
	reqAnswered
	reqAbandoned
)

var reqPool = sync.Pool{New: func() any { return &getReq{done: make(chan struct{}, 1)} }}

func putReq(r *getReq) {
	r.name, r.val, r.err, r.enq = "", "", nil, time.Time{}
	r.state.Store(reqWaiting)
	reqPool.Put(r)
}

// newHitQueue returns the batcher for rdb, or nil when hits are not to be
// batched: MaxHitBatch is Disabled, or rdb caches GETs client-side.
func newHitQueue(rdb redis.UniversalClient, o Options) *hitQueue {
	if o.MaxHitBatch <= 1 || clientSideCaching(rdb) {
		return nil
	}
	q := &hitQueue{rdb: rdb, rt: o.RedisTimeout}
	q.max, q.flush, q.yield = o.MaxHitBatch, q.flushGets, true
	return q
}

// clientSideCaching reports whether rdb was built with go-redis's
// client-side cache, which serves plain GETs only.
func clientSideCaching(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return false
	}
	o := c.Options()
	return o.ClientSideCacheConfig != nil || o.ClientSideCache != nil
}

// get returns the value of the Redis string name, within timeout
// (RedisTimeout) of the call, or when ctx ends if that is sooner.
//
// A queued caller needs no timer of its own: batches go out in the order
// their callers queued, each bounded by RedisTimeout from when its oldest
// caller queued, so every round trip ahead of a caller, and its own, ends
// within RedisTimeout of its queueing. It waits on its own ctx only, which
// saves the context.WithTimeout (allocations and a timer) a lone caller
// pays.
func (q *hitQueue) get(ctx context.Context, rdb redis.UniversalClient, name string, timeout time.Duration, sd *sharedDeadline) (string, error) {
	if q != nil {
		q.mu.Lock()
		if q.busy {
			r := reqPool.Get().(*getReq)
			r.name, r.enq = name, time.Now()
			q.queue(r)
			q.mu.Unlock()
			return r.wait(ctx)
		}
		q.busy = true
		q.mu.Unlock()
		// Deferred: the queue must move on however this GET ends (a hook
		// that panics, runtime.Goexit).
		defer q.loneDone()
	}
	if dl, has := ctx.Deadline(); !has || time.Until(dl) > timeout {
		ctx = sd.bounded(ctx, timeout)
	}
	return rdb.Get(ctx, name).Result()
}

// wait returns the answer to r, or ctx's error if the caller leaves first.
func (r *getReq) wait(ctx context.Context) (string, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqAbandoned) {
			return "", ctx.Err() // the flusher recycles r
		}
		<-r.done // answered as this caller gave up: take the answer
	}
	s, err := r.val, r.err
	putReq(r)
	return s, err
}

// flushGets sends batch as one pipeline (or one GET) and answers its
// callers.
func (q *hitQueue) flushGets(batch []*getReq) {
	// batch[0] queued first: this bound is within RedisTimeout of when
	// each of the batch's callers queued.
	ctx, cancel := context.WithDeadline(context.Background(), batch[0].enq.Add(q.rt))
	defer cancel()
	if len(batch) == 1 {
		r := batch[0]
		r.val, r.err = q.rdb.Get(ctx, r.name).Result()
		answer(r)
		return
	}
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for i, r := range batch {
		cmds[i] = pipe.Get(ctx, r.name)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, r := range batch {
		r.val, r.err = cmds[i].Result()
		answer(r)
	}
}

// answer hands r back to its caller, or to the pool if the caller left.
func answer(r *getReq) {
	if r.state.CompareAndSwap(reqWaiting, reqAnswered) {
		r.done <- struct{}{}
		return
	}
	putReq(r)
}

// wait waits for the flushes running.
func (q *hitQueue) wait() {
	if q != nil {
		q.commitQueue.wait()
	}
}
