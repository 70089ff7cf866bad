package guard

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

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
// batch by node. Each queued caller still waits on its own ctx, bounded by
// RedisTimeout from when it queued, and judges its own outcome (success,
// failure, or no verdict when it left): the breaker sees every caller as it
// did when each sent its own GET.
//
// Pipelines bypass go-redis's client-side cache, so on a client with
// client-side caching every hit is a plain GET, which that cache can serve
// without a round trip (see the package doc).

// defaultHitBatch is the default of Options.MaxHitBatch.
const defaultHitBatch = 256

// hitQueue batches concurrent fast-path GETs. A nil *hitQueue sends every
// GET on its own.
type hitQueue struct {
	rdb redis.UniversalClient
	max int // most GETs in one pipeline
	tmo func() (context.Context, context.CancelFunc)

	mu      sync.Mutex
	busy    bool      // a GET or a pipeline of GETs is in flight
	q       []*getReq // waiting for the next flush
	flushes sync.WaitGroup
}

// getReq is one queued GET. Its owner is the caller until it is queued,
// the flusher until the flusher answers it (state 0 → 1) or finds it
// abandoned (state 2), then the caller again, or the pool.
type getReq struct {
	name  string
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
	r.name, r.val, r.err = "", "", nil
	r.state.Store(reqWaiting)
	reqPool.Put(r)
}

// newHitQueue returns the batcher for rdb, or nil when hits are not to be
// batched: MaxHitBatch is Disabled, or rdb caches GETs client-side.
func newHitQueue(rdb redis.UniversalClient, o Options) *hitQueue {
	if o.MaxHitBatch <= 1 || clientSideCaching(rdb) {
		return nil
	}
	return &hitQueue{
		rdb: rdb, max: o.MaxHitBatch,
		tmo: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), o.RedisTimeout)
		},
	}
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

// get returns the value of the Redis string name. rctx is the caller's
// ctx bounded by RedisTimeout: the caller leaves when it ends, whether or
// not its GET was sent.
func (q *hitQueue) get(rctx context.Context, rdb redis.UniversalClient, name string) (string, error) {
	if q == nil {
		return rdb.Get(rctx, name).Result()
	}
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		// Deferred: the queue must move on however this GET ends (a hook
		// that panics, runtime.Goexit).
		defer q.loneDone()
		return rdb.Get(rctx, name).Result()
	}
	r := reqPool.Get().(*getReq)
	r.name = name
	q.q = append(q.q, r)
	q.mu.Unlock()
	select {
	case <-r.done:
	case <-rctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqAbandoned) {
			return "", rctx.Err() // the flusher recycles r
		}
		<-r.done // answered as this caller gave up: take the answer
	}
	s, err := r.val, r.err
	putReq(r)
	return s, err
}

// loneDone is called when a lone caller's GET is back: the callers that
// queued meanwhile get a flusher goroutine of their own, so that this
// caller returns now.
func (q *hitQueue) loneDone() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		q.busy = false
		return
	}
	q.flushes.Add(1)
	go q.drain()
}

// drain flushes the queue until it is empty.
func (q *hitQueue) drain() {
	defer q.flushes.Done()
	var batch []*getReq
	for {
		q.mu.Lock()
		n := min(len(q.q), q.max)
		if n == 0 {
			q.busy = false
			q.mu.Unlock()
			return
		}
		batch = append(batch[:0], q.q[:n]...)
		rest := copy(q.q, q.q[n:])
		clear(q.q[rest:])
		q.q = q.q[:rest]
		q.mu.Unlock()
		q.flush(batch)
		clear(batch)
		// The callers just answered are likely to call again at once: let
		// them queue before the next flush takes the queue. Else those who
		// queued during this flush go out alone, these queue behind them,
		// and the callers settle into two cohorts, each in half-size
		// batches. Yield while they keep coming, a few times at most.
		for range 4 {
			n := q.queued()
			runtime.Gosched()
			if q.queued() == n {
				break
			}
		}
	}
}

func (q *hitQueue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

// flush sends batch as one pipeline (or one GET) and answers its callers.
func (q *hitQueue) flush(batch []*getReq) {
	ctx, cancel := q.tmo()
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
		q.flushes.Wait()
	}
}
