package lock

import (
	"context"
	"errors"
	"fmt"
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

// TestForeignHashNeverTaken: a hash under a lock's name without an owner
// field (another tool's, or an older layout's) is held by someone else,
// also when its fields look like holds whose deadlines passed: no Obtain
// (reentrant or not, waiting or not) takes it, and none prunes it, not even
// on a second try after the first refused.
func TestForeignHashNeverTaken(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c := newTestClient(t, rdb, Options{})
	ctx := ctxT(t)
	key := redistest.Key(t)
	name := c.names(key).lock
	foreign := map[string]string{"hold:job-1": "done", "hold:job-2": "1", "other": "x"}
	if err := rdb.HSet(ctx, name, foreign).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), name) })
	tries := []struct {
		name   string
		obtain func() (*Lock, error)
	}{
		{"reentrant", func() (*Lock, error) { return c.ObtainReentrant(ctx, key, "owner", time.Second) }},
		{"reentrant again", func() (*Lock, error) { return c.ObtainReentrant(ctx, key, "owner", time.Second) }},
		{"reentrant waiting", func() (*Lock, error) {
			return c.ObtainReentrant(ctx, key, "owner", time.Second, WaitFor(30*time.Millisecond))
		}},
		{"token", func() (*Lock, error) { return c.Obtain(ctx, key, time.Second) }},
		{"token waiting", func() (*Lock, error) { return c.Obtain(ctx, key, time.Second, WaitFor(30*time.Millisecond)) }},
	}
	for _, try := range tries {
		l, err := try.obtain()
		if l != nil {
			_ = l.Release(ctx)
		}
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("%s: %v, want ErrNotObtained", try.name, err)
		}
		got, err := rdb.HGetAll(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(foreign) || got["hold:job-1"] != "done" || got["hold:job-2"] != "1" || got["other"] != "x" {
			t.Fatalf("%s changed the foreign hash: %v, want %v", try.name, got, foreign)
		}
	}
}

// TestReentrantManyDeadHolds: an owner whose holds ended on their own,
// more of them than Lua's unpack takes at once (about 8,000), while one
// long hold keeps the lock: the next script to meet them prunes them all,
// and the long hold's Refresh and Release, another hold of the owner and
// another owner's refusal all work.
func TestReentrantManyDeadHolds(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c := newTestClient(t, rdb, Options{})
	ctx := ctxT(t)
	key := redistest.Key(t)
	name := c.names(key).lock
	long, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), name) })
	const dead = 9000
	bury := func() {
		t.Helper()
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		args := make([]any, 0, 2*dead)
		for i := range dead {
			// As the scripts write holds: "hold:<id>" = deadline, Redis ms.
			args = append(args, fmt.Sprintf("hold:dead%05d", i), now.UnixMilli()-1000)
		}
		if err := rdb.HSet(ctx, name, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	bury()
	if err := long.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	bury()
	inner, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
	if err != nil {
		t.Fatalf("another hold of the owner: %v", err)
	}
	if inner.Holds() != 2 {
		t.Errorf("Holds %d, want 2", inner.Holds())
	}
	bury()
	if _, err := c.ObtainReentrant(ctx, key, "other", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another owner: %v, want ErrNotObtained", err)
	}
	bury()
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("Release of the inner hold: %v", err)
	}
	if owner, holds := reentrantState(t, rdb, c, key); owner != "job" || holds != 1 {
		t.Fatalf("after the inner Release: owner %q with %d hold fields, want job with 1", owner, holds)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
