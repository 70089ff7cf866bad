package lock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMutualExclusion(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const clients, goroutines, rounds = 4, 6, 15
		key := redistest.Key(t)
		var d overlapDetector
		var wg sync.WaitGroup
		errs := make(chan error, clients*goroutines)
		for range clients {
			c := newTestClient(t, rdb, Options{})
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						l, err := c.Obtain(ctxT(t), key, 5*time.Second, WaitFor(20*time.Second))
						if err != nil {
							errs <- err
							return
						}
						d.enter()
						if err := l.Release(context.Background()); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if got := d.overlap.Load(); got != 0 {
			t.Errorf("%d overlapping holders", got)
		}
		if got, want := d.count.Load(), int64(clients*goroutines*rounds); got != want {
			t.Errorf("counter = %d, want %d (lost updates mean overlapping holders)", got, want)
		}
	})
}

func TestBusyLockNotObtained(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l, err := c.Obtain(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if _, err := c.Obtain(ctxT(t), key, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("second Obtain: got %v, want ErrNotObtained", err)
		}
		if _, err := c.ObtainReentrant(ctxT(t), key, "someone", time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("ObtainReentrant on a token lock: got %v, want ErrNotObtained", err)
		}
	})
}

func TestReentrant(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		var holds []*Lock
		for i := 1; i <= 3; i++ {
			l, err := c.ObtainReentrant(ctx, key, "job-1", time.Minute)
			if err != nil {
				t.Fatalf("hold %d: %v", i, err)
			}
			if got := l.Holds(); got != int64(i) {
				t.Fatalf("hold %d: Holds() = %d", i, got)
			}
			if i > 1 && l.Fence() != holds[0].Fence() {
				t.Fatalf("re-acquire fence = %d, want the first hold's %d", l.Fence(), holds[0].Fence())
			}
			holds = append(holds, l)
		}
		if owner, n := reentrantState(t, rdb, c, key); owner != "job-1" || n != 3 {
			t.Fatalf("hash: owner %q with %d holds, want job-1 with 3", owner, n)
		}
		for i := 2; i >= 0; i-- {
			if _, err := c.ObtainReentrant(ctx, key, "job-2", time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("other owner with %d holds left: got %v, want ErrNotObtained", i+1, err)
			}
			if _, err := c.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("token lock with %d holds left: got %v, want ErrNotObtained", i+1, err)
			}
			if err := holds[i].Release(ctx); err != nil {
				t.Fatalf("release hold %d: %v", i+1, err)
			}
		}
		if n, _ := rdb.Exists(ctx, c.names(key).lock).Result(); n != 0 {
			t.Fatal("lock key still exists after the last hold was released")
		}
		other, err := c.ObtainReentrant(ctx, key, "job-2", time.Minute)
		if err != nil {
			t.Fatalf("other owner after release: %v", err)
		}
		if other.Fence() <= holds[0].Fence() {
			t.Fatalf("next owner's fence %d not above %d", other.Fence(), holds[0].Fence())
		}
		if err := holds[0].Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("double release: got %v, want ErrNotHeld", err)
		}
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStaleHandleCannotTouchNewHolder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		old, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The old holder's lease ends (as after a long GC pause).
		if err := rdb.Del(ctx, c.names(key).lock).Err(); err != nil {
			t.Fatal(err)
		}
		cur, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Refresh(ctx, time.Hour); !errors.Is(err, ErrNotHeld) {
			t.Errorf("stale Refresh: got %v, want ErrNotHeld", err)
		}
		if _, err := old.TTL(ctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("stale TTL: got %v, want ErrNotHeld", err)
		}
		if err := old.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("stale Release: got %v, want ErrNotHeld", err)
		}
		if !isClosed(old.Lost()) {
			t.Error("stale handle's Lost() not closed")
		}
		ttl, err := cur.TTL(ctx)
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Fatalf("current holder TTL = %v, %v; want its own lease intact", ttl, err)
		}
		if err := cur.Release(ctx); err != nil {
			t.Fatalf("current holder Release: %v", err)
		}
	})
}

func TestRefreshAndTTL(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		l, err := c.Obtain(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if err := l.Refresh(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		ttl, err := l.TTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= time.Hour-time.Minute || ttl > time.Hour {
			t.Fatalf("TTL after Refresh(1h) = %v", ttl)
		}
		if err := l.Refresh(ctx, 0); err == nil {
			t.Fatal("Refresh(0) succeeded, want an error")
		}
	})
}

func TestLostWhenLeaseRunsOut(t *testing.T) {
	rdb := redistest.Universal(t)
	c := newTestClient(t, rdb, Options{})
	l, err := c.Obtain(ctxT(t), redistest.Key(t), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, l.Lost(), 5*time.Second, "Lost() after an unrenewed lease")
}

