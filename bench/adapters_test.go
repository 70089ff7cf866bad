package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/lock"
)

const (
	// leaseTTL is the lease of every lock taken here: redsync's default
	// expiry (8s), used for stampede and redislock too. rueidislock keeps its
	// own default KeyValidity (5s, extended in the background). No lock is
	// held anywhere near that long.
	leaseTTL = 8 * time.Second

	// maxWait bounds every benchmark run and so every blocking obtain in it
	// (through the context the harness passes): far more than any wait here
	// takes (the longest, a herd of 32 redislock clients, takes about 3s),
	// small enough that a lost wake-up cannot hang the run for long.
	maxWait = time.Minute
)

// redislock has no retry by default (NoRetry) and its README recommends no
// interval; its package examples retry with LinearBackoff(100ms)
// (ExampleClient_Obtain_retry), so that is what a blocking obtain uses here.
// The flag lets a reader try another interval, e.g. -redislock.backoff=10ms.
var redislockBackoff = flag.Duration("redislock.backoff", 100*time.Millisecond,
	"retry interval of redislock's LinearBackoff in blocking obtains")

// errBusy is what every adapter returns when obtain(wait=false) finds the lock
// held by someone else.
var errBusy = errors.New("bench: lock busy")

// locker is the one thing the benchmarks need from a lock library.
type locker interface {
	// obtain takes the lock named key. With wait it blocks, using the
	// library's own wait mechanism, until the lock is obtained or ctx ends;
	// without it, it returns errBusy when the lock is held.
	obtain(ctx context.Context, key string, wait bool) (release func() error, err error)
	// close releases the locker's Redis client and everything it started.
	close() error
}

// staller is a locker whose adapter works around lost wake-ups by
// restarting a wait (see rueidisStall).
type staller interface{ stalled() int64 }

// stalls sums the restarted waits of lockers.
func stalls(lockers ...locker) int64 {
	var n int64
	for _, l := range lockers {
		if s, ok := l.(staller); ok {
			n += s.stalled()
		}
	}
	return n
}

// impl is one lock library under test.
type impl struct {
	name string
	// open returns a locker with its own Redis client, so its own connection
	// pool (and for stampede its own lock.Client). When attempts is not nil,
	// it is incremented after every acquire attempt whose reply came back
	// (obtained or busy).
	open func(addr string, attempts *atomic.Int64) (locker, error)
	// parked reports whether n callers, each with its own locker whose
	// attempts counters are given, are all parked in obtain(key, wait=true):
	// a release from now on reaches each of them without further help.
	parked func(ctx context.Context, obs *redis.Client, key string, attempts []*atomic.Int64) (bool, error)
}

var impls = []impl{
	{name: "stampede", open: openStampede, parked: stampedeParked},
	{name: "redislock", open: openRedislock, parked: attemptedOnce},
	{name: "redsync", open: openRedsync, parked: attemptedOnce},
	{name: "rueidislock", open: openRueidislock, parked: attemptedOnce},
}

// uncontendedImpls are the lockers of the uncontended benchmarks: every
// library, and stampede again with a fencing number asked for in every hold
// (the others have no fence), which shows what a fence costs.
var uncontendedImpls = append(impls[:len(impls):len(impls)],
	impl{name: "stampede+Fence", open: openStampedeFenced, parked: stampedeParked})

// attemptedOnce: every waiter got the reply to its first acquire attempt.
//
// For the polling libraries (redislock, redsync) that is as parked as they
// get: the waiter now sleeps its retry interval, and a release is only seen
// at its next poll. For rueidislock the attempt's script read the key on the
// waiter's connection, which is what subscribes the connection to its
// invalidation (client-side caching); from then on a release pushes an
// invalidation that wakes the waiter, even if it arrives before the waiter
// reaches its select (the wake channel is buffered).
func attemptedOnce(_ context.Context, _ *redis.Client, _ string, attempts []*atomic.Int64) (bool, error) {
	for _, a := range attempts {
		if a.Load() < 1 {
			return false, nil
		}
	}
	return true, nil
}

