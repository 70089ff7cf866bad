package commit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/breaker"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// The fast path's GETs, batched when callers overlap. A GET costs Redis
// 0.4 µs, but its round trip costs the client and the server a socket write
// and a read each, and under concurrency those system calls, not Redis, are
// what a hit pays for. So the hit GETs of callers that arrive while another
// is in flight are queued, and sent as one batch (an MGET; see flushGets)
// as soon as a batch in flight comes back (group commit, at most hitWindow
// batches in flight): a lone caller's GET goes out at once, on its own
// goroutine; concurrent callers share round trips.
//
// The batcher is the guard's own rather than go-redis's AutoPipeline, which
// is marked experimental: this one needs only Pipeline, which every
// UniversalClient has (MGET on the two clients it knows), and on a
// *redis.ClusterClient a batch is one MGET per slot, pipelined by node.
// Each queued caller still waits on its own ctx and is answered within
// RedisTimeout (padded: see NewHits) of when it queued, not counting the
// time this process kept the flusher from running; it judges its own
// outcome (success, failure, or no verdict when it left): the breaker sees
// every caller as it did when each sent its own GET.
//
// Pipelines bypass go-redis's client-side cache, so on a client with
// client-side caching every hit is a plain GET, which that cache can serve
// without a round trip (see the package doc).

// Window is how many batches of hits may be in flight at once (a var for
// tests).
var Window = 2

// Hits batches concurrent GETs of cache entries.
type Hits struct {
	queue[*getReq]
	rdb      redis.UniversalClient
	rt       func() time.Duration // RedisTimeout, padded (see NewHits)
	mode     int                  // how a batch is sent: getPipeline, mgetOne, mgetSlots
	batching bool                 // false: every GET goes out on its own
	// bypass: rdb has go-redis's client-side cache, which answers a GET or
	// an MGET from memory, out of the tier's fence: every read goes out in
	// a pipeline, which that cache does not serve.
	bypass bool
	lone   sharedDeadline
}

// getReq is one queued GET. Its owner is the caller until it is queued,
// the flusher until the flusher answers it (state 0 → 1) or finds it
// abandoned (state 2), then the caller again, or the pool.
type getReq struct {
	name  string
	tname string    // the tag's invalidation key, read with name; or ""
	enq   time.Time // when it was queued: its RedisTimeout runs from here
	val   string
	tval  string // tname's value ("" when missing)
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
	r.name, r.tname, r.val, r.tval, r.err, r.enq = "", "", "", "", nil, time.Time{}
	r.state.Store(reqWaiting)
	reqPool.Put(r)
}

// NewHits returns the batcher of GETs on rdb, each answered within
// timeout() (RedisTimeout, padded by how late the process runs its
// goroutines: see package sched), asked when the GET is sent. Batches
// hold at most max GETs; with max at most 1, or on a client that caches
// GETs client-side, every GET goes out on its own.
func NewHits(rdb redis.UniversalClient, max int, timeout func() time.Duration) *Hits {
	q := &Hits{rdb: rdb, rt: timeout, bypass: ClientSideCaching(rdb)}
	if max <= 1 {
		return q
	}
	q.batching = true
	switch rdb.(type) {
	case *redis.Client:
		q.mode = mgetOne
	case *redis.ClusterClient:
		q.mode = mgetSlots
	}
	if q.bypass {
		q.mode = getPipeline
	}
	q.max, q.flush, q.yield, q.window = max, q.flushGets, true, Window
	return q
}

// Batching reports whether q batches GETs.
func (q *Hits) Batching() bool { return q.batching }

// Max returns the most GETs of one batch.
func (q *Hits) Max() int { return q.max }

// ClientSideCaching reports whether rdb was built with go-redis's
// client-side cache, which serves plain GETs only.
func ClientSideCaching(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return false
	}
	o := c.Options()
	return o.ClientSideCacheConfig != nil || o.ClientSideCache != nil
}

