package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInvalidateTag: InvalidateTag on one node drops every key of the tag
// that any node filled, and no other key.
func TestInvalidateTag(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		base := redistest.Key(t)
		tag := strings.ReplaceAll(base, "{", "(")
		tagged := []string{"{" + tag + "}:a", "{" + tag + "}:b", "x{" + tag + "}y"}
		others := []string{"{" + tag + "-other}:a", tag + ":untagged"}
		a, b := newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})
		var loads atomic.Int64
		load := func(v string) LoadFunc {
			return func(context.Context) ([]byte, error) { loads.Add(1); return []byte(v), nil }
		}
		for _, k := range append(tagged, others...) {
			if _, err := a.Do(ctxT(t), k, load(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.InvalidateTag(ctxT(t), tag); err != nil {
			t.Fatal(err)
		}
		for _, k := range tagged {
			res, err := a.Do(ctxT(t), k, load(k+" again"))
			if err != nil || res.Status != Miss || string(res.Value) != k+" again" {
				t.Errorf("%s after InvalidateTag: %v %q %v, want a miss", k, res.Status, res.Value, err)
			}
		}
		for _, k := range others {
			res, err := a.Do(ctxT(t), k, nil2Loader(t))
			if err != nil || res.Status != Hit {
				t.Errorf("%s (not of the tag) after InvalidateTag: %v %v, want a hit", k, res.Status, err)
			}
		}
		if err := b.InvalidateTag(ctxT(t), "a}b"); err == nil {
			t.Error("a tag holding '}' accepted")
		}
	})
}

// TestInvalidateTagFencesLoadsInFlight: a load of a key of the tag that
// took its lease before InvalidateTag stores nothing, even for a key never
// stored before (so not a member of the tag yet).
func TestInvalidateTagFencesLoadsInFlight(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		tag := strings.ReplaceAll(redistest.Key(t), "{", "(")
		key := "{" + tag + "}:new"
		var rejected atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.Add(1) }}})
		other := newGroup(t, rdb, Options{})
		res, err := g.Do(ctxT(t), key, func(ctx context.Context) ([]byte, error) {
			if err := other.InvalidateTag(ctx, tag); err != nil {
				return nil, err
			}
			return []byte("loaded before the invalidation"), nil
		})
		if err != nil || string(res.Value) != "loaded before the invalidation" {
			t.Fatalf("%v %q", err, res.Value)
		}
		if rejected.Load() != 1 {
			t.Errorf("FillRejected %d times, want 1", rejected.Load())
		}
		if n, err := rdb.Exists(ctxT(t), g.names(key).entry).Result(); err != nil || n != 0 {
			t.Errorf("stored after the invalidation (exists %d, %v)", n, err)
		}
	})
}

