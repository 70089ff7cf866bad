package scripts

import (
	"context"
	"fmt"
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

// acquireHold runs lock_acquire.lua for one hold of owner, without waiting,
// and returns its reply.
func acquireHold(t *testing.T, rdb redis.UniversalClient, k lockKeys, hold, owner string, ttlMs int64) []int64 {
	t.Helper()
	v, err := LockAcquire().Run(context.Background(), rdb, []string{k.lock, k.queue}, hold, ttlMs, "r", 0, "ch", "", owner).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lockCall runs one of the lock scripts that answer with a number.
func lockCall(t *testing.T, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) int64 {
	t.Helper()
	n, err := s.Run(context.Background(), rdb, keys, args...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// endHold moves a hold's deadline into the past, as time would.
func endHold(t *testing.T, rdb redis.UniversalClient, k lockKeys, hold string) {
	t.Helper()
	past := serverMicros(t, rdb)/1000 - 1
	if err := rdb.HSet(context.Background(), k.lock, "hold:"+hold, past).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestLockFenceReentrant: the holds of one owner share one number, kept in
// the hash under "", minted once; a hold that ended mints nothing.
func TestLockFenceReentrant(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		if v := acquireHold(t, rdb, k, "h1", "job", 60000); v[0] != 1 || v[2] != 1 {
			t.Fatalf("first hold: %v", v)
		}
		if v := acquireHold(t, rdb, k, "h2", "job", 60000); v[0] != 1 || v[1] != 0 || v[2] != 2 {
			t.Fatalf("second hold: %v", v)
		}
		f1 := lockFence(t, rdb, k, "h1")
		if f1 <= 0 {
			t.Fatalf("owner's fence %d", f1)
		}
		if f := lockFence(t, rdb, k, "h2"); f != f1 {
			t.Fatalf("owner's other hold: %d, want %d", f, f1)
		}
		for _, id := range []string{"job", "other", "h3"} {
			if f := lockFence(t, rdb, k, id); f != 0 {
				t.Fatalf("not a hold (%q): fence %d, want 0", id, f)
			}
		}
		if v, err := rdb.Get(ctx, k.fence).Int64(); err != nil || v != f1 {
			t.Fatalf("counter %d (%v), want %d: minted more than once", v, err, f1)
		}
		// A re-acquire reports the number with the new hold count.
		if v := acquireHold(t, rdb, k, "h3", "job", 60000); v[0] != 1 || v[1] != f1 || v[2] != 3 {
			t.Fatalf("re-acquire: %v, want [1 %d 3]", v, f1)
		}
		endHold(t, rdb, k, "h3")
		if f := lockFence(t, rdb, k, "h3"); f != 0 {
			t.Fatalf("ended hold: fence %d, want 0", f)
		}
	})
}

// TestLockReentrantHolds: each hold of a reentrant lock has its own
// deadline; the key expires at the latest live one; a hold whose deadline
// has come is refused by release, refresh and ttl (changing nothing) and
// keeps no other owner out; the lock passes on when the last hold ends,
// without the old owner's fence.
func TestLockReentrantHolds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		release := func(hold string) int64 {
			return lockCall(t, rdb, LockRelease(), []string{k.lock, k.queue}, hold, "r", 250, "1")
		}
		refresh := func(hold string, ms int64) int64 {
			return lockCall(t, rdb, LockRefresh(), []string{k.lock, k.fence}, hold, ms, retention)
		}
		ttl := func(hold string) int64 { return lockCall(t, rdb, LockTTL(), []string{k.lock}, hold) }

		acquireHold(t, rdb, k, "long", "job", 60000)
		acquireHold(t, rdb, k, "short", "job", 2000)
		wantTTL(t, rdb, k.lock, 60000) // the latest hold's, not the last one's
		if got := ttl("short"); got > 2000 || got < 1000 {
			t.Fatalf("short hold's ttl %d, want its own 2000ms", got)
		}
		// A shorter lease for the long hold cuts the key to the latest
		// live deadline; a longer one for the short hold extends it.
		if refresh("long", 1500) != 1 {
			t.Fatal("refresh of a live hold refused")
		}
		wantTTL(t, rdb, k.lock, 2000)
		if refresh("short", 30000) != 1 {
			t.Fatal("refresh of a live hold refused")
		}
		wantTTL(t, rdb, k.lock, 30000)
		if v := acquireHold(t, rdb, k, "intruder", "other", 60000); v[0] != 0 || v[1] <= 0 {
			t.Fatalf("other owner while holds live: %v, want busy with the latest lease", v)
		}

		// The short hold (now the latest) ends: the long one keeps the
		// lock; the ended one can do nothing.
		endHold(t, rdb, k, "short")
		before, err := rdb.HGetAll(ctx, k.lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := release("short"); got != -1 {
			t.Fatalf("release of an ended hold: %d, want -1", got)
		}
		if got := refresh("short", 60000); got != 0 {
			t.Fatalf("refresh of an ended hold: %d, want 0", got)
		}
		if got := ttl("short"); got != -3 {
			t.Fatalf("ttl of an ended hold: %d, want -3", got)
		}
		if after, err := rdb.HGetAll(ctx, k.lock).Result(); err != nil || len(after) != len(before) || after["hold:long"] != before["hold:long"] {
			t.Fatalf("calls of an ended hold changed the lock: %v, was %v (%v)", after, before, err)
		}
		if v := acquireHold(t, rdb, k, "intruder", "other", 60000); v[0] != 0 {
			t.Fatalf("other owner while the long hold lives: %v, want busy", v)
		}
		// A retried acquire (same hold id) is still one hold.
		if v := acquireHold(t, rdb, k, "again", "job", 60000); v[0] != 1 || v[2] != 2 {
			t.Fatalf("re-acquire: %v, want [1 _ 2]", v)
		}
		if v := acquireHold(t, rdb, k, "again", "job", 60000); v[0] != 1 || v[2] != 2 {
			t.Fatalf("retried re-acquire: %v, want [1 _ 2]", v)
		}
		if got := release("again"); got != 1 {
			t.Fatalf("release with one live hold left: %d, want 1", got)
		}
		if got := release("again"); got != -1 {
			t.Fatalf("second release of one hold: %d, want -1", got)
		}
		fence := lockFence(t, rdb, k, "long")

		// Every hold ended: the next owner gets the lock, fresh.
		endHold(t, rdb, k, "long")
		if v := acquireHold(t, rdb, k, "new", "other", 60000); v[0] != 1 || v[1] != 0 || v[2] != 1 {
			t.Fatalf("other owner after every hold ended: %v, want [1 0 1]", v)
		}
		got, err := rdb.HGetAll(ctx, k.lock).Result()
		if err != nil || len(got) != 2 || got["owner"] != "other" || got["hold:new"] == "" {
			t.Fatalf("lock after the hand-over: %v (%v), want the new owner's one hold", got, err)
		}
		if f := lockFence(t, rdb, k, "new"); f <= fence {
			t.Fatalf("new owner's fence %d, want above %d", f, fence)
		}
		if got := release("new"); got != 0 {
			t.Fatalf("release of the last hold: %d, want 0", got)
		}
		if exists(t, rdb, k.lock) {
			t.Fatal("lock still there after its last hold was released")
		}
	})
}

// TestLockReentrantForeignHash: a hash the acquire script did not write (no
// owner field, as a stale layout or another tool's) is held by someone else:
// never pruned or taken.
func TestLockReentrantForeignHash(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		if err := rdb.HSet(ctx, k.lock, "job", 2).Err(); err != nil {
			t.Fatal(err)
		}
		if v := acquireHold(t, rdb, k, "h", "job", 60000); v[0] != 0 {
			t.Fatalf("acquire on a foreign hash: %v, want busy", v)
		}
		if got, err := rdb.HGetAll(ctx, k.lock).Result(); err != nil || len(got) != 1 || got["job"] != "2" {
			t.Fatalf("foreign hash changed: %v (%v)", got, err)
		}
	})
}

