package guard

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The tests of this file end calls every way a call can end (a value, an
// error, a panic, runtime.Goexit, a cancel, a deadline, Close) and check
// that every state machine of the Group settles: the breaker's probe, the
// read flights, the per-process load slots, the lease watchdogs and the
// waiter registrations.

// TestProbeCallerLeaves is the regression test of a breaker stuck
// half-open: Redis frozen until the breaker opens; then callers leave at
// every moment (their ctx cancelled as a command goes to Redis, or by a
// deadline of a few ms) through several cooldowns. The probe is no
// caller's (it runs in the background), so none of them can take it with
// it: once Redis is back, the Group must coordinate through Redis again
// within BreakerCooldown + 1s. When callers probed, a probe whose caller
// left once kept the Group Degraded for good.
func TestProbeCallerLeaves(t *testing.T) {
	srv := redistest.Start(t)
	type cancelKey struct{}
	rdb := srv.Client(t)
	rdb.AddHook(cancelHook{key: cancelKey{}})
	const cooldown = 300 * time.Millisecond
	var opened, closed atomic.Int64
	g := newGroup(t, rdb, Options{
		RedisTimeout: 100 * time.Millisecond, BreakerFailures: 3, BreakerCooldown: cooldown,
		Hooks: Hooks{Breaker: func(open bool) {
			if open {
				opened.Add(1)
			} else {
				closed.Add(1)
			}
		}},
	})
	key := redistest.Key(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for _, want := range []Status{Miss, Hit} { // the hit is hinted: the fast path
		if r, err := g.Do(ctxT(t), key, load); err != nil || r.Status != want {
			t.Fatalf("warm-up: %v %v; want %v", r.Status, err, want)
		}
	}

	srv.Freeze(t)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		_, _ = g.Do(ctxT(t), key, load)
		return opened.Load() > 0
	})
	// Calls that leave: every call now stays off Redis, and the cooldowns
	// pass, each starting a probe in the background.
	for i, end := 0, time.Now().Add(3*cooldown); time.Now().Before(end); i++ {
		ctx, cancel := context.WithTimeout(ctxT(t), time.Duration(i%5)*time.Millisecond)
		_, _ = g.Do(context.WithValue(ctx, cancelKey{}, cancel), key, load)
		cancel()
	}
	srv.Thaw(t)

	redistest.Eventually(t, cooldown+time.Second, "a call coordinated through Redis", func() bool {
		r, err := g.Do(ctxT(t), key, load)
		return err == nil && r.Status != Degraded
	})
	if closed.Load() == 0 {
		t.Fatal("the breaker never reported closing")
	}
}

// cancelHook cancels a command's ctx as the command goes to Redis, when
// the ctx carries a cancel func under key.
type cancelHook struct{ key any }

func (cancelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cancel, ok := ctx.Value(h.key).(context.CancelFunc); ok {
			cancel()
		}
		return next(ctx, cmd)
	}
}