// TestInvalidateTagForeignState: whatever another writer left under a tag's
// own names (a value of another type, garbage, members of the member set
// that are not entries of the tag's keys) is dropped and reported, and the
// tag still works: a fill is stored, InvalidateTag drops it. A member that
// names a key outside the Group's names for the tag (a user's key, a key of
// another slot) is never touched, whatever the set says.
func TestInvalidateTagForeignState(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		tag := strings.ReplaceAll(redistest.Key(t), "{", "(")
		var corrupt atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{Corrupt: func(string, error) { corrupt.Add(1) }}})
		members, inv := g.tagNames(tag)
		victim, elsewhere := "{"+tag+"}victim", "elsewhere:"+tag
		ctx := ctxT(t)
		for i, c := range []struct {
			name   string
			poison func() error
		}{
			{"members: a hash", func() error { return rdb.HSet(ctx, members, "f", "v").Err() }},
			{"members: a string", func() error { return rdb.Set(ctx, members, "x", 0).Err() }},
			{"members: a user's key", func() error { return rdb.SAdd(ctx, members, victim).Err() }},
			{"members: a key of another slot", func() error { return rdb.SAdd(ctx, members, elsewhere).Err() }},
			{"members: garbage", func() error { return rdb.SAdd(ctx, members, "", "\x00\xff", members).Err() }},
			{"invalidation: garbage", func() error { return rdb.Set(ctx, inv, "not a time", 0).Err() }},
			{"invalidation: in the future", func() error { return rdb.Set(ctx, inv, "99999999999999999", 0).Err() }},
			{"invalidation: a list", func() error { return rdb.RPush(ctx, inv, "x").Err() }},
			{"invalidation: never expires", func() error { return rdb.Set(ctx, inv, "9000000000000000", 0).Err() }},
		} {
			key := "{" + tag + "}:k" + strconv.Itoa(i)
			t.Run(c.name, func(t *testing.T) {
				for _, k := range []string{victim, elsewhere} {
					if err := rdb.Set(ctx, k, "user data", 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if err := rdb.Del(ctx, members, inv).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.poison(); err != nil {
					t.Fatal(err)
				}
				before := corrupt.Load()
				for round := range 2 {
					v := []byte(c.name + strconv.Itoa(round))
					if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return v, nil }); err != nil {
						t.Fatalf("round %d: fill: %v", round, err)
					}
					if res, err := g.Do(ctx, key, nil2Loader(t)); err != nil || res.Status != Hit || string(res.Value) != string(v) {
						t.Fatalf("round %d: after the fill: %v %q %v, want a hit", round, res.Status, res.Value, err)
					}
					if round == 0 {
						// Poison the set again between the fill and the
						// invalidation (the fill dropped a value of the
						// wrong type); a string in its place loses the
						// set, TestInvalidateTagMembersLost's case.
						if err := c.poison(); err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
							t.Fatal(err)
						}
					}
					if err := g.InvalidateTag(ctx, tag); err != nil {
						t.Fatalf("round %d: InvalidateTag: %v", round, err)
					}
					if res, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("again"), nil }); err != nil || res.Status != Miss {
						t.Fatalf("round %d: after InvalidateTag: %v %v, want a miss", round, res.Status, err)
					}
					if err := g.Invalidate(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range []string{victim, elsewhere} {
					if s, err := rdb.Get(ctx, k).Result(); err != nil || s != "user data" {
						t.Errorf("%s, named by a foreign member, is now %q (%v)", k, s, err)
					}
				}
				if corrupt.Load() == before && !strings.HasPrefix(c.name, "invalidation: in the future") {
					t.Error("the foreign state was not reported")
				}
			})
		}
	})
}