// Get returns the value of the Redis string name, and of tname when not
// "" (read in the same command: an MGET; "" when missing), within timeout()
// of the call, or when ctx ends if that is sooner.
//
// A queued caller needs no timer of its own: batches go out in the order
// their callers queued, each bounded by timeout() from when its oldest
// caller queued (plus the time the process kept the flusher from
// running), so every round trip ahead of a caller, and its own, ends
// within that of its queueing. It waits on its own ctx only, which
// saves the context.WithTimeout (allocations and a timer) a lone caller
// pays.
func (q *Hits) Get(ctx context.Context, name, tname string) (string, string, error) {
	rdb := q.rdb
	if q.batching {
		q.mu.Lock()
		if !q.alone() {
			r := reqPool.Get().(*getReq)
			r.name, r.tname, r.enq = name, tname, time.Now()
			q.push(r)
			q.mu.Unlock()
			return r.wait(ctx)
		}
		q.mu.Unlock()
		// Deferred: the queue must move on however this GET ends (a hook
		// that panics, runtime.Goexit).
		defer q.loneDone()
	}
	if timeout := q.rt(); !hasSooner(ctx, timeout) {
		ctx = q.lone.bounded(ctx, timeout)
	}
	if q.bypass {
		r := getReq{name: name, tname: tname}
		q.pipeGets(ctx, []*getReq{&r})
		return r.val, r.tval, r.err
	}
	if tname == "" {
		s, err := rdb.Get(ctx, name).Result()
		return s, "", err
	}
	return getTagged(ctx, rdb, name, tname)
}

// getTagged reads name and tname (a key's entry and its tag's
// invalidation key, in one slot) with one MGET.
func getTagged(ctx context.Context, rdb redis.Cmdable, name, tname string) (string, string, error) {
	vals, err := rdb.MGet(ctx, name, tname).Result()
	s, err := mgetValue(vals, 0, err)
	if err != nil {
		return "", "", err
	}
	t, _ := mgetValue(vals, 1, nil)
	return s, t, nil
}

// wait returns the answer to r, or ctx's error if the caller leaves first.
func (r *getReq) wait(ctx context.Context) (string, string, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqWaiting, reqAbandoned) {
			return "", "", ctx.Err() // the flusher recycles r
		}
		<-r.done // answered as this caller gave up: take the answer
	}
	s, t, err := r.val, r.tval, r.err
	putReq(r)
	return s, t, err
}

// flushGets sends batch as one round trip and answers its callers: one
// MGET of its distinct names on a *redis.Client, one MGET per hash slot
// (pipelined, so one round trip per node) on a *redis.ClusterClient, a
// pipeline of GETs on any other client; a lone GET for a batch of one.
// An MGET costs the client one command to encode and one reply to parse
// instead of one per hit, and Redis one command to dispatch.
func (q *Hits) flushGets(batch []*getReq, late time.Duration) {
	// batch[0] queued first: this bound is within timeout() of when each
	// of the batch's callers queued, and the time the process kept the
	// flusher from running.
	ctx, cancel := context.WithDeadline(context.Background(), batch[0].enq.Add(q.rt()+late))
	defer cancel()
	switch {
	case q.bypass:
		q.pipeGets(ctx, batch)
	case len(batch) == 1 && batch[0].tname == "":
		r := batch[0]
		r.val, r.err = q.rdb.Get(ctx, r.name).Result()
	case len(batch) == 1:
		r := batch[0]
		r.val, r.tval, r.err = getTagged(ctx, q.rdb, r.name, r.tname)
	case q.mode == mgetOne:
		q.mget(ctx, batch)
	case q.mode == mgetSlots:
		q.mgetSlots(ctx, batch)
	default:
		q.pipeGets(ctx, batch)
	}
	for _, r := range batch {
		answer(r)
	}
}

// How a batch of hits is sent.
const (
	getPipeline = iota // a pipeline of GETs
	mgetOne            // one MGET (a *redis.Client)
	mgetSlots          // one MGET per slot, pipelined (a *redis.ClusterClient)
)

// mget reads the names of batch with one MGET.
func (q *Hits) mget(ctx context.Context, batch []*getReq) {
	names, idx := distinctNames(batch)
	vals, err := q.rdb.MGet(ctx, names...).Result()
	for i, r := range batch {
		answerMget(r, vals, idx[i], err)
	}
}

