package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Foreign data under one key's names is that key's problem alone (DESIGN
// guarantee 11): reported, answered for that key, healed by its next fill,
// and never a reason for the breaker to open for the Group.

// TestForeignDataStaysWithItsKey: foreign strings under the names of one
// key (a fence counter that is not an integer or cannot be incremented, an
// invalidation marker that is not a fence, a waiters name holding a
// string) are dropped, reported to Corrupt, and answered for that key
// alone: the breaker never opens, another key keeps its Miss then Hit, and
// the poisoned key heals with its next fill. Before the fix, INCR on a
// non-integer failed every read of the key with ERR, the breaker counted
// it, and every other key was served Degraded.
func TestForeignDataStaysWithItsKey(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, c := range []struct {
		name  string
		field int // index in names.keys
		value string
		ttl   time.Duration
	}{
		{"fence/not a number", 2, "garbage", 0},
		{"fence/empty", 2, "", 0},
		{"fence/negative", 2, "-5", time.Hour},
		{"fence/float", 2, "1.5", 0},
		{"fence/leading zeros", 2, "007", 0},
		{"fence/max int64", 2, "9223372036854775807", 0},
		{"fence/beyond exact floats", 2, "9007199254740993", 0},
		{"inv/long garbage", 4, "not-a-fence-at-all-xyz", 0},
		{"inv/digits beyond the counter", 4, "99999999999999999", time.Hour},
		{"inv/binary", 4, "\x00\xff\xfe\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e", 0},
		{"lease/garbage with TTL", 1, "zzzz", time.Hour},
		{"lease/negative with TTL", 1, "-1", time.Hour},
		{"waiters/string", 3, "channel", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var corrupt, opened, degraded atomic.Int64
			g := newGroup(t, rdb, Options{
				WaitTimeout: time.Minute, WaitTimeoutPolicy: ReturnError,
				Hooks: Hooks{
					Corrupt: func(string, error) { corrupt.Add(1) },
					Breaker: func(open bool) {
						if open {
							opened.Add(1)
						}
					},
				},
			})
			key := redistest.Key(t)
			nm := g.names(key)
			t.Cleanup(func() { rdb.Del(context.Background(), nm.keys...) })
			if err := rdb.Set(ctxT(t), nm.keys[c.field], c.value, c.ttl).Err(); err != nil {
				t.Fatal(err)
			}
			load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
			for i := range 5 {
				r, err := g.Do(ctxT(t), key, load)
				if err != nil || string(r.Value) != "v" {
					t.Fatalf("call %d: %v %q %v; want the value", i, r.Status, r.Value, err)
				}
				if r.Status == Degraded {
					degraded.Add(1)
				}
			}
			if n := opened.Load(); n != 0 {
				t.Fatalf("the breaker opened %d times over one poisoned key", n)
			}
			if corrupt.Load() == 0 {
				t.Fatal("the foreign value was never reported to Corrupt")
			}
			if n := degraded.Load(); n > 1 {
				t.Fatalf("%d of 5 calls were Degraded; the key did not heal at its first fill", n)
			}
			if r, err := g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit {
				t.Fatalf("after the fills: %v %v; want a Hit (the key healed)", r.Status, err)
			}
			other := redistest.Key(t, "other")
			t.Cleanup(func() { rdb.Del(context.Background(), g.names(other).keys...) })
			for _, want := range []Status{Miss, Hit} {
				if r, err := g.Do(ctxT(t), other, load); err != nil || r.Status != want {
					t.Fatalf("another key: %v %v; want %v", r.Status, err, want)
				}
			}
		})
	}
}

// TestForeignInvalidationMarkerHeals: a string under a key's invalidation
// name that is not a fence (no TTL, so it would never expire) is dropped
// and reported, and the key is stored again at its next fill. Before the
// fix it rejected every fill of the key forever, unreported.
func TestForeignInvalidationMarkerHeals(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var corrupt, rejected atomic.Int64
	g := newGroup(t, rdb, Options{Hooks: Hooks{
		Corrupt:      func(string, error) { corrupt.Add(1) },
		FillRejected: func(string) { rejected.Add(1) },
	}})
	key := redistest.Key(t)
	nm := g.names(key)
	if err := rdb.Set(ctxT(t), nm.keys[4], "zzzzzzzzzzzzzzzzzzzzzzzz", 0).Err(); err != nil {
		t.Fatal(err)
	}
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	if r, err := g.Do(ctxT(t), key, load); err != nil || r.Status != Miss {
		t.Fatalf("first call: %v %v; want a Miss", r.Status, err)
	}
	if corrupt.Load() == 0 {
		t.Fatal("the foreign invalidation marker was not reported")
	}
	redistest.Eventually(t, 5*time.Second, "the key stored again", func() bool {
		r, err := g.Do(ctxT(t), key, load)
		return err == nil && r.Status == Hit
	})
	if n := rejected.Load(); n > 1 {
		t.Fatalf("%d fills rejected; want at most one before the key healed", n)
	}
}

// TestForeignEntryWithoutTTL: a value another writer SETs under a warm
// key's entry name, well formed but without the TTL every entry of the
// guard's has (a hand-made "fix" in redis-cli), is never served, by the
// fast path's GET or the in-process tier: the script reads it, drops it,
// reports it to Corrupt and loads the key.
func TestForeignEntryWithoutTTL(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for _, local := range []int{Disabled, 1000} {
		t.Run(fmt.Sprint("LocalEntries=", local), func(t *testing.T) {
			var corrupt atomic.Int64
			g := newGroup(t, rdb, Options{LocalEntries: local, Hooks: Hooks{Corrupt: func(string, error) { corrupt.Add(1) }}})
			if local > 0 {
				waitTier(t, g)
			}
			key := redistest.Key(t)
			load := func(context.Context) ([]byte, error) { return []byte("real"), nil }
			for range 5 { // warm: hinted, and kept by the tier
				if _, err := g.Do(ctxT(t), key, load); err != nil {
					t.Fatal(err)
				}
			}
			forged := entry.Encode(entry.Entry{FreshUntil: 99_999_999_999_999, StaleUntil: 99_999_999_999_999, Written: 1, Fence: 1 << 40, Value: []byte("FORGED")})
			if err := rdb.Set(ctxT(t), g.names(key).entry, forged, 0).Err(); err != nil {
				t.Fatal(err)
			}
			redistest.Eventually(t, 10*time.Second, "the foreign entry reported", func() bool {
				r, err := g.Do(ctxT(t), key, load)
				if err != nil || string(r.Value) == "FORGED" {
					t.Fatalf("%q (%v), %v: the foreign entry served", r.Value, r.Status, err)
				}
				return corrupt.Load() > 0
			})
		})
	}
}