// stampedeParked: every waiter is in the lock's wait queue. A waiter joins
// the queue (a sorted set) in the acquire attempt it makes after Redis
// confirmed its SUBSCRIBE to the wake channel, so a queued waiter is woken
// by the next release.
func stampedeParked(ctx context.Context, obs *redis.Client, key string, attempts []*atomic.Int64) (bool, error) {
	n, err := obs.ZCard(ctx, stampedeQueueKey(key)).Result()
	return n >= int64(len(attempts)), err
}

// stampedeQueueKey is the name of the wait queue of lock key under the
// default Options.Prefix (see lock.Client.names).
func stampedeQueueKey(key string) string {
	return hashtag.Base("stampede:lock:", key) + ":q"
}

// newRedis returns a go-redis client with the library defaults, counting
// the replies to the commands named in attemptCmds when attempts is set.
func newRedis(addr string, attempts *atomic.Int64, attemptCmds ...string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	if attempts != nil {
		names := map[string]bool{}
		for _, c := range attemptCmds {
			names[c] = true
		}
		rdb.AddHook(attemptHook{names: names, n: attempts})
	}
	return rdb
}

// attemptHook counts replies (success or nil) to the named commands.
type attemptHook struct {
	names map[string]bool
	n     *atomic.Int64
}

func (h attemptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h attemptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.names[cmd.Name()] && (err == nil || errors.Is(err, redis.Nil)) {
			h.n.Add(1)
		}
		return err
	}
}

func (h attemptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// --- stampede -------------------------------------------------------------

type stampedeLocker struct {
	rdb   *redis.Client
	c     *lock.Client
	fence bool // ask for the fencing number in every hold
}

func openStampede(addr string, _ *atomic.Int64) (locker, error) {
	// stampede's waiters are seen in its queue (stampedeParked): no counting.
	rdb := newRedis(addr, nil)
	return &stampedeLocker{rdb: rdb, c: lock.New(rdb, lock.Options{})}, nil
}

func openStampedeFenced(addr string, _ *atomic.Int64) (locker, error) {
	rdb := newRedis(addr, nil)
	return &stampedeLocker{rdb: rdb, c: lock.New(rdb, lock.Options{}), fence: true}, nil
}

func (s *stampedeLocker) obtain(ctx context.Context, key string, wait bool) (func() error, error) {
	var opts []lock.ObtainOption
	if wait {
		opts = append(opts, lock.WaitFor(maxWait))
	}
	l, err := s.c.Obtain(ctx, key, leaseTTL, opts...)
	if errors.Is(err, lock.ErrNotObtained) && !wait {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	if s.fence {
		if _, err := l.FenceContext(ctx); err != nil {
			return nil, errors.Join(err, l.Release(ctx))
		}
	}
	return func() error { return l.Release(ctx) }, nil
}

func (s *stampedeLocker) close() error {
	return errors.Join(s.c.Close(), s.rdb.Close())
}

// --- bsm/redislock --------------------------------------------------------

type redislockLocker struct {
	rdb *redis.Client
	c   *redislock.Client
}

func openRedislock(addr string, attempts *atomic.Int64) (locker, error) {
	// Each attempt is one run of its obtain script.
	rdb := newRedis(addr, attempts, "evalsha", "eval")
	return &redislockLocker{rdb: rdb, c: redislock.New(rdb)}, nil
}

func (r *redislockLocker) obtain(ctx context.Context, key string, wait bool) (func() error, error) {
	var opt *redislock.Options // nil: NoRetry, the library default
	if wait {
		// Retries until ctx (which always has a deadline here: without one,
		// redislock would give up after the lease) ends.
		opt = &redislock.Options{RetryStrategy: redislock.LinearBackoff(*redislockBackoff)}
	}
	l, err := r.c.Obtain(ctx, key, leaseTTL, opt)
	if errors.Is(err, redislock.ErrNotObtained) && !wait {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(ctx) }, nil
}

func (r *redislockLocker) close() error { return r.rdb.Close() }

// --- go-redsync/redsync ---------------------------------------------------

type redsyncLocker struct {
	rdb *redis.Client
	rs  *redsync.Redsync
}

func openRedsync(addr string, attempts *atomic.Int64) (locker, error) {
	// Each attempt starts with SET NX (a failed one is followed by its
	// delete script).
	rdb := newRedis(addr, attempts, "set")
	return &redsyncLocker{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb))}, nil
}

