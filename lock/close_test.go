package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestCloseWithCleanupsStarting: callers still in Obtain start background
// cleanups (a failed attempt's release, leaving the wait queue) while Close
// waits for the earlier ones. Neither Close nor those callers may panic
// (sync.WaitGroup forbids an Add concurrent with a Wait that may be
// returning), and every cleanup asked for runs: by the time its caller and
// Close have returned, it is done.
func TestCloseWithCleanupsStarting(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	const workers = 4
	end := time.Now().Add(time.Second)
	rounds := 0
	for ; rounds < 500 && time.Now().Before(end); rounds++ {
		c := New(rdb, Options{})
		var asked, ran atomic.Int64
		panics := make(chan string, workers+1)
		var started, done sync.WaitGroup
		started.Add(workers)
		for range workers {
			done.Add(1)
			go func() {
				defer done.Done()
				defer func() {
					if r := recover(); r != nil {
						panics <- fmt.Sprint("background: ", r)
					}
				}()
				// Cleanups before, during and just after Close, one at a
				// time: each asked for as the one before ends, when the
				// count of cleanups in flight may have just reached zero
				// and woken Close.
				for i, after := 0, 0; after < 20; i++ {
					asked.Add(1)
					finished := make(chan struct{})
					c.background(func(context.Context) { ran.Add(1); close(finished) })
					if i == 0 {
						started.Done()
					}
					<-finished
					if c.isClosed() {
						after++
					}
				}
			}()
		}
		started.Wait()
		func() {
			defer func() {
				if r := recover(); r != nil {
					panics <- fmt.Sprint("Close: ", r)
				}
			}()
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}()
		done.Wait()
		close(panics)
		for p := range panics {
			t.Fatalf("round %d: panic in %s", rounds, p)
		}
		if a, r := asked.Load(), ran.Load(); a != r {
			t.Fatalf("round %d: %d cleanups asked for, %d ran", rounds, a, r)
		}
	}
	t.Logf("%d rounds", rounds)
}

// TestCloseStopsWatchdogs: Close stops the watchdogs of the locks obtained
// through the Client, whose holders never released them (a forgotten
// handle, a holder that panicked): when Close returns no watchdog runs,
// no renewal is sent after it, and the lease runs out: Lost closes and
// another Client obtains the lock.
func TestCloseStopsWatchdogs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var renewals atomic.Int32
	renewed := make(chan struct{}, 100)
	c := New(rdb, Options{Hooks: Hooks{Renewed: func(string, error) {
		renewals.Add(1)
		select {
		case renewed <- struct{}{}:
		default:
		}
	}}})
	other := newTestClient(t, rdb, Options{})
	const ttl = 150 * time.Millisecond
	var locks []*Lock
	for range 3 {
		l, err := c.Obtain(ctxT(t), redistest.Key(t), ttl, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	// Renewals under way: the watchdogs run.
	for range 3 {
		waitClosed(t, renewed, 5*time.Second, "a renewal")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	atClose := renewals.Load()
	for i, l := range locks {
		select {
		case <-l.wdDone:
		default:
			t.Fatalf("lock %d: its watchdog still runs after Close returned", i)
		}
	}
	for i, l := range locks {
		waitClosed(t, l.Lost(), 5*ttl, fmt.Sprintf("lock %d's Lost after Close", i))
		l2, err := other.Obtain(ctxT(t), l.key, ttl, WaitFor(5*ttl))
		if err != nil {
			t.Fatalf("lock %d after Close: %v", i, err)
		}
		_ = l2.Release(ctxT(t))
	}
	if n := renewals.Load() - atClose; n != 0 {
		t.Errorf("%d renewals after Close returned", n)
	}
	// Release after Close changes nothing and reports the lock gone.
	if err := locks[0].Release(ctxT(t)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of a lock whose lease ran out after Close: %v, want ErrNotHeld", err)
	}
}

// TestCloseEndsWaits: a caller waiting (WaitFor) for a busy lock when
// Close runs returns ErrClosed at once, having left the wait queue, and
// never obtains the lock, also when the holder releases it right after
// Close.
func TestCloseEndsWaits(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	holders := newTestClient(t, rdb, Options{})
	c := New(rdb, Options{})
	key := redistest.Key(t)
	// A long lease: the waiter's fallback timer does not fire in the test.
	h, err := holders.Obtain(ctxT(t), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Obtain(ctxT(t), key, time.Minute, WaitFor(3*time.Second), AutoRenew())
		done <- result{l, err}
	}()
	queue := c.names(key).queue
	redistest.Eventually(t, 5*time.Second, "the waiter in the queue", func() bool {
		return rdb.ZCard(ctxT(t), queue).Val() == 1
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	if err := h.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Second):
		t.Fatal("the waiter still waits a second after Close returned")
	}
	if r.l != nil {
		_ = r.l.Release(ctxT(t))
		t.Fatalf("the waiter obtained the lock %v after its Client's Close returned", time.Since(closed))
	}
	if !errors.Is(r.err, ErrClosed) {
		t.Fatalf("waiter: %v, want ErrClosed", r.err)
	}
	if n := rdb.ZCard(ctxT(t), queue).Val(); n != 0 {
		t.Errorf("%d waiters left in the queue", n)
	}
	// The lock is free: no reservation for the gone waiter keeps it.
	l, err := holders.Obtain(ctxT(t), key, time.Minute)
	if err != nil {
		t.Fatalf("obtain after the closed Client's waiter left: %v", err)
	}
	_ = l.Release(ctxT(t))
}
