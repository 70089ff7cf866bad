package guard

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTier: with LocalEntries set, a repeated hit costs no round trip;
// Invalidate drops the local copy.
func TestLocalTier(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	hook := &cmdCounter{}
	rdb.AddHook(hook)
	g := newGroup(t, rdb, Options{LocalEntries: 16, LocalTTL: time.Minute})
	waitTier(t, g)
	key := redistest.Key(t)
	if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	// A read keeps the value (one sent before the report of the Group's
	// own fill arrived keeps nothing: it might be older).
	redistest.Eventually(t, 10*time.Second, "the value in the tier", func() bool {
		if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit {
			t.Fatalf("%v %v", r.Status, err)
		}
		return g.loc.len() == 1
	})
	before := hook.n.Load()
	for range 10 {
		if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit || string(r.Value) != "v" {
			t.Fatalf("%v %q %v", r.Status, r.Value, err)
		}
	}
	if n := hook.n.Load() - before; n != 0 {
		t.Fatalf("local hits sent %d commands, want 0", n)
	}
	if err := g.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("w"), nil }); err != nil || string(r.Value) != "w" {
		t.Fatalf("after Invalidate: %q %v", r.Value, err)
	}
}

// waitTier waits until g's in-process tier serves: its report connections
// are confirmed.
func waitTier(t *testing.T, g *Group) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the in-process tier on", func() bool {
		return g.loc != nil && g.loc.live.Load()
	})
}

// TestLocalTierIndexes: random keeps (of keys with and without a hash tag
// of their own, in a tier small enough to evict), drops, tag
// invalidations and flushes; after each, the tier's three indexes (by
// key, by entry name, by tag) and its LRU list hold the same items, its
// bytes add up, and a tag's invalidation leaves no copy of its keys.
func TestLocalTierIndexes(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	lt := newLocalTier(Options{Namespace: "ns:", LocalEntries: 8, LocalBytes: 8 * (localOverhead + 64), LocalTTL: time.Hour})
	lt.setLive(true)
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "{t1}a", "{t1}b", "x{t1}y", "{t2}a", "{t2}b", "{t3}", "c{t3}d", "{}", "%7D", "e"}
	check := func(op string) {
		t.Helper()
		n, bytes := 0, 0
		for it := lt.head.next; it != &lt.head; it = it.next {
			n++
			bytes += it.cost
			if lt.byKey[it.key] != it || lt.byName[it.name] != it {
				t.Fatalf("after %s: %q in the LRU list, not in the maps", op, it.key)
			}
		}
		if n != len(lt.byKey) || n != len(lt.byName) || bytes != lt.bytes {
			t.Fatalf("after %s: %d listed, %d by key, %d by name, %d bytes of %d", op, n, len(lt.byKey), len(lt.byName), lt.bytes, bytes)
		}
		tagged := 0
		for base, first := range lt.byTag {
			if first.tprev != nil {
				t.Fatalf("after %s: the first of %s has a predecessor", op, base)
			}
			for it := first; it != nil; it = it.tnext {
				if tagged++; tagged > n || it.tag != base || lt.byKey[it.key] != it {
					t.Fatalf("after %s: tag list of %s holds %q (tag %q)", op, base, it.key, it.tag)
				}
				if it.tnext != nil && it.tnext.tprev != it {
					t.Fatalf("after %s: tag list of %s broken at %q", op, base, it.key)
				}
			}
		}
		for _, it := range lt.byKey {
			if _, own := hashtag.Tag(it.key); own != (it.tag != "") {
				t.Fatalf("after %s: %q has tag %q", op, it.key, it.tag)
			}
			if it.tag != "" {
				tagged--
			}
		}
		if tagged != 0 {
			t.Fatalf("after %s: the tag lists and the items disagree by %d", op, tagged)
		}
	}
	for i := range 20000 {
		k := keys[rng.IntN(len(keys))]
		name := g.names(k).entry
		switch op := rng.IntN(10); {
		case op < 5:
			tk := lt.ticket(name)
			e := entry.Entry{Fence: int64(i), Written: int64(i), Value: make([]byte, rng.IntN(64))}
			lt.keep(k, name, tk, &e, time.Hour, 0, false)
			check("keep " + k)
		case op < 7:
			lt.changed(name)
			if _, held := lt.get(k); held {
				t.Fatalf("%q held after its entry changed", k)
			}
			check("changed " + k)
		case op < 9:
			tag, own := hashtag.Tag(k)
			if !own {
				continue
			}
			lt.changedTag(hashtag.Base("ns:", tag))
			for _, other := range keys {
				if tg, ok := hashtag.Tag(other); ok && tg == tag {
					if _, held := lt.get(other); held {
						t.Fatalf("%q held after its tag %q was invalidated", other, tag)
					}
				}
			}
			check("changedTag " + tag)
		default:
			if rng.IntN(20) == 0 {
				lt.flush()
				check("flush")
			} else {
				lt.remove(k)
				check("remove " + k)
			}
		}
	}
}

// TestLocalTierTagTicket: a read of a tagged key sent before its tag was
// invalidated keeps nothing, and keeping a copy of one key of a tag does
// not refuse a read of another key of it sent before.
func TestLocalTierTagTicket(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	lt := newLocalTier(Options{Namespace: "ns:", LocalEntries: 8, LocalBytes: 1 << 20, LocalTTL: time.Hour})
	lt.setLive(true)
	a, b := g.names("{t}a").entry, g.names("{t}b").entry
	e := entry.Entry{Fence: 1, Written: 1, Value: []byte("v")}
	ta, tb := lt.ticket(a), lt.ticket(b)
	lt.keep("{t}a", a, ta, &e, time.Hour, 0, false)
	lt.keep("{t}b", b, tb, &e, time.Hour, 0, false)
	if lt.len() != 2 {
		t.Fatalf("%d copies kept, want both keys' (one key's copy refused the other's)", lt.len())
	}
	tk := lt.ticket(a)
	lt.changedTag(hashtag.Base("ns:", "t"))
	e2 := entry.Entry{Fence: 2, Written: 2, Value: []byte("w")}
	lt.keep("{t}a", a, tk, &e2, time.Hour, 0, false)
	if lt.len() != 0 {
		t.Fatalf("%d copies after the tag's invalidation, want none (a read sent before kept its value)", lt.len())
	}
}
