package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// fleetOrigin is an origin shared by the callers of several Groups: it
// counts loads and the most that ever ran at once, fleet-wide.
type fleetOrigin struct {
	calls, running, maxRun atomic.Int64
}

// enter records a load starting; the returned func records its end.
func (o *fleetOrigin) enter() (n int64, leave func()) {
	n = o.calls.Add(1)
	r := o.running.Add(1)
	for m := o.maxRun.Load(); r > m && !o.maxRun.CompareAndSwap(m, r); m = o.maxRun.Load() {
	}
	return n, func() { o.running.Add(-1) }
}

// work stands for the origin's latency: it widens the window in which
// loads could overlap, were they not serialized.
func work(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// TestPrivateTakesTurns: while a cold key's loads fail with Private, the
// callers of three nodes take turns, one load at a time fleet-wide; each
// failure reaches only the caller whose load it was; the first value is
// shared with every caller still waiting.
func TestPrivateTakesTurns(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const nodes, callers, failures = 3, 8, 5
		key := redistest.Key(t)
		var org fleetOrigin
		type answer struct {
			id  int
			res Result
			err error
		}
		answers := make(chan answer, nodes*callers)
		var wg sync.WaitGroup
		for n := range nodes {
			g := newGroup(t, rdb, Options{WaitTimeout: 20 * time.Second})
			for i := range callers {
				id := n*callers + i
				load := func(context.Context) ([]byte, error) {
					k, leave := org.enter()
					defer leave()
					work(5 * time.Millisecond)
					if k <= failures {
						return nil, Private(fmt.Errorf("failure of caller %d", id))
					}
					return []byte("value"), nil
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := g.Do(ctxT(t), key, load)
					answers <- answer{id, res, err}
				}()
			}
		}
		wg.Wait()
		close(answers)
		failed := 0
		for a := range answers {
			switch {
			case a.err != nil && a.err.Error() == fmt.Sprintf("failure of caller %d", a.id):
				failed++
			case a.err != nil:
				t.Errorf("caller %d got %v, not its own failure", a.id, a.err)
			case string(a.res.Value) != "value":
				t.Errorf("caller %d got %q", a.id, a.res.Value)
			}
		}
		if failed != failures {
			t.Errorf("%d callers got their own failure, want %d", failed, failures)
		}
		if got := org.calls.Load(); got != failures+1 {
			t.Errorf("%d loads, want %d (one per failing turn, then one value)", got, failures+1)
		}
		if got := org.maxRun.Load(); got != 1 {
			t.Errorf("%d loads ran at once, want 1", got)
		}
	})
}

// TestPrivateTurnTimeout: a key whose loads keep failing with Private:
// callers whose turn does not come within WaitTimeout get ErrBackoff naming
// the key, never another caller's failure; no node loads outside the lease
// after WaitTimeout; loads never overlap.
func TestPrivateTurnTimeout(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const nodes, callers = 3, 6
		key := redistest.Key(t)
		var org fleetOrigin
		var wg sync.WaitGroup
		var own, backoff atomic.Int64
		for n := range nodes {
			g := newGroup(t, rdb, Options{WaitTimeout: 150 * time.Millisecond, LockTTL: time.Second})
			for i := range callers {
				id := n*callers + i
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
						_, leave := org.enter()
						defer leave()
						work(40 * time.Millisecond)
						return nil, Private(fmt.Errorf("failure of caller %d", id))
					})
					switch {
					case err == nil:
						t.Errorf("caller %d: no error", id)
					case err.Error() == fmt.Sprintf("failure of caller %d", id):
						own.Add(1)
					case errors.Is(err, ErrBackoff) && strings.Contains(err.Error(), key):
						backoff.Add(1)
					default:
						t.Errorf("caller %d got %v", id, err)
					}
				}()
			}
		}
		wg.Wait()
		if got := org.maxRun.Load(); got != 1 {
			t.Errorf("%d loads ran at once, want 1", got)
		}
		if own.Load() != org.calls.Load() {
			t.Errorf("%d callers got their own failure, %d loads ran", own.Load(), org.calls.Load())
		}
		if backoff.Load() == 0 {
			t.Errorf("no caller timed out waiting for a turn (own %d): the test did not test it", own.Load())
		}
	})
}