// TestLeaseRunOutSeenWithoutLost: the timer behind Lost starts only once
// something can see it; a lease that ran out is still seen by the hook, by a
// late Lost call, and by Refresh and Fence.
func TestLeaseRunOutSeenWithoutLost(t *testing.T) {
	rdb := redistest.Universal(t)
	const ttl = 100 * time.Millisecond

	t.Run("hook", func(t *testing.T) {
		hooked := make(chan struct{})
		c := newTestClient(t, rdb, Options{Hooks: Hooks{Lost: func(string) { close(hooked) }}})
		if _, err := c.Obtain(ctxT(t), redistest.Key(t), ttl); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, hooked, 5*time.Second, "Hooks.Lost after an unrenewed lease")
	})

	t.Run("late calls", func(t *testing.T) {
		c := newTestClient(t, rdb, Options{})
		ctx := ctxT(t)
		l, err := c.Obtain(ctx, redistest.Key(t), ttl)
		if err != nil {
			t.Fatal(err)
		}
		// Wait for Redis to expire the key, without touching the handle.
		redistest.Eventually(t, 5*time.Second, "the lease to end in Redis", func() bool {
			n, err := rdb.Exists(context.Background(), c.names(l.key).lock).Result()
			return err == nil && n == 0
		})
		if _, err := l.FenceContext(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("FenceContext after the lease ran out: %v, want ErrNotHeld", err)
		}
		if err := l.Refresh(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Refresh after the lease ran out: %v, want ErrNotHeld", err)
		}
		if !isClosed(l.Lost()) {
			t.Fatal("Lost() not closed when first called after the lease ran out")
		}
	})
}

// TestReleaseTwiceKeepsNextHolder: a handle released twice gets ErrNotHeld
// the second time and never releases whoever holds the lock by then: a new
// token holder, or another hold of the same reentrant owner.
func TestReleaseTwiceKeepsNextHolder(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := New(rdb, Options{})
	defer c.Close()
	ctx := ctxT(t)

	t.Run("token lock", func(t *testing.T) {
		key := redistest.Key(t)
		first, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release: got %v, want ErrNotHeld", err)
		}
		if ttl, err := next.TTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("next holder after the double release: TTL %v, %v; want it still held", ttl, err)
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("reentrant owner", func(t *testing.T) {
		key := redistest.Key(t)
		outer, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The owner still holds outer's hold; releasing inner again must not
		// take it away.
		if err := inner.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Release of one hold: got %v, want ErrNotHeld", err)
		}
		if owner, n := reentrantState(t, rdb, c, key); owner != "job" || n != 1 {
			t.Fatalf("owner %q with %d holds left, want job with outer's 1", owner, n)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatalf("outer Release: %v", err)
		}
		if n, err := rdb.Exists(ctx, c.names(key).lock).Result(); err != nil || n != 0 {
			t.Fatalf("lock still there after every hold was released (%v)", err)
		}
	})
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond })
	c := newTestClient(t, rdb, Options{})
	srv.Kill(t)
	_, err := c.Obtain(ctxT(t), "k", time.Second)
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want a connection error (not ErrNotObtained: the lock is not busy)", err)
	}
	if !strings.Contains(err.Error(), "lock: obtain: ") {
		t.Errorf("error %q does not say what failed", err)
	}
}

