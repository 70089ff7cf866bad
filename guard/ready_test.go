package guard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// readyChecks returns the checks a Ready error names, with their errors.
func readyChecks(t *testing.T, err error) map[string]error {
	t.Helper()
	checks := map[string]error{}
	var walk func(error)
	walk = func(err error) {
		var re *ReadyError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if !errors.As(err, &re) {
				t.Errorf("Ready's error holds %v (%T), not a *ReadyError", err, err)
				return
			}
			if _, dup := checks[re.Check]; dup {
				t.Errorf("check %q reported twice", re.Check)
			}
			checks[re.Check] = re.Err
		}
	}
	walk(err)
	return checks
}

// guardScriptsLoaded reports, for each guard script, whether rdb has it in
// its script cache.
func guardScriptsLoaded(t *testing.T, ctx context.Context, rdb *redis.Client) []bool {
	t.Helper()
	var hashes []string
	for _, s := range []*redis.Script{lua.GuardRead, lua.GuardFill, lua.GuardLease, lua.GuardInvalidate} {
		hashes = append(hashes, s.Hash())
	}
	ok, err := rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestReadyLive: on a live Redis (standalone and cluster) Ready is nil
// and leaves the fill subscription confirmed, with or without a deadline
// of the caller's.
func TestReadyLive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{Namespace: strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"})
		if err := g.Ready(ctxT(t)); err != nil {
			t.Fatalf("Ready on a live Redis: %v", err)
		}
		if !g.hub.Subscribed() {
			t.Error("Ready returned nil with the fill subscription not confirmed")
		}
		if err := g.Ready(context.Background()); err != nil {
			t.Errorf("Ready without a deadline: %v", err)
		}
	})
}

// TestReadyLoadsScripts: Ready loads the guard's scripts into a server
// that has none (a restarted Redis), writes no key, and a Group whose
// scripts are loaded is ready again at once.
func TestReadyLoadsScripts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{})
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if loaded := guardScriptsLoaded(t, ctx, rdb); !allFalse(loaded) {
		t.Fatalf("after SCRIPT FLUSH: loaded %v", loaded)
	}
	if err := g.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if loaded := guardScriptsLoaded(t, ctx, rdb); !allTrue(loaded) {
		t.Errorf("after Ready, the guard's scripts (read, fill, lease, invalidate) loaded: %v, want all", loaded)
	}
	// The scripts' check writes nothing: the server holds no key.
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("keys after Ready: %d, %v; want none", n, err)
	}
	if err := g.Ready(ctx); err != nil {
		t.Errorf("Ready again: %v", err)
	}
}

// readyServing fails t unless Ready answers nil within ReadyTimeout: the
// node serves its callers, whatever Redis does.
func readyServing(t *testing.T, g *Group) {
	t.Helper()
	start := time.Now()
	if err := g.Ready(context.Background()); err != nil {
		t.Fatalf("Ready on a serving node: %v; want nil (a Redis outage is not the node's)", err)
	}
	if took := time.Since(start); took > ReadyTimeout+time.Second {
		t.Errorf("Ready took %v; want it within ReadyTimeout (%v)", took, ReadyTimeout)
	}
}

func allTrue(b []bool) bool  { return !slices.Contains(b, false) }
func allFalse(b []bool) bool { return !slices.Contains(b, true) }

// readyWithin calls Coordinating (Ready when ready is set) with a deadline
// d away and fails t unless it returns an error by then (with slack for a
// loaded machine).
func readyWithin(t *testing.T, g *Group, d time.Duration, ready ...bool) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	check := g.Coordinating
	if len(ready) > 0 && ready[0] {
		check = g.Ready
	}
	err := check(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Ready = nil after %v", took)
	}
	if took > d+time.Second {
		t.Errorf("Ready took %v, past its deadline of %v", took, d)
	}
	t.Logf("Ready failed after %v (deadline %v): %v", took, d, err)
	return took, err
}

