package guard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLateWriterRejected: a node whose refresh started before an Invalidate
// (or before a newer fill) never overwrites the newer value.
func TestLateWriterRejected(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var rejected counter
		late := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.add() }}})
		fresh := newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		slow := newOrigin(true)
		slow.value = func(int64) ([]byte, error) { return []byte("old"), nil }
		done := make(chan error, 1)
		go func() {
			_, err := late.Do(ctxT(t), key, slow.load)
			done <- err
		}()
		redistest.Eventually(t, 10*time.Second, "the late writer loading", func() bool { return slow.calls.Load() == 1 })
		// The data changed: invalidate, and another node loads the new value.
		if err := fresh.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		r, err := fresh.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("new"), nil })
		if err != nil || string(r.Value) != "new" {
			t.Fatalf("got %q, %v", r.Value, err)
		}
		close(slow.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if rejected.n.Load() != 1 {
			t.Fatalf("%d fills rejected, want the late writer's", rejected.n.Load())
		}
		r, err = fresh.Do(ctxT(t), key, slow.load)
		if err != nil || string(r.Value) != "new" || r.Status != Hit {
			t.Fatalf("after the late fill: %v %q %v, want hit \"new\"", r.Status, r.Value, err)
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

// TestNegativeCaching: ErrNotFound is cached for NegativeFor on every node.
func TestNegativeCaching(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		a, b := newGroup(t, rdb, Options{NegativeFor: time.Minute}), newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		org := newOrigin(false)
		org.value = func(int64) ([]byte, error) { return nil, ErrNotFound }
		for _, g := range []*Group{a, b, a} {
			if _, err := g.Do(ctxT(t), key, org.load); !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		}
		if org.calls.Load() != 1 {
			t.Fatalf("origin called %d times, want 1", org.calls.Load())
		}
		pttl, err := rdb.PTTL(ctxT(t), a.names(key).entry).Result()
		if err != nil || pttl <= 0 || pttl > time.Minute {
			t.Fatalf("negative entry TTL %v (%v), want within NegativeFor", pttl, err)
		}
	})
}

// TestStaleIfError: a failing refresh keeps the stale value served and holds
// the lease for ErrorBackoff, so no node calls the failing loader at once.
func TestStaleIfError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var refreshErrs counter
		var loads counter
		a := newGroup(t, rdb, Options{ErrorBackoff: time.Minute, Hooks: Hooks{
			RefreshError: func(string, error) { refreshErrs.add() },
		}})
		b := newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		putEntry(t, rdb, a, key, "old", -1, 60_000, 1)
		failing := func(context.Context) ([]byte, error) { loads.add(); return nil, errors.New("db down") }
		r, err := a.Do(ctxT(t), key, failing)
		if err != nil || r.Status != Stale || string(r.Value) != "old" {
			t.Fatalf("got %v %q %v, want stale old", r.Status, r.Value, err)
		}
		redistest.Eventually(t, 10*time.Second, "the refresh to fail", func() bool { return refreshErrs.n.Load() == 1 })
		pttl, err := a.rdb.PTTL(ctxT(t), a.names(key).keys[1]).Result()
		if err != nil || pttl < 50*time.Second {
			t.Fatalf("lease PTTL %v (%v) after the failure, want held for the back-off", pttl, err)
		}
		for _, g := range []*Group{a, b} {
			r, err := g.Do(ctxT(t), key, failing)
			if err != nil || r.Status != Stale || string(r.Value) != "old" {
				t.Fatalf("during back-off: %v %q %v, want stale old", r.Status, r.Value, err)
			}
		}
		if loads.n.Load() != 1 {
			t.Fatalf("failing loader called %d times, want 1", loads.n.Load())
		}
	})
}

