package guard

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFrozenRedisNoCallerProbes: Redis frozen (SIGSTOP: connections hang,
// never refused). Once the breaker is open, no call waits on Redis: after
// each cooldown the probe tries Redis in the background, and the call
// that started it is served from memory like the others. Before, that
// call was the probe and waited its RedisTimeout, once per cooldown.
// When Redis thaws, the probe closes the breaker and calls read Redis
// again, without any of them waiting either.
func TestFrozenRedisNoCallerProbes(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, cooldown = 200 * time.Millisecond, 50 * time.Millisecond
	var openedAt atomic.Int64 // UnixNano; 0: not open
	g := newGroup(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }), Options{
		RedisTimeout: timeout, BreakerCooldown: cooldown, FreshFor: time.Minute,
		Hooks: Hooks{Breaker: func(open bool) {
			if open {
				openedAt.Store(time.Now().UnixNano())
			} else {
				openedAt.Store(0)
			}
		}}})
	key := redistest.Key(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	if _, err := g.Do(ctxT(t), key, load); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	var mu sync.Mutex
	var slow []time.Duration
	calls := 0
	call := func(ctx context.Context) (Result, error) {
		start := time.Now()
		r, err := g.Do(ctx, key, load)
		if o := openedAt.Load(); o != 0 && start.UnixNano() > o {
			mu.Lock()
			calls++
			if d := time.Since(start); d >= timeout {
				slow = append(slow, d)
			}
			mu.Unlock()
		}
		return r, err
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
				if r, err := call(ctxT(t)); err != nil || string(r.Value) != "v" {
					t.Errorf("while Redis is frozen: %q %v", r.Value, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if openedAt.Load() == 0 {
		t.Fatal("the breaker did not open")
	}
	if len(slow) > 0 {
		t.Fatalf("%d of %d calls made after the breaker opened waited RedisTimeout or more (%v); want none", len(slow), calls, slow)
	}
	srv.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "calls reading Redis again", func() bool {
		r, err := call(ctxT(t))
		return err == nil && r.Status == Hit
	})
	if len(slow) > 0 {
		t.Fatalf("%d calls waited RedisTimeout or more once Redis thawed (%v); want none", len(slow), slow)
	}
	t.Logf("%d calls served while the breaker was open, none slow", calls)
}

// TestProbeAsksAsCallsDo: an ACL change takes the guard's commands from its
// user (GET and the scripts), while the server still answers others
// (TIME, PING). The breaker opens; its probe must ask as the calls do (a
// keyed read script), so that it stays open until the commands are given
// back: a probe any answer satisfies closed it every cooldown, only for
// the next calls to open it again, each close emptying the node's
// reserve and sending its keys to the origin. Then the ACL is restored,
// and the breaker closes once.
func TestProbeAsksAsCallsDo(t *testing.T) {
	const user, pw = "app", "pw"
	all := []string{"~*", "&*", "+@all"}
	srv := redistest.Start(t, redistest.WithUser(user, pw, all...))
	var opens, closes atomic.Int64
	g := newGroup(t, srv.UserClient(t, user), Options{
		RedisTimeout: 200 * time.Millisecond, BreakerCooldown: 20 * time.Millisecond, FreshFor: time.Minute, LocalEntries: 100,
		Hooks: Hooks{Breaker: countBreaker(&opens, &closes)}})
	key := redistest.Key(t)
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	if _, err := g.Do(ctxT(t), key, load); err != nil {
		t.Fatal(err)
	}
	srv.SetUser(t, user, pw, append(all, "-get", "-mget", "-evalsha", "-eval")...)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		_, _ = g.Do(ctxT(t), key, load)
		return opens.Load() > 0
	})
	before := loads.Load()
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		if r, err := g.Do(ctxT(t), key, load); err != nil || string(r.Value) != "v" {
			t.Fatalf("while the scripts are refused: %q %v", r.Value, err)
		}
	}
	if n := closes.Load(); n != 0 {
		t.Fatalf("the breaker closed %d times in 0.5 s (cooldown 20ms) while every call would be refused; want 0", n)
	}
	if n := loads.Load() - before; n != 0 {
		t.Errorf("%d loads of a key held in memory while the breaker was open; want 0", n)
	}
	srv.SetUser(t, user, pw, all...)
	redistest.Eventually(t, 10*time.Second, "the breaker to close", func() bool {
		_, _ = g.Do(ctxT(t), key, load)
		return closes.Load() > 0
	})
}