func (h cancelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestGoexitLoader is the regression test of a loader that calls
// runtime.Goexit (t.FailNow in a test helper, say): its callers get
// ErrGoexit at once instead of waiting for their own deadlines, and the
// lease its watchdog was renewing is released.
func TestGoexitLoader(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	defer noLeaks(t)()
	g, err := New(rdb, Options{LockTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	key := redistest.Key(t)
	lease := g.names(key).keys[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = g.Get(ctx, key, func(ctx context.Context) ([]byte, error) {
		// Run long enough for the watchdog to extend the read's 1s lease
		// towards LockTTL, then leave the goroutine.
		for {
			if d, err := rdb.PTTL(ctx, lease).Result(); err != nil || d > 1500*time.Millisecond {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		runtime.Goexit()
		return nil, nil
	})
	if !errors.Is(err, ErrGoexit) {
		t.Fatalf("Get = %v; want ErrGoexit", err)
	}
	if n, err := rdb.Exists(ctx, lease).Result(); err != nil || n != 0 {
		t.Fatalf("the lease is still held after the loader left (%v)", err)
	}
	baseline(t, g, rdb, key, 5*time.Second)
}

// TestCloseStopsWatchdogs: a load still running for its callers when the
// Group is closed has its lease renewed no more, and given back: when
// Close returns, another node may take the key (the fleet waited out the
// lease, up to LockTTL, before). Its caller still gets the value.
func TestCloseStopsWatchdogs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	defer noLeaks(t)()
	const lockTTL = 2 * time.Second
	g, err := New(rdb, Options{LockTTL: lockTTL})
	if err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t)
	lease := g.names(key).keys[1]
	release := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := g.Get(context.Background(), key, func(context.Context) ([]byte, error) {
			<-release
			return []byte("v"), nil
		})
		got <- err
	}()
	redistest.Eventually(t, 5*time.Second, "the watchdog to extend the lease", func() bool {
		d, err := rdb.PTTL(context.Background(), lease).Result()
		return err == nil && d > 1200*time.Millisecond
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(context.Background(), lease).Result(); err != nil || n != 0 {
		d, _ := rdb.PTTL(context.Background(), lease).Result()
		t.Errorf("the lease of a load still running is held after Close (%v left, %v); want it given back", d, err)
	}
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("the caller of the load: %v; want its value", err)
	}
}

// TestLoaderEndings: on each path that calls a loader (a miss under the
// lease, a background refresh of a stale value, a degraded load with Redis
// gone), every way the loader can end reaches the callers as an outcome,
// and the Group settles.
func TestLoaderEndings(t *testing.T) {
	endings := []struct {
		name    string
		load    LoadFunc
		wantErr func(error) bool
	}{
		{"value", func(context.Context) ([]byte, error) { return []byte("new"), nil }, func(err error) bool { return err == nil }},
		{"error", func(context.Context) ([]byte, error) { return nil, errors.New("origin down") }, func(err error) bool { return err != nil && err.Error() == "origin down" }},
		{"panic", func(context.Context) ([]byte, error) { panic("loader bug") }, func(err error) bool {
			var pe *PanicError
			return errors.As(err, &pe) && pe.Value == "loader bug"
		}},
		{"goexit", func(context.Context) ([]byte, error) { runtime.Goexit(); return nil, nil }, func(err error) bool { return errors.Is(err, ErrGoexit) }},
	}
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		loaderEndings(t, rdb, endings)
	})
}

func loaderEndings(t *testing.T, rdb redis.UniversalClient, endings []struct {
	name    string
	load    LoadFunc
	wantErr func(error) bool
}) {
	for _, end := range endings {
		t.Run("miss/"+end.name, func(t *testing.T) {
			defer noLeaks(t)()
			g := newGroup(t, rdb, Options{})
			key := redistest.Key(t)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() { _, errs[i] = g.Get(ctxT(t), key, end.load) })
			}
			wg.Wait()
			for _, err := range errs {
				if !end.wantErr(err) && !errors.Is(err, ErrBackoff) {
					t.Fatalf("a caller got %v", err)
				}
			}
			baseline(t, g, rdb, key, 5*time.Second)
			_ = g.Close()
		})
		t.Run("refresh/"+end.name, func(t *testing.T) {
			defer noLeaks(t)()
			g := newGroup(t, rdb, Options{ErrorBackoff: time.Millisecond})
			key := redistest.Key(t)
			putEntry(t, rdb, g, key, "old", -1, 60_000, 1)
			r, err := g.Do(ctxT(t), key, end.load)
			if err != nil || r.Status != Stale || string(r.Value) != "old" {
				t.Fatalf("got %v %q %v; want the stale value", r.Status, r.Value, err)
			}
			_ = g.Close() // waits for the refresh
			baseline(t, g, rdb, key, 5*time.Second)
		})
		if _, ok := rdb.(*redis.ClusterClient); ok {
			continue // a dead standalone server is enough to degrade
		}
		t.Run("degraded/"+end.name, func(t *testing.T) {
			defer noLeaks(t)()
			srv := redistest.Start(t)
			down := srv.Client(t)
			g := newGroup(t, down, Options{RedisTimeout: 50 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Hour})
			srv.Kill(t)
			key := redistest.Key(t)
			var loads atomic.Int64
			load := func(ctx context.Context) ([]byte, error) { loads.Add(1); return end.load(ctx) }
			for i := range 3 { // the first call opens the breaker; the rest stay off Redis
				r, err := g.Do(ctxT(t), key, load)
				// The next ones are answered by what the first left in
				// the reserve: its value, or its failure's back-off.
				if !end.wantErr(err) && (i == 0 || !errors.Is(err, ErrBackoff)) || r.Status != Degraded {
					t.Fatalf("call %d: got %v %v", i, r.Status, err)
				}
			}
			if n := loads.Load(); n != 1 {
				t.Fatalf("%d loads; want 1", n)
			}
			_ = g.Close()
			_ = down.Close()
		})
	}
}