// TestPrivateRefreshServesStale: a refresh that fails with Private serves
// the stale value and backs off, like any failure: the failure reaches no
// caller.
func TestPrivateRefreshServesStale(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	key := redistest.Key(t)
	refreshErrs := make(chan error, 1)
	g := newGroup(t, rdb, Options{ErrorBackoff: time.Minute, Hooks: Hooks{
		RefreshError: func(_ string, err error) { refreshErrs <- err },
	}})
	putEntry(t, rdb, g, key, "old", -1000, 60_000, 1)
	loads := 0
	load := func(context.Context) ([]byte, error) { loads++; return nil, Private(errors.New("mine")) }
	res, err := g.Do(ctxT(t), key, load)
	if err != nil || res.Status != Stale || string(res.Value) != "old" {
		t.Fatalf("got %v %q %v, want the stale value", res.Status, res.Value, err)
	}
	if err := <-refreshErrs; err == nil || err.Error() != "mine" {
		t.Fatalf("refresh error %v", err)
	}
	res, err = g.Do(ctxT(t), key, nil2Loader(t))
	if err != nil || res.Status != Stale {
		t.Fatalf("during the back-off: %v %v, want the stale value and no load", res.Status, err)
	}
	if loads != 1 {
		t.Errorf("%d loads, want 1", loads)
	}
}

// TestPassRunsOwnLoads: after a load answers Pass, calls of the key run
// their own loads at once, concurrently, across nodes, each getting its
// own answer with Status Passed; the first value ends the window and is
// shared from then on.
func TestPassRunsOwnLoads(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		key := redistest.Key(t)
		gs := []*Group{newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})}
		_, err := gs[0].Do(ctxT(t), key, func(context.Context) ([]byte, error) {
			return nil, Pass(errors.New("private answer 0"), time.Minute)
		})
		if err == nil || err.Error() != "private answer 0" {
			t.Fatalf("first call: %v", err)
		}
		// Every call of the window must be inside its own load at once:
		// a coalesced or serialized call would never reach the barrier.
		const calls = 6
		var barrier sync.WaitGroup
		barrier.Add(calls)
		all := make(chan struct{})
		go func() { barrier.Wait(); close(all) }()
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := gs[i%2].Do(ctxT(t), key, func(ctx context.Context) ([]byte, error) {
					barrier.Done()
					select {
					case <-all:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					return nil, Pass(fmt.Errorf("private answer %d", i+1), time.Minute)
				})
				if want := fmt.Sprintf("private answer %d", i+1); err == nil || err.Error() != want || res.Status != Passed {
					t.Errorf("call %d: %v %v, want Passed and %q", i+1, res.Status, err, want)
				}
			}()
		}
		wg.Wait()
		res, err := gs[1].Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("shared"), nil })
		if err != nil || res.Status != Passed || string(res.Value) != "shared" {
			t.Fatalf("value in the window: %v %q %v", res.Status, res.Value, err)
		}
		// The node that stored it, and a node that has no pass hint (a
		// node trusts its hint for up to passHintMax), are served it.
		for _, g := range []*Group{gs[1], newGroup(t, rdb, Options{})} {
			res, err = g.Do(ctxT(t), key, nil2Loader(t))
			if err != nil || res.Status != Hit || string(res.Value) != "shared" {
				t.Fatalf("after the window: %v %q %v, want a hit", res.Status, res.Value, err)
			}
		}
	})
}

// TestPassValueLosesToInvalidate: a value loaded in a pass window is not
// stored when the key was invalidated while it loaded.
func TestPassValueLosesToInvalidate(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	key := redistest.Key(t)
	g := newGroup(t, rdb, Options{})
	_, _ = g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return nil, Pass(errors.New("p"), time.Minute) })
	res, err := g.Do(ctxT(t), key, func(ctx context.Context) ([]byte, error) {
		if err := g.Invalidate(ctx, key); err != nil {
			return nil, err
		}
		return []byte("older than the invalidation"), nil
	})
	if err != nil || res.Status != Passed {
		t.Fatalf("%v %v", res.Status, err)
	}
	if n, err := rdb.Exists(ctxT(t), g.names(key).entry).Result(); err != nil || n != 0 {
		t.Fatalf("entry stored after the invalidation (exists %d, %v)", n, err)
	}
}

// TestPrivateDegraded: with Redis down, a load's Private answer reaches its
// own caller only; the other callers of the process take turns.
func TestPrivateDegraded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	key := redistest.Key(t)
	g := newGroup(t, rdb, Options{RedisTimeout: 50 * time.Millisecond, BreakerCooldown: time.Hour})
	srv.Kill(t)
	var org fleetOrigin
	const callers = 8
	var wg sync.WaitGroup
	for id := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
				k, leave := org.enter()
				defer leave()
				work(5 * time.Millisecond)
				if k <= 3 {
					return nil, Private(fmt.Errorf("failure of caller %d", id))
				}
				return []byte("value"), nil
			})
			if err != nil && err.Error() != fmt.Sprintf("failure of caller %d", id) {
				t.Errorf("caller %d got %v", id, err)
			}
			if err == nil && string(res.Value) != "value" {
				t.Errorf("caller %d got %q", id, res.Value)
			}
		}()
	}
	wg.Wait()
	if got := org.maxRun.Load(); got != 1 {
		t.Errorf("%d loads ran at once, want 1", got)
	}
}