// TestRingAllShardsDownStaysOpen: a Ring whose one shard is dead. The
// probe asks as a call does (a keyed read, which the Ring sends to its
// shard and which fails), so the breaker stays open and the node keeps
// serving its reserve. A probe that asked each live shard, when the Ring
// had marked them all down, asked nobody and called that a success: the
// breaker closed every cooldown and the reserve was emptied each time.
func TestRingAllShardsDownStaysOpen(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ContextTimeoutEnabled: true,
		HeartbeatFrequency: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var opened, closed atomic.Int64
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond,
		FreshFor: time.Minute, Hooks: Hooks{Breaker: countBreaker(&opened, &closed)}})
	key := redistest.Key(t)
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	if _, err := g.Do(ctxT(t), key, load); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		if r, err := g.Do(ctxT(t), key, load); err != nil || string(r.Value) != "v" {
			t.Fatalf("with the Ring's shard dead: %q %v", r.Value, err)
		}
	}
	if opened.Load() != 1 || closed.Load() != 0 {
		t.Fatalf("the breaker opened %d times and closed %d times with the only shard dead; want 1 and 0", opened.Load(), closed.Load())
	}
	if n := loads.Load(); n > 2 {
		t.Fatalf("%d loads; want at most 2 (the fill, and one into the reserve)", n)
	}
}

// countBreaker returns a Breaker hook that counts the opens and closes.
func countBreaker(opens, closes *atomic.Int64) func(open bool) {
	return func(open bool) {
		if open {
			opens.Add(1)
		} else {
			closes.Add(1)
		}
	}
}

// TestIdleGroupClosesItsBreaker: a breaker opened by calls, then no call:
// once Redis answers again, the breaker closes (and says so) by itself,
// probing once per BreakerCooldown. Before, it probed only when a call
// came, so an idle instance reported its breaker open for good, and the
// alert on it fired while Redis was well.
func TestIdleGroupClosesItsBreaker(t *testing.T) {
	srv := redistest.Start(t)
	var opens, closes atomic.Int64
	g := newGroup(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }), Options{
		RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond,
		Hooks: Hooks{Breaker: countBreaker(&opens, &closes)}})
	key := redistest.Key(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	srv.Freeze(t)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		_, _ = g.Do(ctxT(t), key, load)
		return opens.Load() > 0
	})
	srv.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the breaker of an idle Group to close", func() bool {
		return closes.Load() == 1
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if o, c := opens.Load(), closes.Load(); o != 1 || c != 1 {
		t.Errorf("Hooks.Breaker: %d opens, %d closes; want 1 and 1", o, c)
	}
}

// TestCloseReportsOpenBreakerClosed: a Group closed while its breaker is
// open reports it closed, once, and nothing after: a gauge summed over the
// Groups of a process (one replaced after an outage) fell back to 0 never.
func TestCloseReportsOpenBreakerClosed(t *testing.T) {
	srv := redistest.Start(t)
	var opens, closes atomic.Int64
	g, err := New(srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }), Options{
		RedisTimeout: 100 * time.Millisecond, BreakerCooldown: time.Hour,
		Hooks: Hooks{Breaker: countBreaker(&opens, &closes)}})
	if err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t)
	srv.Freeze(t)
	defer srv.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		_, _ = g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		return opens.Load() > 0
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Thaw(t)
	if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != ErrClosed {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
	if o, c := opens.Load(), closes.Load(); o != 1 || c != 1 {
		t.Errorf("Hooks.Breaker: %d opens, %d closes after Close; want 1 and 1", o, c)
	}
}