// TestCancellationSweep cancels a caller at each step of the hit, stale,
// miss, wait and fill paths (through the testStep seam), and checks that
// afterwards the Group is back to its baseline: no read flight or load
// slot left, no waiter registered, no lease held, the breaker closed, and
// once closed no goroutine left.
func TestCancellationSweep(t *testing.T) {
	load := func(context.Context) ([]byte, error) { return []byte("new"), nil }
	paths := []sweepPath{
		{name: "hit", steps: []string{"hit"}, prepare: func(t *testing.T, g, _ *Group, _ redis.UniversalClient, key string) func() {
			for range 2 { // fill, then a hit that leaves the fast-path hint
				if _, err := g.Do(ctxT(t), key, load); err != nil {
					t.Fatal(err)
				}
			}
			return func() {}
		}},
		{name: "stale", steps: []string{"read", "refresh", "fill"}, prepare: func(t *testing.T, g, _ *Group, rdb redis.UniversalClient, key string) func() {
			putEntry(t, rdb, g, key, "old", -1, 60_000, 1)
			return func() {}
		}},
		{name: "miss", steps: []string{"read", "load", "fill"}, prepare: func(*testing.T, *Group, *Group, redis.UniversalClient, string) func() {
			return func() {}
		}},
		{name: "wait", steps: []string{"wait"}, prepare: func(t *testing.T, _, other *Group, _ redis.UniversalClient, key string) func() {
			// The other node holds the lease, loading until released.
			gate, started := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = other.Get(ctxT(t), key, func(context.Context) ([]byte, error) {
					close(started)
					<-gate
					return []byte("theirs"), nil
				})
			}()
			<-started
			return func() { close(gate); <-done }
		}},
	}
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		sweep(t, rdb, paths)
	})
}

func sweep(t *testing.T, rdb redis.UniversalClient, paths []sweepPath) {
	type mine struct{}
	load := func(context.Context) ([]byte, error) { return []byte("new"), nil }
	for _, p := range paths {
		for _, step := range p.steps {
			t.Run(p.name+"/"+step, func(t *testing.T) {
				defer noLeaks(t)()
				g := newGroup(t, rdb, Options{})
				other := newGroup(t, rdb, Options{})
				key := redistest.Key(t)
				cleanup := p.prepare(t, g, other, rdb, key)
				reached := make(chan struct{})
				var once sync.Once
				g.testStep = func(ctx context.Context, s string) {
					if cancel, ok := ctx.Value(mine{}).(context.CancelFunc); ok && s == step {
						once.Do(func() { cancel(); close(reached) })
					}
				}
				ctx, cancel := context.WithCancel(ctxT(t))
				defer cancel()
				ctx = context.WithValue(ctx, mine{}, cancel)
				callLoad := load
				if step == "load" {
					callLoad = func(lctx context.Context) ([]byte, error) {
						if cancel, ok := lctx.Value(mine{}).(context.CancelFunc); ok {
							once.Do(func() { cancel(); close(reached) })
						}
						return []byte("new"), nil
					}
				}
				r, err := g.Do(ctx, key, callLoad)
				// A background refresh reaches its steps after Do returned.
				select {
				case <-reached:
				case <-time.After(5 * time.Second):
					t.Fatalf("the call never reached step %q (got %v %v)", step, r.Status, err)
				}
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("the cancelled caller got %v; want a value or context.Canceled", err)
				}
				cleanup()
				baseline(t, g, rdb, key, 5*time.Second)
				// And the Group still serves the key.
				if r, err := g.Do(ctxT(t), key, load); err != nil || r.Status == Degraded {
					t.Fatalf("after the sweep: %v %v", r.Status, err)
				}
				_ = g.Close()
				_ = other.Close()
			})
		}
	}
}