func (r *redsyncLocker) obtain(ctx context.Context, key string, wait bool) (func() error, error) {
	var m *redsync.Mutex
	var err error
	if wait {
		// The default retry delay (random 50-250ms) is kept; only the
		// number of tries (default 32) is lifted, so the wait ends with ctx
		// and not after about 5s.
		m = r.rs.NewMutex(key, redsync.WithTries(math.MaxInt32))
		err = m.LockContext(ctx)
	} else {
		m = r.rs.NewMutex(key)
		err = m.TryLockContext(ctx)
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, errBusy
		}
	}
	if err != nil {
		return nil, err
	}
	return func() error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: unlock of %q released nothing", key)
		}
		return err
	}, nil
}

func (r *redsyncLocker) close() error { return r.rdb.Close() }

// --- rueidis/rueidislock --------------------------------------------------

type rueidisLocker struct {
	l      rueidislock.Locker
	stalls atomic.Int64
}

// rueidisStall is how long a blocking rueidislock obtain may wait before
// the adapter gives up that wait and starts a new one. rueidislock v1.0.79
// can miss the wake-up of a waiter (with KeyMajority 1): the goroutine that
// handles a failed attempt may run before try() counts the failure, take
// the attempt for a released lock and drop the waiter's gate, so the
// invalidation that should wake it finds no gate and the waiter sleeps
// until its context ends. That happens about once in thousands of waits
// with 32 clients on 2 cores. Legitimate waits here last milliseconds; a
// stall costs 1s and is counted (the "stalls" metric), so it shows in the
// numbers instead of failing the run.
const rueidisStall = time.Second

func openRueidislock(addr string, attempts *atomic.Int64) (locker, error) {
	opt := rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		// One Redis: one key per lock instead of a majority of 3 keys, and
		// NOLOOP tracking (Redis >= 7.0.5), both as its README advises.
		KeyMajority:    1,
		NoLoopTracking: true,
		// The deadline of one acquire script (default 20ms, meant for
		// moving on to the next of several keys): with one key there is
		// no next, and on a loaded machine 20ms failed whole runs with
		// "context deadline exceeded".
		TryNextAfter: time.Second,
	}
	if attempts != nil {
		opt.ClientBuilder = func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countingRueidis{Client: c, n: attempts}, nil
		}
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l}, nil
}

func (r *rueidisLocker) obtain(ctx context.Context, key string, wait bool) (func() error, error) {
	if !wait {
		_, cancel, err := r.l.TryWithContext(ctx, key)
		if errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		// cancel deletes the key and returns once that is done.
		return func() error { cancel(); return nil }, nil
	}
	for {
		// The lock's context is derived from wctx: cancelling wctx releases
		// the lock, so it is cancelled only by the stall timer or on release.
		wctx, wcancel := context.WithCancel(ctx)
		stall := time.AfterFunc(rueidisStall, wcancel)
		_, cancel, err := r.l.WithContext(wctx, key)
		if stall.Stop() {
			if err != nil {
				wcancel()
				return nil, err
			}
			return func() error { cancel(); wcancel(); return nil }, nil
		}
		// The stall timer fired: give up this wait (or a lock obtained just
		// as it fired, which its cancelled context releases) and wait again.
		if err == nil {
			cancel()
		}
		wcancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.stalls.Add(1)
	}
}

// stalled returns how many blocking obtains had to be restarted.
func (r *rueidisLocker) stalled() int64 { return r.stalls.Load() }

func (r *rueidisLocker) close() error { r.l.Close(); return nil }

// countingRueidis counts replies (success or nil) to scripts: every acquire
// attempt of rueidislock is one script run.
type countingRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cs := cmd.Commands() // read before Do: the command is recycled after it
	script := len(cs) > 0 && (cs[0] == "EVALSHA" || cs[0] == "EVAL")
	res := c.Client.Do(ctx, cmd)
	if err := res.Error(); script && (err == nil || rueidis.IsRedisNil(err)) {
		c.n.Add(1)
	}
	return res
}
