package guard

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestOneLoadAcrossNodes: callers on several nodes ask for a missing key
// at once; the origin is called once and everyone gets its value.
func TestOneLoadAcrossNodes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const nodes, callers = 4, 16
		var arrived counter
		org := newOrigin(true)
		key := redistest.Key(t)
		var wg sync.WaitGroup
		results := make(chan Result, nodes*callers)
		errs := make(chan error, nodes*callers)
		for range nodes {
			g := newGroup(t, rdb, Options{})
			g.testJoined = func(string) { arrived.add() }
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := g.Do(ctxT(t), key, org.load)
					results <- r
					errs <- err
				}()
			}
		}
		// Hold the load until every caller is inside a read flight.
		redistest.Eventually(t, 10*time.Second, "every caller inside a flight", func() bool { return arrived.n.Load() == nodes*callers })
		close(org.gate)
		wg.Wait()
		close(results)
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		statuses := map[Status]int{}
		for r := range results {
			if string(r.Value) != "v1" {
				t.Fatalf("got %q, want v1", r.Value)
			}
			statuses[r.Status]++
		}
		if n := org.calls.Load(); n != 1 {
			t.Fatalf("origin called %d times, want 1", n)
		}
		if statuses[Miss] != 1 {
			t.Errorf("statuses %v: want exactly one Miss (the loader)", statuses)
		}
	})
}

// TestStaleServedWhileRefreshing: a stale value is returned at once, even
// while its refresh is still loading, and the refresh lands.
func TestStaleServedWhileRefreshing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		a, b := newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		putEntry(t, rdb, a, key, "old", -1, 60_000, 1)
		org := newOrigin(true)
		for _, g := range []*Group{a, b, a, b} {
			r, err := g.Do(ctxT(t), key, org.load)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != Stale || string(r.Value) != "old" {
				t.Fatalf("got %v %q while refreshing, want stale \"old\"", r.Status, r.Value)
			}
		}
		redistest.Eventually(t, 10*time.Second, "the refresh to start", func() bool { return org.calls.Load() == 1 })
		close(org.gate)
		redistest.Eventually(t, 10*time.Second, "the refreshed value", func() bool {
			r, err := b.Do(ctxT(t), key, org.load)
			return err == nil && r.Status == Hit && string(r.Value) == "v1"
		})
		if n := org.calls.Load(); n != 1 {
			t.Fatalf("origin called %d times for one refresh, want 1", n)
		}
	})
}

// TestWaiterWokenByFill: a caller on another node waiting for a cold key is
// woken by the fill's notification, not its fallback timer.
func TestWaiterWokenByFill(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var lastNotified atomic.Bool
		var wakes, leaseBusy counter
		leader := newGroup(t, rdb, Options{})
		waiter := newGroup(t, rdb, Options{
			LockTTL: time.Minute, // the fallback poll would be far later than the test
			Hooks: Hooks{
				Woken: func(_ string, notified bool, _ time.Duration) {
					wakes.add()
					lastNotified.Store(notified)
				},
				Lease: func(_ string, won bool) {
					if !won {
						leaseBusy.add()
					}
				},
			},
		})
		if err := waiter.hub.Ready(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		key := redistest.Key(t)
		org := newOrigin(true)
		got := make(chan error, 1)
		go func() {
			_, err := leader.Do(ctxT(t), key, org.load)
			got <- err
		}()
		redistest.Eventually(t, 10*time.Second, "the leader loading", func() bool { return org.calls.Load() == 1 })
		res := make(chan Result, 1)
		go func() {
			r, err := waiter.Do(ctxT(t), key, org.load)
			if err != nil {
				t.Error(err)
			}
			res <- r
		}()
		redistest.Eventually(t, 10*time.Second, "the waiter to find the lease busy", func() bool { return leaseBusy.n.Load() == 1 })
		redistest.Eventually(t, 10*time.Second, "the waiter registered for the fill", func() bool {
			return waiter.hub.Waiters(waiter.names(key).entry) == 1
		})
		close(org.gate)
		r := <-res
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if r.Status != Shared || string(r.Value) != "v1" {
			t.Fatalf("waiter got %v %q, want shared v1", r.Status, r.Value)
		}
		if org.calls.Load() != 1 {
			t.Fatalf("origin called %d times, want 1", org.calls.Load())
		}
		// Fallback polls may come first on a slow machine; the wake-up that
		// delivered the value must be the fill's notification.
		if wakes.n.Load() == 0 || !lastNotified.Load() {
			t.Fatalf("the waiter got the value after %d wake-ups, the last by its timer", wakes.n.Load())
		}
	})
}