// TestLockForeignHashHoldFieldsKept: a foreign hash (no owner field) whose
// fields look like holds, with values that are not future deadlines, is
// neither pruned nor taken: not by an acquire that waits or not, nor by
// the next one once the first refused (pruning its last field would have
// deleted the key and freed the lock).
func TestLockForeignHashHoldFieldsKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		foreign := map[string]string{"hold:job-1": "done", "hold:job-2": "1"}
		if err := rdb.HSet(ctx, k.lock, foreign).Err(); err != nil {
			t.Fatal(err)
		}
		for i, wait := range []int64{0, 0, 50, 50} {
			v, err := LockAcquire().Run(ctx, rdb, []string{k.lock, k.queue}, "h", 60000, "r", wait, "ch", "w", "job").Int64Slice()
			if err != nil || len(v) != 3 || v[0] != 0 {
				t.Fatalf("acquire %d (wait %d) on a foreign hash: %v (%v), want busy", i+1, wait, v, err)
			}
			got, err := rdb.HGetAll(ctx, k.lock).Result()
			if err != nil || len(got) != len(foreign) || got["hold:job-1"] != "done" || got["hold:job-2"] != "1" {
				t.Fatalf("acquire %d (wait %d) changed the foreign hash: %v (%v), want %v", i+1, wait, got, err, foreign)
			}
		}
	})
}