// TestRingIdleBreakerClosesBesideFrozenShard: a Ring of two shards, both
// frozen until the Group's breaker opened, then all thawed but the shard
// of the probe key the Group once used alone; no call. The breaker says
// no shard answers: the other does, the probes take other keys and find
// it, so the breaker closes. (The Ring's heartbeat is slowed so that the
// frozen shard keeps its keys, as for a Ring that has not noticed yet.)
func TestRingIdleBreakerClosesBesideFrozenShard(t *testing.T) {
	defer noLeaks(t)()
	a, b := redistest.Start(t), redistest.Start(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}, ContextTimeoutEnabled: true,
		HeartbeatFrequency: time.Hour, MaxRetries: -1})
	defer rdb.Close()
	var opens, closes atomic.Int64
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond,
		Hooks: Hooks{Breaker: countBreaker(&opens, &closes)}})
	// The shard of the old fixed probe key: where a write of its entry
	// name through the Ring lands.
	probe := g.names(breakerProbeKey).entry
	if err := rdb.Set(ctxT(t), probe, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	frozen, other := a, b
	if n, err := b.Client(t).Exists(ctxT(t), probe).Result(); err != nil {
		t.Fatal(err)
	} else if n == 1 {
		frozen, other = b, a
	}
	if err := rdb.Del(ctxT(t), probe).Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{redistest.Key(t, "1"), redistest.Key(t, "2"), redistest.Key(t, "3"), redistest.Key(t, "4")}
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	frozen.Freeze(t)
	defer frozen.Thaw(t)
	other.Freeze(t)
	defer other.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		for _, k := range keys {
			_, _ = g.Do(ctxT(t), k, load)
		}
		return opens.Load() > 0
	})
	other.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the breaker of the idle Group to close, one shard still frozen", func() bool {
		return closes.Load() == 1
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestIdleProbesOnePerCooldown: Redis frozen, the breaker open, no call:
// the background prober starts each probe a BreakerCooldown after the
// last one failed (docs: "probes it a BreakerCooldown after each
// failure"), give or take the prober's tick of a quarter cooldown. With a
// tick of a whole cooldown it came a tick late, one probe per two
// cooldowns, so an idle Group stayed open up to twice as long after Redis
// came back.
func TestIdleProbesOnePerCooldown(t *testing.T) {
	srv := redistest.Start(t)
	const timeout, cooldown = 100 * time.Millisecond, 400 * time.Millisecond
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	var mu sync.Mutex
	type span struct{ start, end time.Time }
	var probes []span
	rdb.AddHook(probeRecorder(func(start, end time.Time) {
		mu.Lock()
		probes = append(probes, span{start, end})
		mu.Unlock()
	}))
	var opens, closes atomic.Int64
	g := newGroup(t, rdb, Options{RedisTimeout: timeout, BreakerCooldown: cooldown,
		Hooks: Hooks{Breaker: countBreaker(&opens, &closes)}})
	key := redistest.Key(t)
	srv.Freeze(t)
	defer srv.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the breaker to open", func() bool {
		_, _ = g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		return opens.Load() > 0
	})
	mu.Lock()
	from := len(probes) // the calls' own reads, before the breaker opened
	mu.Unlock()
	// The condition under test: an idle Group beside a frozen Redis.
	time.Sleep(12 * cooldown)
	mu.Lock()
	idle := slices.Clone(probes[from:])
	mu.Unlock()
	var gaps []time.Duration // from a probe's failure to the next probe
	for i := 1; i < len(idle); i++ {
		gaps = append(gaps, idle[i].start.Sub(idle[i-1].end))
	}
	if len(gaps) < 4 {
		t.Fatalf("%d probes in %v of an open breaker, cooldown %v; want about one per cooldown", len(idle), 12*cooldown, cooldown)
	}
	slices.Sort(gaps)
	// At least a cooldown apart; at most a tick late, and a scheduling
	// delay of a loaded machine: the median, so that one late wake-up
	// does not decide.
	if gaps[0] < cooldown-10*time.Millisecond {
		t.Errorf("a probe began %v after the last one failed; want a cooldown (%v) at least", gaps[0], cooldown)
	}
	if med, most := gaps[len(gaps)/2], cooldown+cooldown/4+100*time.Millisecond; med > most {
		t.Errorf("probes began a median %v after the last one failed (all: %v); want at most %v (a cooldown, and the prober's tick)", med, gaps, most)
	}
}

// probeRecorder is a go-redis hook that reports each single command's
// start and end (a probe is one script call: EVALSHA).
type probeRecorder func(start, end time.Time)

func (probeRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r probeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			r(start, time.Now())
		}
		return err
	}
}

func (probeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