// mgetSlots reads the names of batch with one MGET per slot, in one
// pipeline. A slot's MGET that Redis refuses (TRYAGAIN while the slot
// migrates and its keys are split between two nodes, or any reply about
// the command rather than Redis's health) is read again as GETs, which
// follow ASK redirections one key at a time.
func (q *Hits) mgetSlots(ctx context.Context, batch []*getReq) {
	bySlot := map[int][]*getReq{}
	var slots []int
	for _, r := range batch {
		sl := hashtag.Slot(r.name)
		if bySlot[sl] == nil {
			slots = append(slots, sl)
		}
		bySlot[sl] = append(bySlot[sl], r)
	}
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(slots))
	idxs := make([][]int, len(slots))
	for j, sl := range slots {
		var names []string
		names, idxs[j] = distinctNames(bySlot[sl])
		cmds[j] = pipe.MGet(ctx, names...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var again []*getReq
	for j, sl := range slots {
		vals, err := cmds[j].Result()
		if err != nil && (!breaker.Unwell(err) || redis.HasErrorPrefix(err, "TRYAGAIN")) {
			again = append(again, bySlot[sl]...)
			continue
		}
		for i, r := range bySlot[sl] {
			answerMget(r, vals, idxs[j][i], err)
		}
	}
	if len(again) > 0 {
		q.pipeGets(ctx, again)
	}
}

// pipeGets reads the names of batch with a pipeline of GETs.
func (q *Hits) pipeGets(ctx context.Context, batch []*getReq) {
	pipe := q.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	tcmds := make([]*redis.SliceCmd, len(batch))
	for i, r := range batch {
		if r.tname == "" {
			cmds[i] = pipe.Get(ctx, r.name)
		} else {
			tcmds[i] = pipe.MGet(ctx, r.name, r.tname)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, r := range batch {
		if cmds[i] != nil {
			r.val, r.err = cmds[i].Result()
		} else {
			vals, err := tcmds[i].Result()
			answerMget(r, vals, 0, err)
		}
	}
}

// distinctNames returns the distinct names of batch, and the index in them of
// each request's name: concurrent hits of one hot key cost one name. A
// request's tname, when it has one, is the name after its name.
func distinctNames(batch []*getReq) (names []string, idx []int) {
	names, idx = make([]string, 0, len(batch)), make([]int, len(batch))
	at := make(map[[2]string]int, len(batch))
	for i, r := range batch {
		k := [2]string{r.name, r.tname}
		j, ok := at[k]
		if !ok {
			j = len(names)
			at[k] = j
			names = append(names, r.name)
			if r.tname != "" {
				names = append(names, r.tname)
			}
		}
		idx[i] = j
	}
	return names, idx
}

// answerMget sets r's answer from the MGET reply vals, err, in which r's
// name is the i-th (and its tname, when it has one, the next).
func answerMget(r *getReq, vals []any, i int, err error) {
	r.val, r.err = mgetValue(vals, i, err)
	if r.err == nil && r.tname != "" {
		r.tval, _ = mgetValue(vals, i+1, nil)
	}
}

// mgetValue is what GET would have answered for the i-th name of an MGET
// that answered vals, err: a missing key (or one holding another type,
// which MGET answers as missing too: the read script then drops and
// reports it) is redis.Nil.
func mgetValue(vals []any, i int, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if i >= len(vals) {
		return "", errors.New("guard: short MGET reply")
	}
	s, ok := vals[i].(string)
	if !ok {
		return "", redis.Nil
	}
	return s, nil
}

// answer hands r back to its caller, or to the pool if the caller left.
func answer(r *getReq) {
	if r.state.CompareAndSwap(reqWaiting, reqAnswered) {
		r.done <- struct{}{}
		return
	}
	putReq(r)
}

// Wait waits for the flushes running.
func (q *Hits) Wait() {
	if q.batching {
		q.queue.wait()
	}
}

// Queued returns how many GETs wait for the next batch (tests).
func (q *Hits) Queued() int { return q.queued() }

// Busy reports whether a GET or a batch is in flight (tests).
func (q *Hits) Busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy
}
