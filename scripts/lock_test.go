package scripts

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// lockKeys are the names of one lock, built as package lock builds them.
type lockKeys struct{ lock, fence, queue string }

func newLockKeys(t *testing.T) lockKeys {
	base := hashtag.Base("stampede-test:lock:", redistest.Key(t, "l{o}ck%25"))
	return lockKeys{base, base + ":fence", base + ":q"}
}

// lockFence runs lock_fence.lua for token and returns its reply.
func lockFence(t *testing.T, rdb redis.UniversalClient, k lockKeys, token string) int64 {
	t.Helper()
	f, err := LockFence().Run(context.Background(), rdb, []string{k.lock, k.fence}, token, retention).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLockFenceToken: a token lock's holder gets rising numbers, floored by
// the Redis clock once the counter is lost; anyone else gets 0 and mints
// nothing.
func TestLockFenceToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		if f := lockFence(t, rdb, k, "tok"); f != 0 {
			t.Fatalf("free lock: fence %d, want 0", f)
		}
		if n, _ := rdb.Exists(ctx, k.fence).Result(); n != 0 {
			t.Fatal("a refused mint created the counter")
		}
		if err := rdb.Set(ctx, k.lock, "tok", 0).Err(); err != nil {
			t.Fatal(err)
		}
		before := serverMicros(t, rdb)
		f1 := lockFence(t, rdb, k, "tok")
		if f1 < before {
			t.Fatalf("first fence %d below the Redis clock %d µs", f1, before)
		}
		if f := lockFence(t, rdb, k, "other"); f != 0 {
			t.Fatalf("not the holder: fence %d, want 0", f)
		}
		f2 := lockFence(t, rdb, k, "tok")
		if f2 <= f1 {
			t.Fatalf("second fence %d after %d", f2, f1)
		}
		wantTTL(t, rdb, k.fence, retention)
		if err := rdb.Del(ctx, k.fence).Err(); err != nil {
			t.Fatal(err)
		}
		if f3 := lockFence(t, rdb, k, "tok"); f3 <= f2 {
			t.Fatalf("fence after losing the counter %d, previous %d", f3, f2)
		}
	})
}

// TestLockFenceReentrant: the holds of one owner share one number, kept in
// the hash under "", minted once.
func TestLockFenceReentrant(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		if err := rdb.HSet(ctx, k.lock, "job", 2).Err(); err != nil {
			t.Fatal(err)
		}
		f1 := lockFence(t, rdb, k, "job")
		if f1 <= 0 {
			t.Fatalf("owner's fence %d", f1)
		}
		if f := lockFence(t, rdb, k, "job"); f != f1 {
			t.Fatalf("owner's second ask: %d, want %d", f, f1)
		}
		if f := lockFence(t, rdb, k, "other"); f != 0 {
			t.Fatalf("other owner: fence %d, want 0", f)
		}
		if v, err := rdb.Get(ctx, k.fence).Int64(); err != nil || v != f1 {
			t.Fatalf("counter %d (%v), want %d: minted more than once", v, err, f1)
		}
		// A re-acquire reports the number with the new hold count.
		v, err := LockAcquire().Run(ctx, rdb, []string{k.lock, k.queue}, "job", 60000, "r", 0, "ch").Int64Slice()
		if err != nil || len(v) != 3 || v[0] != 1 || v[1] != f1 || v[2] != 3 {
			t.Fatalf("re-acquire: %v (%v), want [1 %d 3]", v, err, f1)
		}
	})
}

// TestOneCounterBothPackages: the lock and guard scripts mint from a shared
// counter with the same rule, so numbers from either keep rising.
func TestOneCounterBothPackages(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGuardKeys(t)
		k := lockKeys{lock: g.entry + ":lock", fence: g.fence}
		if err := rdb.Set(context.Background(), k.lock, "tok", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var prev int64
		for i := range 6 {
			var f int64
			if i%2 == 0 {
				f = lockFence(t, rdb, k, "tok")
			} else {
				f = guardInvalidate(t, rdb, g, "")
			}
			if f <= prev {
				t.Fatalf("mint %d: %d after %d", i, f, prev)
			}
			prev = f
		}
	})
}