// sweepPath is one path of the sweep: the steps to cancel its caller at.
type sweepPath struct {
	name  string
	steps []string
	// prepare puts key in the state the path starts from; other is a
	// second node of the fleet.
	prepare func(t *testing.T, g, other *Group, rdb redis.UniversalClient, key string) (cleanup func())
}

// TestOneLoaderCallPerDo: whatever path a call takes (a read flight whose
// load fails at once, a miss flight, waiting, a degraded load), its
// LoadFunc runs at most once.
func TestOneLoaderCallPerDo(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		nodes := []*Group{
			newGroup(t, rdb, Options{ErrorBackoff: time.Millisecond, WaitTimeout: 20 * time.Millisecond}),
			newGroup(t, rdb, Options{ErrorBackoff: time.Millisecond, WaitTimeout: 20 * time.Millisecond}),
		}
		key := redistest.Key(t)
		var wg sync.WaitGroup
		var twice atomic.Int64
		for i := range 200 {
			wg.Go(func() {
				var calls atomic.Int64
				_, _ = nodes[i%2].Do(ctxT(t), key, func(context.Context) ([]byte, error) {
					if calls.Add(1) > 1 {
						twice.Add(1)
					}
					if i%3 == 0 {
						return nil, errors.New("fails at once")
					}
					return nil, NoStore(nil) // nothing stored: every call misses
				})
			})
		}
		wg.Wait()
		if n := twice.Load(); n != 0 {
			t.Fatalf("%d calls ran their LoadFunc more than once", n)
		}
	})
}

// TestPanicReachesEveryCaller: a panicking loader gives every caller of the
// flight a *PanicError, the process survives, and the key backs off.
func TestPanicReachesEveryCaller(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var arrived counter
		g := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
		g.testJoined = func(string) { arrived.add() }
		key := redistest.Key(t)
		gate := make(chan struct{})
		const callers = 8
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
					<-gate
					panic("boom")
				})
				errs <- err
			}()
		}
		redistest.Eventually(t, 10*time.Second, "every caller inside the flight", func() bool { return arrived.n.Load() == callers })
		close(gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			var pe *PanicError
			if !errors.As(err, &pe) || pe.Value != "boom" || !strings.Contains(string(pe.Stack), "guard") {
				t.Fatalf("got %v, want *PanicError with value boom and a stack", err)
			}
		}
		// The lease is free and the key backs off cluster-wide.
		if n, err := rdb.Exists(ctxT(t), g.names(key).keys[1]).Result(); err != nil || n != 0 {
			t.Fatalf("lease still held after the panic (%d, %v)", n, err)
		}
		other := newGroup(t, rdb, Options{})
		called := false
		_, err := other.Do(ctxT(t), key, func(context.Context) ([]byte, error) { called = true; return nil, nil })
		if !errors.Is(err, ErrBackoff) || called {
			t.Fatalf("another node during the back-off: %v (loader called %v), want ErrBackoff without a load", err, called)
		}
	})
}

// TestCancelledLeaderDoesNotFailFollowers: the caller whose flight runs the
// load leaves; the load goes on and the others get the value.
func TestCancelledLeaderDoesNotFailFollowers(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var arrived counter
		g := newGroup(t, rdb, Options{})
		g.testJoined = func(string) { arrived.add() }
		key := redistest.Key(t)
		org := newOrigin(true)
		leaderCtx, cancel := context.WithCancel(context.Background())
		leaderErr := make(chan error, 1)
		go func() {
			_, err := g.Do(leaderCtx, key, org.load)
			leaderErr <- err
		}()
		redistest.Eventually(t, 10*time.Second, "the load to start", func() bool { return org.calls.Load() == 1 })
		follower := make(chan Result, 1)
		go func() {
			r, err := g.Do(ctxT(t), key, org.load)
			if err != nil {
				t.Error(err)
			}
			follower <- r
		}()
		redistest.Eventually(t, 10*time.Second, "the follower inside the flight", func() bool { return arrived.n.Load() == 2 })
		cancel()
		if err := <-leaderErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("leader got %v, want context.Canceled", err)
		}
		close(org.gate)
		// The flight's one Miss goes to a caller that is still there.
		if r := <-follower; string(r.Value) != "v1" || r.Status != Miss {
			t.Fatalf("follower got %v %q, want miss v1", r.Status, r.Value)
		}
	})
}