// TestRefreshShorterWithLateReply: a Refresh to a shorter lease that Redis
// ran but answered too late (paused past the new lease) has an unknown
// outcome for the caller; the handle must then assume the shorter lease,
// so that its Lost closes before another owner can be granted the lock.
func TestRefreshShorterWithLateReply(t *testing.T) {
	srv := redistest.Start(t)
	rdb, admin := srv.Client(t), srv.Client(t)
	c, other := newTestClient(t, rdb, Options{}), newTestClient(t, srv.Client(t), Options{})
	ctx := ctxT(t)
	for _, reentrant := range []bool{false, true} {
		key := redistest.Key(t)
		var l *Lock
		var err error
		if reentrant {
			l, err = c.ObtainReentrant(ctx, key, "job", 2*time.Second)
		} else {
			l, err = c.Obtain(ctx, key, 2*time.Second)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "CLIENT", "PAUSE", 150, "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		// Runs after the pause, sets a 50ms lease, answers too late.
		if err := l.Refresh(ctx, 50*time.Millisecond); err == nil {
			t.Fatal("Refresh answered after its lease ran out succeeded")
		}
		var next *Lock
		redistest.Eventually(t, 5*time.Second, "another owner to get the lock", func() bool {
			next, err = other.Obtain(ctx, key, time.Minute)
			return err == nil
		})
		waitClosed(t, l.Lost(), 100*time.Millisecond, "Lost of the handle whose shortened lease ran out")
		_ = next.Release(ctx)
	}
}

// TestRefreshUnknownOutcomeCapsLaterLeases: a Refresh that failed without a
// reply may still run in Redis later (its command was sent), after a later
// Refresh that succeeded, and leave the shorter lease it asked for. The
// handle must then keep trusting no more than that shorter lease, so that
// Lost closes before another owner can be granted the lock.
func TestRefreshUnknownOutcomeCapsLaterLeases(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, other := newTestClient(t, rdb, Options{}), newTestClient(t, srv.Client(t), Options{})
	ctx := ctxT(t)
	for _, reentrant := range []bool{false, true} {
		key := redistest.Key(t)
		var l *Lock
		var err error
		if reentrant {
			l, err = c.ObtainReentrant(ctx, key, "job", 2*time.Second)
		} else {
			l, err = c.Obtain(ctx, key, 2*time.Second)
		}
		if err != nil {
			t.Fatal(err)
		}
		// A Refresh to 500ms whose reply never comes: Redis is stopped.
		srv.Freeze(t)
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err = l.Refresh(short, 500*time.Millisecond)
		cancel()
		srv.Thaw(t)
		if err == nil || errors.Is(err, ErrNotHeld) {
			t.Fatalf("Refresh to a stopped Redis: %v, want a failure", err)
		}
		if err := l.Refresh(ctx, 2*time.Second); err != nil {
			t.Fatalf("Refresh(2s): %v", err)
		}
		// The first call lands now, as it may: Redis runs the command it
		// was sent. (Run here by hand, so the order is certain.)
		if n, err := lua.LockRefresh.Run(ctx, rdb, []string{l.nm.lock, l.nm.fence()}, l.id, 500, ms(c.opts.FenceRetention)).Int64(); err != nil || n != 1 {
			t.Fatalf("the late refresh: %v, %v", n, err)
		}
		var next *Lock
		redistest.Eventually(t, 5*time.Second, "another owner to get the lock", func() bool {
			next, err = other.Obtain(ctx, key, time.Minute)
			return err == nil
		})
		waitClosed(t, l.Lost(), 100*time.Millisecond, "Lost of the handle whose lease a late Refresh cut")
		_ = next.Release(ctx)
	}
}

// TestConcurrentRefreshesInOrder: two Refresh calls on one handle (a
// renewer and the worker, say) must not both be in flight: their replies
// could come back in another order than Redis ran them, and the handle
// would trust the lease of the reply that came last rather than the lease
// Redis kept. A hook holds back the reply of the first call, which asks for
// a long lease, until a second call ran (or 300ms passed: the second call
// must wait its turn).
func TestConcurrentRefreshesInOrder(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	other := newTestClient(t, srv.Client(t), Options{})
	ctx := ctxT(t)
	if err := lua.LockRefresh.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err) // so that each Refresh is one EVALSHA
	}
	hook := &holdFirstReply{firstRan: make(chan struct{}), secondRan: make(chan struct{})}
	rdb.AddHook(hook)
	c := newTestClient(t, rdb, Options{})
	key := redistest.Key(t)
	l, err := c.Obtain(ctx, key, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	long := make(chan error, 1)
	go func() { long <- l.Refresh(ctx, 2*time.Second) }()
	<-hook.firstRan
	if err := l.Refresh(ctx, 300*time.Millisecond); err != nil {
		t.Fatalf("short Refresh: %v", err)
	}
	if err := <-long; err != nil {
		t.Fatalf("long Refresh: %v", err)
	}
	var next *Lock
	redistest.Eventually(t, 5*time.Second, "another owner to get the lock", func() bool {
		next, err = other.Obtain(ctx, key, time.Minute)
		return err == nil
	})
	_ = next.Release(ctx)
	waitClosed(t, l.Lost(), 100*time.Millisecond, "Lost of the handle once the lease Redis kept ran out")
}

// holdFirstReply holds back the reply of the first EVALSHA sent once armed
// until a second one ran, or 300ms passed.
type holdFirstReply struct {
	armed               atomic.Bool
	calls               atomic.Int32
	firstRan, secondRan chan struct{}
}

func (h *holdFirstReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdFirstReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdFirstReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || cmd.Name() != "evalsha" {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		switch h.calls.Add(1) {
		case 1:
			close(h.firstRan)
			select {
			case <-h.secondRan:
			case <-time.After(300 * time.Millisecond):
			}
		case 2:
			close(h.secondRan)
		}
		return err
	}
}

