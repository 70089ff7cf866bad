package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// waitPast blocks until the local clock has passed t. The tests below wait
// for a lease to end, which is the behaviour under test: there is no event
// to wait for, only the passing of time.
func waitPast(t time.Time) {
	if d := time.Until(t); d > 0 {
		<-time.After(d + time.Millisecond)
	}
}

// TestReentrantShortInnerHoldKeepsOuter: a nested hold with a shorter lease
// ends on its own; the owner's outer hold keeps the lock for its whole
// lease, so no other owner gets it while the outer handle believes it holds
// it, and the outer handle's Lost stays open.
func TestReentrantShortInnerHoldKeepsOuter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c, other := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		outer, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// Long enough that a loaded machine grants it within the lease
		// (60ms was seen to run out on a cluster under -race).
		const short = 300 * time.Millisecond
		inner, err := c.ObtainReentrant(ctx, key, "job", short)
		if err != nil {
			t.Fatal(err)
		}
		innerEnds := time.Now().Add(short)
		waitClosed(t, inner.Lost(), 5*time.Second, "the inner hold's Lost after its lease")
		waitPast(innerEnds) // the inner hold's lease in Redis is over too

		if _, err := other.ObtainReentrant(ctx, key, "someone-else", time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner while the outer hold lives: got %v, want ErrNotObtained", err)
		}
		if _, err := other.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a token lock while the outer hold lives: got %v, want ErrNotObtained", err)
		}
		if isClosed(outer.Lost()) {
			t.Fatal("the outer hold's Lost closed when the inner hold ended")
		}
		if ttl, err := outer.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Fatalf("outer TTL after the inner hold ended: %v, %v; want its own lease of about a minute", ttl, err)
		}
		if err := inner.Release(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Release of the ended inner hold: got %v, want ErrNotHeld", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatalf("outer Release: %v", err)
		}
		if n, err := rdb.Exists(ctx, c.names(key).lock).Result(); err != nil || n != 0 {
			t.Fatalf("lock still there after its last live hold was released (%v)", err)
		}
	})
}

// TestReentrantExpiredHoldReleaseIsNotHeld: the Release of a hold whose
// lease ended returns ErrNotHeld and leaves the owner's newer holds alone,
// whether the old hold's lock had expired entirely or was kept alive by
// another hold of the owner.
func TestReentrantExpiredHoldReleaseIsNotHeld(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		// Long enough that a loaded machine grants it within the lease
		// (60ms was seen to run out on a cluster under -race).
		const short = 300 * time.Millisecond

		t.Run("lock expired, then taken again", func(t *testing.T) {
			c, other := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
			ctx, key := ctxT(t), redistest.Key(t)
			old, err := c.ObtainReentrant(ctx, key, "job", short)
			if err != nil {
				t.Fatal(err)
			}
			waitClosed(t, old.Lost(), 5*time.Second, "Lost after the lease")
			redistest.Eventually(t, 5*time.Second, "the lock to expire in Redis", func() bool {
				n, err := rdb.Exists(context.Background(), c.names(key).lock).Result()
				return err == nil && n == 0
			})
			cur, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Release(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Release of the expired hold: got %v, want ErrNotHeld", err)
			}
			if _, err := other.ObtainReentrant(ctx, key, "someone-else", time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("another owner after the expired hold's Release: got %v, want ErrNotObtained", err)
			}
			if isClosed(cur.Lost()) {
				t.Fatal("the current hold's Lost closed")
			}
			if err := cur.Release(ctx); err != nil {
				t.Fatalf("current hold's Release: %v", err)
			}
		})

		t.Run("kept alive by a newer hold", func(t *testing.T) {
			c, other := newTestClient(t, rdb, Options{}), newTestClient(t, rdb, Options{})
			ctx, key := ctxT(t), redistest.Key(t)
			old, err := c.ObtainReentrant(ctx, key, "job", short)
			if err != nil {
				t.Fatal(err)
			}
			oldEnds := time.Now().Add(short)
			cur, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			waitClosed(t, old.Lost(), 5*time.Second, "Lost after the short lease")
			waitPast(oldEnds)
			if err := old.Release(ctx); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("Release of the expired hold: got %v, want ErrNotHeld", err)
			}
			if err := cur.Release(ctx); err != nil {
				t.Fatalf("the live hold's Release: %v", err)
			}
			// Every live hold is released: the lock is free.
			l, err := other.ObtainReentrant(ctx, key, "someone-else", time.Minute)
			if err != nil {
				t.Fatalf("another owner after every live hold was released: %v", err)
			}
			_ = l.Release(ctx)
		})
	})
}

// TestReentrantRefreshAndTTLActOnOwnHold: Refresh and TTL of one hold
// neither shorten nor read another hold's lease.
func TestReentrantRefreshAndTTLActOnOwnHold(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		ctx, key := ctxT(t), redistest.Key(t)
		outer, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Refresh(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		if ttl, err := inner.TTL(ctx); err != nil || ttl > time.Second || ttl < 500*time.Millisecond {
			t.Fatalf("inner TTL after Refresh(1s): %v, %v", ttl, err)
		}
		if ttl, err := outer.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Fatalf("outer TTL after the inner hold's Refresh(1s): %v, %v; want its own minute", ttl, err)
		}
		if pttl, err := rdb.PTTL(ctx, c.names(key).lock).Result(); err != nil || pttl < 50*time.Second {
			t.Fatalf("lock PTTL %v (%v), want the latest hold's lease", pttl, err)
		}
		if err := inner.Refresh(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		if pttl, err := rdb.PTTL(ctx, c.names(key).lock).Result(); err != nil || pttl < 59*time.Minute {
			t.Fatalf("lock PTTL %v (%v) after Refresh(1h), want an hour", pttl, err)
		}
		if ttl, err := outer.TTL(ctx); err != nil || ttl > time.Minute {
			t.Fatalf("outer TTL after the inner hold's Refresh(1h): %v, %v; want its own minute", ttl, err)
		}
		for _, l := range []*Lock{inner, outer} {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