// TestNoGoroutineLeak: a Group's goroutines end with Close, refreshes
// included.
func TestNoGoroutineLeak(t *testing.T) {
	_, rdb := redistest.Mini(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := "k"
	putEntry(t, rdb, g, key, "old", -1, 60_000, 1)
	if r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("new"), nil }); err != nil || r.Status != Stale {
		t.Fatalf("%v %v", r.Status, err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseStopsBatchWatchdogs: Close stops the lease renewals of a
// GetMany load still running, as it does a single key's: a closed Group
// renews no lease. Before the fix the batch's renewer went on.
func TestCloseStopsBatchWatchdogs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	const lockTTL = 2 * time.Second
	g, err := New(rdb, Options{LockTTL: lockTTL, RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t)
	lease := g.names(key).keys[1]
	release := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := g.GetMany(context.Background(), []string{key}, func(_ context.Context, keys []string) (map[string][]byte, error) {
			<-release
			return map[string][]byte{keys[0]: []byte("v")}, nil
		})
		got <- err
	}()
	redistest.Eventually(t, 5*time.Second, "the watchdog to extend the lease", func() bool {
		d, err := rdb.PTTL(context.Background(), lease).Result()
		return err == nil && d > 1200*time.Millisecond
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, lockTTL+2*time.Second, "the lease to lapse after Close", func() bool {
		n, err := rdb.Exists(context.Background(), lease).Result()
		return err == nil && n == 0
	})
	close(release)
	if err := <-got; err != nil {
		t.Fatalf("the caller of the load: %v; want its value", err)
	}
}

// TestCloseWhileScriptsQueue: calls still in flight when the Group is
// closed may start a batch of queued scripts (their fills must still go
// out) while Close waits for the batches running. Close must wait for
// those too, without racing with them; before the fix Close's wait and a
// late call's start of a batch raced on the queue's WaitGroup (found by
// TestModelHistories under -race).
func TestCloseWhileScriptsQueue(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for round := range 20 {
		g, err := New(rdb, Options{RedisTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		started := make(chan struct{}, 16)
		for c := range 16 {
			wg.Go(func() {
				started <- struct{}{}
				for i := 0; ; i++ {
					key := redistest.Key(t, strconv.Itoa(round), strconv.Itoa(c), strconv.Itoa(i))
					_, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
					rdb.Del(context.Background(), g.names(key).keys...)
					if errors.Is(err, ErrClosed) {
						return
					}
				}
			})
		}
		for range 16 {
			<-started
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}

// TestCloseWhileReportConnectionRedials: Close does not wait on a report
// connection being made again to a server that does not answer: neither
// on one being set up (its HELLO unanswered, as a frozen server or a
// stalled path leaves it: the tracker closes it), nor on its dial to a
// blackholed address (the tracker cancels it), in RESP2 and in RESP3 (a
// server that refuses a REDIRECT, as miniredis does). go-redis would wait
// for its dial timeout (5 s), or for good for a dialer that waits for its
// context alone. And nothing of the connection outlives Close: a cancelled
// dial that failed in a pool still open would leave go-redis probing the
// pool, a second between dials.
func TestCloseWhileReportConnectionRedials(t *testing.T) {
	for _, c := range []struct {
		name  string
		resp3 bool
		hang  func(p *redistest.Proxy, blackhole *atomic.Bool)
	}{
		{"sets up", false, func(p *redistest.Proxy, _ *atomic.Bool) { p.Stall() }},
		{"dials", false, func(_ *redistest.Proxy, blackhole *atomic.Bool) { blackhole.Store(true) }},
		{"sets up RESP3", true, func(p *redistest.Proxy, _ *atomic.Bool) { p.Stall() }},
		{"dials RESP3", true, func(_ *redistest.Proxy, blackhole *atomic.Bool) { blackhole.Store(true) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr)
			tier.ReportAddr, tier.ForceRESP3 = func(string) string { return proxy.Addr }, c.resp3
			defer func() { tier.ReportAddr, tier.ForceRESP3 = nil, false }()
			defer noLeaks(t)()
			// Stricter than noLeaks, right after Close: go-redis's probe
			// of a pool and its dials are not forgiven.
			strict := []goleak.Option{goleak.IgnoreCurrent(),
				goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
				// the proxy's own, holding the stalled path until Resume
				goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Proxy).up"),
				goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Proxy).down"),
				goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Proxy).down.func1")}
			var blackhole atomic.Bool
			var dials atomic.Int64 // of the report connection
			rdb := srv.Client(t, func(o *redis.Options) {
				var d net.Dialer
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if addr != proxy.Addr {
						return d.DialContext(ctx, network, addr)
					}
					dials.Add(1)
					if blackhole.Load() {
						<-ctx.Done() // as a connect to a blackholed address, until its timeout
						return nil, ctx.Err()
					}
					return d.DialContext(ctx, network, addr)
				}
			})
			g := newLocalNode(t, rdb, Options{Namespace: redistest.Key(t) + ":", LocalEntries: 100})
			waitLocal(t, g)
			before := dials.Load()
			c.hang(proxy, &blackhole)
			proxy.Cut() // the tracker dials again, and hangs
			redistest.Eventually(t, 10*time.Second, "the report connection dialled again", func() bool { return dials.Load() > before })
			start := time.Now()
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 250*time.Millisecond {
				t.Errorf("Close took %v: it waited on the report connection being made again", took)
			}
			// A dial of a closed tracker ends at once: its one attempt was
			// cancelled, and the pool it failed in is closed (go-redis
			// would try 5 times, 100 ms apart, then probe the pool).
			redistest.Eventually(t, 100*time.Millisecond, "go-redis's dials and probes of the tracker's pools ended", func() bool {
				return len(poolDials()) == 0
			})
			goleak.VerifyNone(t, strict...)
			proxy.Resume()
		})
	}
}

// poolDials returns the stacks of the goroutines go-redis dials a pool's
// connection on, or probes a pool whose dials failed.
func poolDials() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pool.(*ConnPool).queuedNewConn") || strings.Contains(g, "pool.(*ConnPool).tryDial") {
			out = append(out, g)
		}
	}
	return out
}

