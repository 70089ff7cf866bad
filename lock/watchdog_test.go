package lock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestWatchdogKeepsLeaseThroughThreeTTLs(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const ttl = 600 * time.Millisecond // renewed every 200ms: slack for a loaded machine
		var renewed atomic.Int32
		c := newTestClient(t, rdb, Options{Hooks: Hooks{Renewed: func(string, error) { renewed.Add(1) }}})
		other := newTestClient(t, rdb, Options{})
		key := redistest.Key(t)
		l, err := c.Obtain(ctxT(t), key, ttl, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		// Holding for three leases is the behaviour under test, so the test
		// spends that long; another client keeps checking it is shut out.
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			if _, err := other.Obtain(ctxT(t), key, ttl); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("another client got the lock while the watchdog held it: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if isClosed(l.Lost()) {
			t.Fatal("Lost() closed while the watchdog held the lock")
		}
		if got := renewed.Load(); got < 3 {
			t.Errorf("%d renewals in 3 leases, want at least one a lease (every ttl/3 when on time)", got)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWatchdogSignalsLostWhenKeyVanishes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var lostHook atomic.Int32
		c := newTestClient(t, rdb, Options{Hooks: Hooks{Lost: func(string) { lostHook.Add(1) }}})
		key := redistest.Key(t)
		l, err := c.Obtain(ctxT(t), key, 300*time.Millisecond, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Del(ctxT(t), c.names(key).lock).Err(); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, l.Lost(), 5*time.Second, "Lost() after the key vanished")
		if got := lostHook.Load(); got != 1 {
			t.Errorf("Lost hook called %d times, want 1", got)
		}
		// Someone else takes the lock; the old watchdog must not renew it.
		other := newTestClient(t, rdb, Options{})
		l2, err := other.Obtain(ctxT(t), key, 400*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		_ = l2
		// Unrenewed, it expires; a stray renewal every 100ms would keep it.
		redistest.Eventually(t, 3*time.Second, "the new holder's unrenewed lease to end", func() bool {
			n, err := rdb.Exists(context.Background(), c.names(key).lock).Result()
			return err == nil && n == 0
		})
		if err := l.Release(ctxT(t)); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Release after loss: got %v, want ErrNotHeld", err)
		}
	})
}

// countingHook counts the commands a client sends.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func TestNoRenewalAfterRelease(t *testing.T) {
	const ttl = 150 * time.Millisecond
	rdb := redistest.Shared(t).Client(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	c := newTestClient(t, rdb, Options{})
	l, err := c.Obtain(ctxT(t), redistest.Key(t), ttl, AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "a first renewal", func() bool { return hook.n.Load() >= 2 })
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	after := hook.n.Load()
	// Three renewal intervals: a watchdog still running would renew here.
	time.Sleep(ttl)
	if got := hook.n.Load(); got != after {
		t.Fatalf("%d commands sent after Release returned, want 0", got-after)
	}
}