// TestReadyRedisKilled: after Redis dies, Ready answers nil at once (the
// node serves, degraded), while Coordinating fails within its deadline and
// names Redis and the scripts. The subscription was confirmed before the
// kill: that check does not see the outage.
func TestReadyRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	g := newGroup(t, srv.Client(t), Options{})
	if err := g.Ready(ctxT(t)); err != nil {
		t.Fatalf("Ready before the kill: %v", err)
	}
	srv.Kill(t)
	readyServing(t, g)
	_, err := readyWithin(t, g, 2*time.Second)
	checks := readyChecks(t, err)
	if checks["redis"] == nil || checks["scripts"] == nil {
		t.Errorf("Ready on a killed Redis: %v; want the redis and scripts checks failed", err)
	}
	if !strings.Contains(err.Error(), "guard: not ready: redis: ") {
		t.Errorf("Ready's error %q does not say what failed", err)
	}
}

// TestReadyRedisFrozen: a stopped (SIGSTOP) Redis accepts connections and
// never answers; Ready answers nil, Coordinating fails at its deadline,
// naming Redis; without a deadline of the caller's, at ReadyTimeout.
func TestReadyRedisFrozen(t *testing.T) {
	srv := redistest.Start(t)
	g := newGroup(t, srv.Client(t), Options{})
	if err := g.Ready(ctxT(t)); err != nil {
		t.Fatalf("Ready before the freeze: %v", err)
	}
	srv.Freeze(t)
	t.Cleanup(func() { srv.Thaw(t) }) // before the Group's Close

	readyServing(t, g)
	_, err := readyWithin(t, g, 300*time.Millisecond)
	checks := readyChecks(t, err)
	if !errors.Is(checks["redis"], context.DeadlineExceeded) {
		t.Errorf("Ready on a frozen Redis: redis check %v, want the deadline exceeded (whole error: %v)", checks["redis"], err)
	}
	if checks["scripts"] == nil {
		t.Errorf("Ready on a frozen Redis: no scripts failure in %v", err)
	}

	start := time.Now()
	err = g.Coordinating(context.Background())
	if took := time.Since(start); err == nil || took > ReadyTimeout+time.Second {
		t.Errorf("Coordinating without a deadline on a frozen Redis: %v after %v, want an error within ReadyTimeout (%v)", err, took, ReadyTimeout)
	}
}

// TestReadyRedisDownAtStart: a Group made while Redis is unreachable is
// ready (it serves through its own loads) and does not coordinate (all
// three checks fail, the subscription's cut short by the failed TIME
// instead of waiting out the deadline), and Hooks.Unready reports it once,
// within WaitTimeout.
func TestReadyRedisDownAtStart(t *testing.T) {
	addr := redistest.RefusedAddr(t) // dials are refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })

	var mu sync.Mutex
	var reports []error
	reported := make(chan struct{}, 1)
	g, err := New(rdb, Options{WaitTimeout: 200 * time.Millisecond, Hooks: Hooks{Unready: func(err error) {
		mu.Lock()
		reports = append(reports, err)
		mu.Unlock()
		reported <- struct{}{}
	}}})
	if err != nil {
		t.Fatal(err)
	}

	readyServing(t, g)
	took, err := readyWithin(t, g, 5*time.Second)
	checks := readyChecks(t, err)
	for _, c := range []string{"redis", "scripts", "subscription"} {
		if checks[c] == nil {
			t.Errorf("Ready with Redis down: no %s failure in %v", c, err)
		}
	}
	if !errors.Is(checks["subscription"], errRedisDown) || took > 4*time.Second {
		t.Errorf("subscription check %v after %v: want it cut short by the failed redis check", checks["subscription"], took)
	}
	if !strings.Contains(checks["redis"].Error(), "refused") {
		t.Errorf("redis check %v does not say why", checks["redis"])
	}

	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("Hooks.Unready not called within 10s of New (WaitTimeout 200ms)")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 1 {
		t.Fatalf("Hooks.Unready called %d times, want once", len(reports))
	}
	got := readyChecks(t, reports[0])
	if got["redis"] == nil || !errors.Is(got["subscription"], context.DeadlineExceeded) {
		t.Errorf("Hooks.Unready(%v): want the redis check and the subscription's timeout", reports[0])
	}
	if err := g.Ready(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Ready after Close = %v, want ErrClosed", err)
	}
}

