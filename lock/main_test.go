package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// newTestClient returns a lock Client on rdb, closed at the end of the test.
func newTestClient(t testing.TB, rdb redis.UniversalClient, opts Options) *Client {
	t.Helper()
	c := New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitClosed fails the test if ch is not closed within d.
func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// overlapDetector fails when two holders are inside the critical section at
// once. Its counter is incremented non-atomically (load, yield, store): any
// overlap loses an update, which the final count reveals.
type overlapDetector struct {
	inside  atomic.Int32
	overlap atomic.Int32
	count   atomic.Int64
}

func (d *overlapDetector) enter() {
	if d.inside.Add(1) != 1 {
		d.overlap.Add(1)
	}
	v := d.count.Load()
	time.Sleep(50 * time.Microsecond) // widen the window an overlap would need
	d.count.Store(v + 1)
	d.inside.Add(-1)
}

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

func TestFenceIncreases(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		key := redistest.Key(t)
		a, b := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
		var mu sync.Mutex // orders the slice for the race detector; the lock orders the holders
		var fences []int64
		var wg sync.WaitGroup
		for _, c := range []*Client{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					l, err := c.Obtain(ctxT(t), key, 5*time.Second, WaitFor(20*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					fences = append(fences, l.Fence())
					mu.Unlock()
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if len(fences) != 40 {
			t.Fatalf("got %d fences, want 40", len(fences))
		}
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				t.Fatalf("fence %d = %d after %d: not strictly increasing", i, fences[i], fences[i-1])
			}
		}
	})
}

func TestFenceIncreasesAfterCounterLoss(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l1, err := c.Obtain(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f1 := l1.Fence() // minted while held
		if err := l1.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		// A restart without persistence or a failover to a lagging replica
		// loses the counter.
		if err := rdb.Del(ctxT(t), c.names(key).fence).Err(); err != nil {
			t.Fatal(err)
		}
		l2, err := c.Obtain(ctxT(t), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Release(context.Background())
		if f1 <= 0 || l2.Fence() <= f1 || l1.Fence() != f1 {
			t.Fatalf("fence after counter loss = %d, want > %d (first holder now reports %d)", l2.Fence(), f1, l1.Fence())
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
		if n, _ := rdb.HGet(ctx, c.names(key).lock, "job-1").Int(); n != 3 {
			t.Fatalf("hash hold count = %d, want 3", n)
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