// TestObtainLostReply: an Obtain whose grant Redis made but whose reply
// was lost (the connection reset after the command ran; go-redis sends it
// again) holds the lock: the retry finds its own token, not a holder's.
// Every way of obtaining is tried: a token lock with and without a wait,
// a reentrant hold.
func TestObtainLostReply(t *testing.T) {
	srv := redistest.Start(t)
	p := newReplyDropper(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := srv.Client(t)
	c := newTestClient(t, rdb, Options{})
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		obtain func(key string) (*Lock, error)
	}{
		{"token", func(k string) (*Lock, error) { return c.Obtain(ctxT(t), k, 5*time.Second) }},
		{"token, WaitFor", func(k string) (*Lock, error) { return c.Obtain(ctxT(t), k, 5*time.Second, WaitFor(time.Second)) }},
		{"reentrant", func(k string) (*Lock, error) { return c.ObtainReentrant(ctxT(t), k, "me", 5*time.Second) }},
	} {
		key := redistest.Key(t, tc.name)
		p.armed.Store(true)
		l, err := tc.obtain(key)
		if err != nil {
			t.Fatalf("%s: Obtain with its reply lost: %v, want the lock (it was granted)", tc.name, err)
		}
		if p.armed.Load() {
			t.Fatalf("%s: no reply was dropped: not exercised", tc.name)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatalf("%s: Release: %v", tc.name, err)
		}
		if n, err := admin.Exists(ctxT(t), c.names(key).lock).Result(); err != nil || n != 0 {
			t.Fatalf("%s: the lock is still in Redis after Release (%d, %v)", tc.name, n, err)
		}
	}
}

// raceWithRelease runs, rounds times on a fresh lock, op concurrently with
// the lock's Release, and fails the test if Hooks.Lost fires for a lock
// whose Release returned nil, or if Release or op returns an error other
// than ErrNotHeld. It returns how many Releases, and how many ops,
// returned nil.
func raceWithRelease(t *testing.T, rounds int, op func(l *Lock) error) (relNil, opNil int) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	var lost, released atomic.Int32
	c := newTestClient(t, rdb, Options{Hooks: Hooks{
		Lost:     func(string) { lost.Add(1) },
		Released: func(string, time.Duration) { released.Add(1) },
	}})
	for i := range rounds {
		l, err := c.Obtain(ctxT(t), redistest.Key(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var relErr, opErr error
		start := make(chan struct{})
		wg.Go(func() { <-start; relErr = l.Release(context.Background()) })
		wg.Go(func() { <-start; opErr = op(l) })
		close(start)
		wg.Wait()
		if relErr != nil && !errors.Is(relErr, ErrNotHeld) {
			t.Fatalf("round %d: Release: %v", i, relErr)
		}
		if opErr != nil && !errors.Is(opErr, ErrNotHeld) {
			t.Fatalf("round %d: the call racing Release: %v, want nil or ErrNotHeld", i, opErr)
		}
		if relErr == nil {
			relNil++
		}
		if opErr == nil {
			opNil++
		}
		if n := lost.Load(); n > 0 {
			t.Fatalf("round %d: Hooks.Lost fired for a lock that was released (Release: %v, the other call: %v)", i, relErr, opErr)
		}
		if !isClosed(l.Lost()) {
			t.Fatalf("round %d: Lost open after Release", i)
		}
	}
	if n := released.Load(); n != int32(rounds) {
		t.Errorf("Hooks.Released fired %d times for %d locks released", n, rounds)
	}
	return relNil, opNil
}

// TestConcurrentReleasesNotLost: two Releases of one handle at once (a
// deferred one and an explicit one in another goroutine): one releases the
// lock, the other returns ErrNotHeld, and the lock is not reported lost.
func TestConcurrentReleasesNotLost(t *testing.T) {
	const rounds = 200
	a, b := raceWithRelease(t, rounds, func(l *Lock) error { return l.Release(context.Background()) })
	if a+b != rounds {
		t.Errorf("%d Releases returned nil in %d rounds; want exactly one a round", a+b, rounds)
	}
}

// TestRefreshRacingReleaseNotLost: a Refresh concurrent with Release runs
// before or after it, never reports the lease "ran out" (ErrNotHeld when
// the Release came first), and the released lock is not reported lost.
func TestRefreshRacingReleaseNotLost(t *testing.T) {
	raceWithRelease(t, 200, func(l *Lock) error { return l.Refresh(context.Background(), time.Minute) })
}

// TestTTLAndFenceRacingReleaseNotLost: a TTL or a first Fence that Redis
// runs after a concurrent Release finds the lock gone; the released lock
// is not reported lost for it.
func TestTTLAndFenceRacingReleaseNotLost(t *testing.T) {
	raceWithRelease(t, 200, func(l *Lock) error {
		_, err := l.TTL(context.Background())
		return err
	})
	raceWithRelease(t, 200, func(l *Lock) error {
		_, err := l.FenceContext(context.Background())
		return err
	})
}