// TestReadySubscriptionRefused: a user without access to the fill channel
// (no channel pattern: the default for a new user since Redis 7.0) is
// refused the subscription. Ready names it, with Redis's NOPERM, and
// nothing else; Hooks.Unready reports it, and RedisError("subscribe") as
// before.
func TestReadySubscriptionRefused(t *testing.T) {
	srv := redistest.Start(t, redistest.WithUser("nochannels", "pw", "~*", "+@all"))
	var mu sync.Mutex
	var unready, subscribeErrs []error
	reported := make(chan struct{}, 1)
	g := newGroup(t, srv.UserClient(t, "nochannels"), Options{Hooks: Hooks{
		Unready: func(err error) {
			mu.Lock()
			unready = append(unready, err)
			mu.Unlock()
			reported <- struct{}{}
		},
		RedisError: func(op string, err error) {
			if op == "subscribe" {
				mu.Lock()
				subscribeErrs = append(subscribeErrs, err)
				mu.Unlock()
			}
		},
	}})

	_, err := readyWithin(t, g, 5*time.Second, true)
	checks := readyChecks(t, err)
	if len(checks) != 1 || checks["subscription"] == nil || !strings.Contains(checks["subscription"].Error(), "NOPERM") {
		t.Errorf("Ready as a user without channels: %v; want the subscription check alone, with NOPERM", err)
	}

	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("Hooks.Unready not called for a refused subscription")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unready) != 1 {
		t.Fatalf("Hooks.Unready called %d times, want once", len(unready))
	}
	got := readyChecks(t, unready[0])
	if len(got) != 1 || !strings.Contains(got["subscription"].Error(), "NOPERM") {
		t.Errorf("Hooks.Unready(%v): want the subscription's NOPERM alone", unready[0])
	}
	if len(subscribeErrs) != 1 {
		t.Errorf("RedisError(\"subscribe\") called %d times, want once", len(subscribeErrs))
	}
}

// leastPrivilege is the ACL rules of docs/security.md for the default
// Namespace.
var leastPrivilege = strings.Fields("~stampede:{* ~stampede:lock:{* &stampede:fill:* &stampede:lock:wake:* &__redis__:invalidate +evalsha +eval +get +mget +subscribe +client|id +client|tracking +time +set +del +exists +pexpire +pttl +incr +getrange +strlen +sadd +smembers +srem +scard +sismember +srandmember +rename +publish +type +hset +hget +hgetall +hdel +zadd +zrem +zpopmin +zremrangebyscore +zcard +unlink")

// TestReadyACL: the documented least-privilege user is ready, and Ready
// costs it no refused command (the ACL log stays empty: a probe every few
// seconds must not flood it). A user whose key patterns miss the Group's
// Namespace, or who may not run scripts, is not: the scripts check says
// NOPERM.
func TestReadyACL(t *testing.T) {
	srv := redistest.Start(t,
		redistest.WithUser("stampede", "pw", leastPrivilege...),
		redistest.WithUser("otherkeys", "pw", append([]string{"~other:*"}, leastPrivilege[1:]...)...),
		redistest.WithUser("noscripts", "pw", "~*", "&*", "+@all", "-@scripting"),
	)
	ctx := ctxT(t)
	admin := srv.Client(t)

	g := newGroup(t, srv.UserClient(t, "stampede"), Options{})
	if err := g.Ready(ctx); err != nil {
		t.Fatalf("Ready as the least-privilege user: %v", err)
	}
	log, err := admin.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		// go-redis's connection handshake (CLIENT SETINFO on Redis 7.2+)
		// is refused to any user without CLIENT, and goes on.
		if !strings.HasPrefix(e.Object, "client|") {
			t.Errorf("ACL LOG after Ready: %s refused to %s (%s)", e.Object, e.Username, e.Reason)
		}
	}

	for _, user := range []string{"otherkeys", "noscripts"} {
		g := newGroup(t, srv.UserClient(t, user), Options{})
		err := g.Ready(ctx)
		checks := readyChecks(t, err)
		if checks["scripts"] == nil || !strings.Contains(checks["scripts"].Error(), "NOPERM") {
			t.Errorf("Ready as %s: %v; want the scripts check failed with NOPERM", user, err)
		}
		if checks["redis"] != nil {
			t.Errorf("Ready as %s: the redis check failed: %v", user, checks["redis"])
		}
	}
}