// TestLockTokenRetriedAcquire: a token lock's acquire that the client
// retries after a lost reply finds its own grant.
func TestLockTokenRetriedAcquire(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newLockKeys(t)
		for i := range 2 {
			v, err := LockAcquire().Run(context.Background(), rdb, []string{k.lock, k.queue}, "tok", 60000, "t", 0, "ch", "").Int64Slice()
			if err != nil || len(v) != 3 || v[0] != 1 {
				t.Fatalf("run %d: %v (%v), want obtained", i+1, v, err)
			}
		}
		v, err := LockAcquire().Run(context.Background(), rdb, []string{k.lock, k.queue}, "other", 60000, "t", 0, "ch", "").Int64Slice()
		if err != nil || len(v) != 3 || v[0] != 0 {
			t.Fatalf("another token: %v (%v), want busy", v, err)
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

// TestLockManyDeadHolds: an owner may leave more holds to end on their own
// than Lua's unpack takes at once (about 8,000). Each script that prunes
// them (refresh, an acquire of the owner or of another, a release) works,
// and deletes them all.
func TestLockManyDeadHolds(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		if v := acquireHold(t, rdb, k, "long", "job", 60000); v[0] != 1 {
			t.Fatalf("first hold: %v", v)
		}
		if v := acquireHold(t, rdb, k, "other", "job", 60000); v[0] != 1 {
			t.Fatalf("second hold: %v", v)
		}
		const dead = 20000
		bury := func() {
			t.Helper()
			past := serverMicros(t, rdb)/1000 - 1000
			args := make([]any, 0, 2*dead)
			for i := range dead {
				args = append(args, fmt.Sprintf("hold:dead%05d", i), past)
			}
			if err := rdb.HSet(ctx, k.lock, args...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		pruned := func(what string, want int64) {
			t.Helper()
			if n := rdb.HLen(ctx, k.lock).Val(); n != want {
				t.Fatalf("after %s: %d fields, want %d (dead holds left)", what, n, want)
			}
		}
		keys := []string{k.lock, k.fence}
		bury()
		if r := lockCall(t, rdb, LockRefresh(), keys, "long", 60000, retention); r != 1 {
			t.Fatalf("refresh: %d, want 1", r)
		}
		pruned("refresh", 3) // owner, hold:long, hold:other
		bury()
		if v := acquireHold(t, rdb, k, "next", "job", 60000); v[0] != 1 || v[2] != 3 {
			t.Fatalf("acquire of the owner: %v, want obtained with 3 holds", v)
		}
		pruned("an acquire of the owner", 4)
		bury()
		if v := acquireHold(t, rdb, k, "h", "someone", 60000); v[0] != 0 {
			t.Fatalf("acquire of another owner: %v, want busy", v)
		}
		pruned("an acquire of another owner", 4)
		bury()
		rel := []string{k.lock, k.queue}
		if r := lockCall(t, rdb, LockRelease(), rel, "next", "r", 250, "1"); r != 2 {
			t.Fatalf("release: %d, want 2 holds left", r)
		}
		pruned("a release", 3)
	})
}

// TestLockFenceRaise: with a number to raise to (the one a Redlock owner
// reports), lock_fence.lua raises the owner's stored number and the fence
// counter to it, never lowers them, mints nothing, and changes nothing for
// a hold that is not live.
func TestLockFenceRaise(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newLockKeys(t)
		keys := []string{k.lock, k.fence}
		if v := acquireHold(t, rdb, k, "h1", "job", 60000); v[0] != 1 {
			t.Fatalf("hold: %v", v)
		}
		// Before any number: the raise stores it.
		f0 := serverMicros(t, rdb) + 1000000
		if f := lockCall(t, rdb, LockFence(), keys, "h1", retention, f0); f != f0 {
			t.Fatalf("raise with no number: %d, want %d", f, f0)
		}
		if f := lockFence(t, rdb, k, "h1"); f != f0 {
			t.Fatalf("owner's number after the raise: %d, want %d", f, f0)
		}
		if v, err := rdb.Get(ctx, k.fence).Int64(); err != nil || v != f0 {
			t.Fatalf("counter %d (%v), want %d", v, err, f0)
		}
		wantTTL(t, rdb, k.fence, retention)
		// Higher: raised; lower: kept.
		if f := lockCall(t, rdb, LockFence(), keys, "h1", retention, f0+5); f != f0+5 {
			t.Fatalf("raise to %d: %d", f0+5, f)
		}
		if f := lockCall(t, rdb, LockFence(), keys, "h1", retention, f0-5); f != f0+5 {
			t.Fatalf("raise to a lower %d: %d, want %d kept", f0-5, f, f0+5)
		}
		if v, err := rdb.Get(ctx, k.fence).Int64(); err != nil || v != f0+5 {
			t.Fatalf("counter %d (%v), want %d", v, err, f0+5)
		}
		// Not a live hold: nothing changes.
		endHold(t, rdb, k, "h2")
		for _, id := range []string{"h2", "other"} {
			if f := lockCall(t, rdb, LockFence(), keys, id, retention, f0+100); f != 0 {
				t.Fatalf("raise by %q: %d, want 0", id, f)
			}
		}
		if f := lockFence(t, rdb, k, "h1"); f != f0+5 {
			t.Fatalf("owner's number %d, want %d", f, f0+5)
		}
		// The next mint after the owner's lock ends is above the raised
		// counter.
		if err := rdb.Del(ctx, k.lock).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, k.lock, "tok", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if f := lockFence(t, rdb, k, "tok"); f <= f0+5 {
			t.Fatalf("next holder's fence %d, not above the raised %d", f, f0+5)
		}
	})
}