// TestCorruptEntryIsAMiss: garbage under a key is reported, loaded over,
// never a panic.
func TestCorruptEntryIsAMiss(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var corrupt counter
		g := newGroup(t, rdb, Options{Hooks: Hooks{Corrupt: func(string, error) { corrupt.add() }}})
		key := redistest.Key(t)
		for _, garbage := range []string{"garbage", "~1,99999999999999999999,1,1,1,1,\nx", "~1,1,1,1,1,1,zz\n", "~2,1,2,3,4,5,\nx"} {
			if err := rdb.Set(ctxT(t), g.names(key).entry, garbage, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			before := corrupt.n.Load()
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("good"), nil })
			if err != nil || string(r.Value) != "good" {
				t.Fatalf("over %q: got %q, %v", garbage, r.Value, err)
			}
			if corrupt.n.Load() == before {
				t.Fatalf("corrupt entry %q not reported", garbage)
			}
			if r, err := g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit || string(r.Value) != "good" {
				t.Fatalf("after overwriting %q: %v %q %v", garbage, r.Status, r.Value, err)
			}
		}
	})
}

func nil2(context.Context) ([]byte, error) { return nil, errors.New("loader must not run") }

// TestRedisDownDegrades: with Redis gone, callers are served through the
// process's singleflight (one loader call at a time per key), the breaker
// opens, and coordination resumes when Redis is back.
func TestRedisDownDegrades(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	var opened, closed counter
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond, Hooks: Hooks{
		Breaker: func(open bool) {
			if open {
				opened.add()
			} else {
				closed.add()
			}
		},
	}})
	key := redistest.Key(t)
	org := newOrigin(false)
	if _, err := g.Do(ctxT(t), key, org.load); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				r, err := g.Do(ctxT(t), key, org.load)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Status != Degraded {
					t.Errorf("status %v with Redis down, want degraded", r.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	if org.maxRun.Load() != 1 {
		t.Fatalf("%d loads of one key ran at once on one node, want 1", org.maxRun.Load())
	}
	if opened.n.Load() == 0 {
		t.Fatal("breaker never opened")
	}
	srv.Restart(t)
	redistest.Eventually(t, 10*time.Second, "a hit after Redis returned", func() bool {
		r, err := g.Do(ctxT(t), key, org.load)
		return err == nil && (r.Status == Hit || r.Status == Miss)
	})
	if closed.n.Load() == 0 {
		t.Fatal("breaker never closed")
	}
}

// TestBadInput: each bad call gets a clear error and stores nothing.
func TestBadInput(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	blocking := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer blocking.Close()
	if _, err := New(blocking, Options{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New with a client that ignores ctx deadlines: %v, want an error naming ContextTimeoutEnabled", err)
	}
	for _, o := range []Options{{FreshFor: -1}, {LockTTL: -time.Second}, {Namespace: "a{b"}, {Jitter: 2}, {EarlyRefreshBeta: -1}, {WaitTimeoutPolicy: 7}} {
		if _, err := New(rdb, o); err == nil {
			t.Errorf("New with %+v succeeded", o)
		}
	}
	g := newGroup(t, rdb, Options{})
	load := func(context.Context) ([]byte, error) { return []byte("x"), nil }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		key  string
		load LoadFunc
		want string
	}{
		{"empty key", ctxT(t), "", load, "empty key"},
		{"huge key", ctxT(t), strings.Repeat("k", MaxKeyBytes+1), load, "exceeds MaxKeyBytes"},
		{"nil loader", ctxT(t), "k", nil, "nil LoadFunc"},
		{"cancelled", cancelled, "k", load, "context canceled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := g.Do(c.ctx, c.key, c.load); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	if n := len(mr.Keys()); n != 0 {
		t.Fatalf("bad calls stored %d keys: %v", n, mr.Keys())
	}
	// Odd bytes are fine keys.
	for _, k := range []string{"{", "}", "a}b{c", "\x00\xff", "%7D"} {
		if r, err := g.Do(ctxT(t), k, func(context.Context) ([]byte, error) { return []byte(k), nil }); err != nil || string(r.Value) != k {
			t.Fatalf("key %q: %q %v", k, r.Value, err)
		}
	}
	_ = g.Close()
	if _, err := g.Do(ctxT(t), "k", load); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
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