// TestMergeHooksUnready: MergeHooks calls every Unready.
func TestMergeHooksUnready(t *testing.T) {
	var got []string
	h := MergeHooks(
		Hooks{Unready: func(error) { got = append(got, "a") }},
		Hooks{},
		Hooks{Unready: func(error) { got = append(got, "b") }},
	)
	h.Unready(errors.New("x"))
	if strings.Join(got, "") != "ab" {
		t.Errorf("merged Unready called %q, want a then b", got)
	}
}

// TestReadyHookAfterUnready: a Group made while Redis is down reports
// Unready; once Redis answers, its fill subscription comes up and Ready
// reports it, once; a Group closed while still unready reports it at
// Close (TestUnreadyClosedTellsReady). Before, nothing said the subscription had come up: a gauge fed by
// Unready (stampede_started_unready) stayed 1 for the Group's life.
func TestReadyHookAfterUnready(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop(t)
	var unready, ready atomic.Int64
	hooks := Hooks{Unready: func(error) { unready.Add(1) }, Ready: func() { ready.Add(1) }}
	g := newGroup(t, srv.Client(t), Options{WaitTimeout: 100 * time.Millisecond, Hooks: hooks})
	redistest.Eventually(t, 10*time.Second, "Hooks.Unready", func() bool { return unready.Load() == 1 })
	if ready.Load() != 0 {
		t.Fatal("Hooks.Ready before Redis answered")
	}
	srv.Restart(t)
	redistest.Eventually(t, 20*time.Second, "Hooks.Ready once Redis answers", func() bool { return ready.Load() == 1 })
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if u, r := unready.Load(), ready.Load(); u != 1 || r != 1 {
		t.Errorf("Unready %d, Ready %d; want 1 and 1", u, r)
	}

	down := redistest.Start(t)
	down.Stop(t)
	var u2, r2 atomic.Int64
	g2, err := New(down.Client(t), Options{WaitTimeout: 100 * time.Millisecond,
		Hooks: Hooks{Unready: func(error) { u2.Add(1) }, Ready: func() { r2.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "Hooks.Unready", func() bool { return u2.Load() == 1 })
	if err := g2.Close(); err != nil {
		t.Fatal(err)
	}
	if r2.Load() != 1 {
		t.Errorf("Hooks.Ready called %d times for a Group closed while unready; want once, at Close", r2.Load())
	}
}

// TestUnreadyClosedTellsReady: a Group closed while still unready (Redis
// down since New) left a gauge of unready Groups up for good, the closed
// Group counted: Hooks.Ready was never called. Close now reports it
// once, as it reports a breaker left open closed; and a Group that came
// up is not reported again at Close.
func TestUnreadyClosedTellsReady(t *testing.T) {
	addr := redistest.RefusedAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var unready, ready atomic.Int64
	reported := make(chan struct{}, 1)
	g, err := New(rdb, Options{WaitTimeout: 100 * time.Millisecond, Hooks: Hooks{
		Unready: func(error) { unready.Add(1); reported <- struct{}{} },
		Ready:   func() { ready.Add(1) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("Hooks.Unready not called within 10s of New")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if unready.Load() != 1 || ready.Load() != 1 {
		t.Errorf("after Close of an unready Group: Unready %d, Ready %d; want 1 and 1", unready.Load(), ready.Load())
	}
	_ = g.Close()
	if ready.Load() != 1 {
		t.Errorf("a second Close: Ready %d, want still 1", ready.Load())
	}
}
