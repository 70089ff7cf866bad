package guard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// probeCall runs one call through b the way Do does: ask, defer the
// release, then end as end says.
func probeCall(b *breaker, end func(b *breaker)) (probe uint64, allowed bool) {
	return probeCallTo(b, new(uint64), end)
}

// probeCallTo is probeCall that also stores the probe in *got before the
// call ends, for calls that end by panicking or by runtime.Goexit.
func probeCallTo(b *breaker, got *uint64, end func(b *breaker)) (probe uint64, allowed bool) {
	probe, allowed = b.allow()
	if !allowed {
		return probe, false
	}
	*got = probe
	defer b.release(probe)
	end(b)
	return probe, true
}

// TestBreaker drives the breaker through every way its probe can end, on a
// fake clock: each row opens the breaker, lets the cooldown pass, ends the
// probe its way, and checks the state that follows, the hook's events (one per
// transition: a failed probe leaves the breaker open, unreported), and
// that a caller arriving during the probe is kept off Redis.
func TestBreaker(t *testing.T) {
	const cooldown = 300 * time.Millisecond
	errRedis := errors.New("dial tcp: i/o timeout")
	errWrongType := redis.Error(proto("WRONGTYPE Operation against a key holding the wrong kind of value"))
	rows := []struct {
		name string
		end  func(b *breaker)
		// After the probe ended:
		wantOpen      bool // the breaker still keeps callers off Redis
		wantNextProbe bool // the next call is let through at once as a new probe
		wantHooks     []bool
	}{
		{name: "value", end: func(b *breaker) { b.record(nil, nil) },
			wantHooks: []bool{true, false}},
		{name: "wrongtype", end: func(b *breaker) { b.record(errWrongType, nil) },
			wantHooks: []bool{true, false}},
		{name: "error", end: func(b *breaker) { b.record(errRedis, nil) },
			wantOpen: true, wantHooks: []bool{true}}, // a failed probe is no new transition
		{name: "redis timeout", end: func(b *breaker) { b.record(context.DeadlineExceeded, nil) },
			wantOpen: true, wantHooks: []bool{true}}, // a failed probe is no new transition
		{name: "cancel", end: func(b *breaker) { b.record(context.Canceled, context.Canceled) },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "caller deadline", end: func(b *breaker) { b.record(context.DeadlineExceeded, context.DeadlineExceeded) },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "no Redis call (closed Group)", end: func(*breaker) {},
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "panic", end: func(*breaker) { panic("loader bug") },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "goexit", end: func(*breaker) { runtime.Goexit() },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var hooks []bool
				b := &breaker{threshold: 3, cooldown: cooldown, hook: func(open bool) {
					mu.Lock()
					hooks = append(hooks, open)
					mu.Unlock()
				}}
				// Closed: calls go through, carrying no probe.
				for range 3 {
					p, ok := probeCall(b, func(b *breaker) { b.record(errRedis, nil) })
					if !ok || p != 0 {
						t.Fatalf("closed breaker: allow = %d, %v; want 0, true", p, ok)
					}
				}
				if _, ok := b.allow(); ok || !b.open() {
					t.Fatal("3 failures in a row did not open the breaker")
				}
				time.Sleep(cooldown - time.Millisecond)
				if _, ok := b.allow(); ok {
					t.Fatal("a call went through before the cooldown ended")
				}
				time.Sleep(time.Millisecond)

				// The probe; a caller arriving meanwhile stays off Redis.
				started, during := make(chan struct{}), make(chan bool, 1)
				done := make(chan uint64)
				go func() {
					var probe uint64
					defer func() { done <- probe }()
					defer func() { _ = recover() }()
					probeCallTo(b, &probe, func(b *breaker) {
						close(started)
						_, ok := b.allow()
						during <- ok
						row.end(b)
					})
				}()
				<-started
				if <-during {
					t.Fatal("a second call went through while the probe was out")
				}
				if probe := <-done; probe == 0 {
					t.Fatal("the call after the cooldown carried no probe")
				}

				if got := b.open(); got != row.wantOpen {
					t.Fatalf("open = %v; want %v", got, row.wantOpen)
				}
				next, ok := b.allow()
				switch {
				case !row.wantOpen && (!ok || next != 0):
					t.Fatalf("closed breaker: allow = %d, %v; want 0, true", next, ok)
				case row.wantOpen && row.wantNextProbe && (!ok || next == 0):
					t.Fatalf("allow = %d, %v; want the next call to probe at once", next, ok)
				case row.wantOpen && !row.wantNextProbe && ok:
					t.Fatal("a call went through right after a failed probe; want a new cooldown")
				}
				if row.wantOpen && !row.wantNextProbe {
					// A new cooldown, then a new probe.
					time.Sleep(cooldown)
					if p, ok := b.allow(); !ok || p == 0 {
						t.Fatalf("after the new cooldown allow = %d, %v; want a probe", p, ok)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(hooks, row.wantHooks) {
					t.Fatalf("hook events %v; want %v", hooks, row.wantHooks)
				}
			})
		})
	}
}

// TestBreakerStaleRelease: a probe's release that arrives after another
// verdict and a newer probe must not free the newer probe's slot.
func TestBreakerStaleRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &breaker{threshold: 1, cooldown: time.Second}
		b.failure()
		time.Sleep(time.Second)
		first, _ := b.allow()
		b.failure() // another call's verdict: open again
		time.Sleep(time.Second)
		second, ok := b.allow()
		if !ok || second == 0 || second == first {
			t.Fatalf("second probe = %d, %v", second, ok)
		}
		b.release(first)
		if _, ok := b.allow(); ok {
			t.Fatal("the first probe's late release freed the second probe's slot")
		}
		b.release(second)
		if p, ok := b.allow(); !ok || p == 0 {
			t.Fatal("releasing the probe out did not let the next call probe")
		}
	})
}

// TestBreakerConcurrentProbe: of many callers arriving once the cooldown
// has passed, exactly one probes.
func TestBreakerConcurrentProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &breaker{threshold: 1, cooldown: time.Second}
		b.failure()
		time.Sleep(time.Second)
		var mu sync.Mutex
		probes := 0
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				if p, ok := b.allow(); ok {
					mu.Lock()
					probes++
					mu.Unlock()
					if p == 0 {
						panic(fmt.Sprint("allowed with no probe"))
					}
				}
			})
		}
		wg.Wait()
		if probes != 1 {
			t.Fatalf("%d callers probed; want 1", probes)
		}
	})
}

type proto string

func (p proto) Error() string { return string(p) }
func (proto) RedisError()     {}

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
