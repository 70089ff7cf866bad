package lock

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// FuzzKeyOwner drives lock names and reentrant owners of arbitrary bytes
// through Clients on a real Redis (standalone and the 3-master cluster): a
// token lock is exclusive and released; a reentrant owner takes two holds
// with one fencing number, excludes other owners, and frees the lock after
// two releases; the lock, fence counter and wait queue of a key share one
// cluster slot; invalid keys and owners get their documented error and
// store nothing. Each input costs about 20 Redis commands and deletes every
// name it used.
//
// The wake channel is per Client, not per key (classic Pub/Sub, which Redis
// Cluster delivers on every node), so it has no slot to check; the queue
// members that carry it are exercised by the wait tests.
func FuzzKeyOwner(f *testing.F) {
	// The odd-byte seeds are files in testdata/fuzz/FuzzKeyOwner; the large
	// ones are built here rather than committed.
	if !fuzzing() {
		// CI (go test, which runs the seeds) checks the size limit. A fuzz
		// campaign leaves these seeds out: the engine minimizes each new
		// input for a minute (-fuzzminimizetime), one Redis round of this
		// target per try, and a mutant of a 64 KiB key stalls the whole
		// campaign there without learning about bytes.
		f.Add(strings.Repeat("k", MaxKeyBytes), "longest key")
		f.Add(strings.Repeat("}", MaxKeyBytes), "longest key, tripled by escaping")
		f.Add(strings.Repeat("k", MaxKeyBytes+1), "one byte too long")
		f.Add("long owner", strings.Repeat("\x00}{", 20000))
	}

	rdb := redistest.Shared(f).Client(f)
	crdb := redistest.SharedCluster(f).Client(f)
	// A Prefix unique to this run keeps fuzz locks apart from other tests'.
	opts := Options{Prefix: "fuzz:" + redistest.Key(f) + ":"}
	c := New(rdb, opts)
	f.Cleanup(func() { _ = c.Close() })
	cc := New(crdb, opts)
	f.Cleanup(func() { _ = cc.Close() })

	f.Fuzz(func(t *testing.T, key, owner string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nm := c.names(key)
		all := []string{nm.lock, nm.fence(), nm.queue}
		exists := func(rdb redis.UniversalClient) int64 {
			t.Helper()
			n, err := rdb.Exists(ctx, all...).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}

		if key == "" || len(key) > MaxKeyBytes {
			want := "lock: empty key"
			if key != "" {
				want = "exceeds MaxKeyBytes"
			}
			_, err1 := c.Obtain(ctx, key, time.Minute)
			_, err2 := c.ObtainReentrant(ctx, key, owner+"x", time.Minute)
			for _, err := range []error{err1, err2} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("key of %d bytes: got %v, want an error containing %q", len(key), err, want)
				}
			}
			if n := exists(rdb); n != 0 {
				t.Fatalf("key of %d bytes: a refused call stored %d names", len(key), n)
			}
			return
		}
		t.Cleanup(func() {
			rdb.Del(context.Background(), all...)
			crdb.Del(context.Background(), all...)
		})

		// Token lock: exclusive, readable, released, gone.
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("key %.40q: Obtain: %v", key, err)
		}
		if _, err := c.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("key %.40q: second Obtain: %v, want ErrNotObtained", key, err)
		}
		if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Fatalf("key %.40q: TTL %v, %v", key, ttl, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("key %.40q: Release: %v", key, err)
		}
		if n, err := rdb.Exists(ctx, nm.lock).Result(); err != nil || n != 0 {
			t.Fatalf("key %.40q: lock still there after Release (%v)", key, err)
		}

		// Reentrant lock with the fuzzed owner.
		if owner == "" {
			if _, err := c.ObtainReentrant(ctx, key, owner, time.Minute); err == nil || !strings.Contains(err.Error(), "lock: empty owner") {
				t.Fatalf("empty owner: got %v", err)
			}
			if n, err := rdb.Exists(ctx, nm.lock).Result(); err != nil || n != 0 {
				t.Fatalf("empty owner stored the lock (%v)", err)
			}
		} else {
			r1, err := c.ObtainReentrant(ctx, key, owner, time.Minute)
			if err != nil || r1.Holds() != 1 {
				t.Fatalf("key %.40q owner %.40q: first hold: %v", key, owner, err)
			}
			r2, err := c.ObtainReentrant(ctx, key, owner, time.Minute)
			if err != nil || r2.Holds() != 2 || r2.Fence() != r1.Fence() {
				t.Fatalf("key %.40q owner %.40q: second hold: %v (holds %d, fence %d after %d)", key, owner, err, holds(r2), fence(r2), r1.Fence())
			}
			if _, err := c.ObtainReentrant(ctx, key, owner+"\x00other", time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("key %.40q owner %.40q: another owner: %v, want ErrNotObtained", key, owner, err)
			}
			// The owner is stored byte for byte, with one field per hold.
			if got, n := reentrantState(t, rdb, c, key); got != owner || n != 2 {
				t.Fatalf("key %.40q owner %.40q: stored owner %.40q with %d holds; want 2", key, owner, got, n)
			}
			if err := r2.Release(ctx); err != nil {
				t.Fatalf("key %.40q owner %.40q: first release: %v", key, owner, err)
			}
			if ttl, err := r1.TTL(ctx); err != nil || ttl <= 0 {
				t.Fatalf("key %.40q owner %.40q: one hold left, TTL %v, %v", key, owner, ttl, err)
			}
			if err := r1.Release(ctx); err != nil {
				t.Fatalf("key %.40q owner %.40q: second release: %v", key, owner, err)
			}
			if n, err := rdb.Exists(ctx, nm.lock).Result(); err != nil || n != 0 {
				t.Fatalf("key %.40q owner %.40q: lock still there after both releases (%v)", key, owner, err)
			}
		}

		// Cluster: the names share a slot (asked of the server), and the
		// scripts, which declare them all and would fail with CROSSSLOT
		// otherwise, work.
		pipe := crdb.Pipeline()
		var slots []*redis.IntCmd
		for _, name := range all {
			slots = append(slots, pipe.ClusterKeySlot(ctx, name))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, s := range slots[1:] {
			if s.Val() != slots[0].Val() {
				t.Fatalf("key %.40q: %q in slot %d, lock in slot %d", key, all[i+1], s.Val(), slots[0].Val())
			}
		}
		cl, err := cc.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("key %.40q: cluster Obtain: %v", key, err)
		}
		if err := cl.Release(ctx); err != nil {
			t.Fatalf("key %.40q: cluster Release: %v", key, err)
		}
		if owner != "" {
			cr, err := cc.ObtainReentrant(ctx, key, owner, time.Minute)
			if err != nil {
				t.Fatalf("key %.40q owner %.40q: cluster ObtainReentrant: %v", key, owner, err)
			}
			if err := cr.Release(ctx); err != nil {
				t.Fatalf("key %.40q owner %.40q: cluster reentrant Release: %v", key, owner, err)
			}
		}
		if n, err := crdb.Exists(ctx, nm.lock).Result(); err != nil || n != 0 {
			t.Fatalf("key %.40q: cluster lock still there after Release (%v)", key, err)
		}
	})
}

// fuzzing reports whether this binary runs a fuzz campaign (-test.fuzz), in
// the coordinator or a worker, rather than the seed corpus.
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}

// holds and fence read a possibly nil Lock for failure messages.
func holds(l *Lock) int64 {
	if l == nil {
		return 0
	}
	return l.Holds()
}

func fence(l *Lock) int64 {
	if l == nil {
		return 0
	}
	return l.Fence()
}