// TestCloseAtRandomMomentsOfTheReportConnection: Groups closed at random
// moments of their report connections' start (dialling, subscribing,
// turning tracking on, confirming), in RESP2 and RESP3 on redis-server,
// and on miniredis (the embedded default, which refuses a REDIRECT: the
// tier falls back to RESP3): each Close is prompt, and no dial or probe
// of go-redis's is left behind for a moment after it.
func TestCloseAtRandomMomentsOfTheReportConnection(t *testing.T) {
	srv := redistest.Start(t)
	_, mini := redistest.Mini(t)
	defer noLeaks(t)()
	defer func() { tier.ForceRESP3 = false }() // however the test ends
	for _, c := range []struct {
		name  string
		rdb   redis.UniversalClient
		resp3 bool
	}{{"RESP2", srv.Client(t), false}, {"RESP3", srv.Client(t), true}, {"miniredis", mini, false}} {
		tier.ForceRESP3 = c.resp3
		for i := range 40 {
			g, err := New(c.rdb, Options{Namespace: redistest.Key(t) + ":" + strconv.Itoa(i) + ":", LocalEntries: 100})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the moment the caller leaves
			start := time.Now()
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 250*time.Millisecond {
				t.Errorf("%s: Close took %v", c.name, took)
			}
			redistest.Eventually(t, 100*time.Millisecond, c.name+": go-redis's dials and probes of the tracker's pools ended", func() bool {
				return len(poolDials()) == 0
			})
		}
	}
}