// TestInvalidateTagMembersLost: InvalidateTag drops every key of the tag
// filled before it even when the tag's member set, which names them, was
// lost in between (evicted under a maxmemory policy, expired, overwritten
// or deleted by another writer): no node serves such a value again, from
// Redis by the read script or the fast path's GET, from a batch, from
// Peek, or from its in-process tier. Standalone and cluster.
func TestInvalidateTagMembersLost(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Cleanup(noLeaks(t)) // after the Groups' Close
		ctx := ctxT(t)
		ns := redistest.Key(t) + ":"
		for i, c := range []struct {
			name string
			lose func(members string) error
		}{
			{"deleted (evicted, expired)", func(m string) error { return rdb.Del(ctx, m).Err() }},
			{"overwritten by a string", func(m string) error { return rdb.Set(ctx, m, "x", 0).Err() }},
			{"emptied of its members", func(m string) error {
				ms, err := rdb.SMembers(ctx, m).Result()
				if err != nil || len(ms) == 0 {
					return fmt.Errorf("members %v: %v", ms, err)
				}
				return rdb.SRem(ctx, m, ms[0]).Err()
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				tag := "t" + strconv.Itoa(i)
				keys := []string{"{" + tag + "}:a", "{" + tag + "}:b", "x{" + tag + "}y"}
				o := Options{Namespace: ns, FreshFor: time.Hour}
				a := newGroup(t, rdb, o)    // fills, then invalidates
				fast := newGroup(t, rdb, o) // serves its hits by GET (hinted)
				batch := newGroup(t, rdb, o)
				ol := o
				ol.LocalEntries, ol.LocalTTL = 100, time.Hour
				tier := newLocalNode(t, otherClient(t, rdb), ol)
				waitLocal(t, tier)

				old := func(k string) LoadFunc {
					return func(context.Context) ([]byte, error) { return []byte("old " + k), nil }
				}
				for _, k := range keys {
					if _, err := a.Do(ctx, k, old(k)); err != nil {
						t.Fatal(err)
					}
					for range 2 { // the first read hints it, the second is served so
						if res, err := fast.Do(ctx, k, nil2Loader(t)); err != nil || string(res.Value) != "old "+k {
							t.Fatalf("%s before: %q %v", k, res.Value, err)
						}
					}
					// The tier keeps a copy only when no report for the key
					// crossed its read (the other Groups' hints may): read
					// until it serves one from memory.
					before := tier.local.Load()
					redistest.Eventually(t, 10*time.Second, k+" held by the tier", func() bool {
						if res, err := tier.Do(ctx, k, nil2Loader(t)); err != nil || string(res.Value) != "old "+k {
							t.Fatalf("%s before: %q %v", k, res.Value, err)
						}
						return tier.local.Load() > before
					})
				}
				if _, err := batch.GetMany(ctx, keys, func(context.Context, []string) (map[string][]byte, error) {
					return nil, errors.New("loader must not run")
				}); err != nil {
					t.Fatal(err)
				}
				if n := tier.local.Load(); n < int64(len(keys)) {
					t.Fatalf("the tier served %d hits, want one per key at least", n)
				}
				members, _ := a.tagNames(tag)
				if err := c.lose(members); err != nil {
					t.Fatal(err)
				}
				if err := a.InvalidateTag(ctx, tag); err != nil {
					t.Fatal(err)
				}

				served := func(g *Group, k string) string {
					res, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("new " + k), nil })
					if err != nil {
						t.Fatalf("%s: %v", k, err)
					}
					return string(res.Value)
				}
				for _, k := range keys {
					if v := served(fast, k); v != "new "+k {
						t.Errorf("%s after InvalidateTag, fast path: %q, want the new value", k, v)
					}
				}
				for _, k := range keys {
					if err := a.Invalidate(ctx, k); err != nil {
						t.Fatal(err)
					}
					if _, err := a.Do(ctx, k, old(k)); err != nil {
						t.Fatal(err)
					}
				}
				// Lose the set again, and invalidate again: the batch, Peek
				// and the in-process tier each meet the old values first.
				for _, k := range keys {
					// A's writes are reported to the tier as they land:
					// read until a copy is served.
					redistest.Eventually(t, 5*time.Second, "a copy of "+k+" in the tier", func() bool {
						before := tier.local.Load()
						if res, err := tier.Do(ctx, k, nil2Loader(t)); err != nil || string(res.Value) != "old "+k {
							t.Fatalf("%s refilled: %q %v", k, res.Value, err)
						}
						return tier.local.Load() > before
					})
				}
				if err := c.lose(members); err != nil {
					t.Fatal(err)
				}
				if err := a.InvalidateTag(ctx, tag); err != nil {
					t.Fatal(err)
				}
				redistest.Eventually(t, 5*time.Second, "the tier's copies dropped", func() bool {
					for _, k := range keys {
						if _, _, held := tier.loc.Get(k); held {
							return false
						}
					}
					return true
				})
				for _, k := range keys {
					if v := served(tier.Group, k); v != "new "+k {
						t.Errorf("%s after InvalidateTag, in-process tier: %q, want the new value", k, v)
					}
				}
				for _, k := range keys {
					if err := a.Invalidate(ctx, k); err != nil {
						t.Fatal(err)
					}
					if _, err := a.Do(ctx, k, old(k)); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.lose(members); err != nil {
					t.Fatal(err)
				}
				if err := a.InvalidateTag(ctx, tag); err != nil {
					t.Fatal(err)
				}
				if res, err := a.Peek(ctx, keys[0]); !errors.Is(err, ErrNotCached) {
					t.Errorf("Peek after InvalidateTag: %q %v, want ErrNotCached", res.Value, err)
				}
				got, err := batch.GetMany(ctx, keys, func(_ context.Context, ks []string) (map[string][]byte, error) {
					m := map[string][]byte{}
					for _, k := range ks {
						m[k] = []byte("new " + k)
					}
					return m, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if string(got[k]) != "new "+k {
						t.Errorf("%s after InvalidateTag, batch: %q, want the new value", k, got[k])
					}
				}
			})
		}
	})
}
