package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/internal/redistest"
)

// cscNode is one node of a fleet on go-redis client-side caching: its own
// RESP3 client with its own built-in cache, and its Group.
type cscNode struct {
	rdb   *redis.Client
	cache *redis.LocalCache
	g     *Group
}

func newCSCNode(t *testing.T, o Options) cscNode {
	t.Helper()
	// The built-in cache, made here rather than through
	// ClientSideCacheConfig only so that the test can read its counters.
	cache := redis.NewLocalCache(redis.CacheConfig{MaxEntries: 1000})
	rdb := redistest.Shared(t).Client(t, func(ro *redis.Options) {
		ro.Protocol = 3
		ro.ClientSideCache = cache
	})
	return cscNode{rdb: rdb, cache: cache, g: newGroup(t, rdb, o)}
}

// served is how many reads the node's client cache has answered.
func (n cscNode) served() uint64 { return n.rdb.CSCStats().Hits }

// expect returns a wait for the next invalidation push that drops a cached
// copy from the node's client cache. Only entries are cached (the guard
// GETs nothing else), so in these tests that is the key's entry. Redis
// tracks keys per connection, so a key read on several connections of the
// client (by a script, by a GET) gets a push on each: the one that matters
// is the push that drops the cached copy.
func (n cscNode) expect(t *testing.T) func(what string) {
	dropped := func() uint64 {
		d, noop := n.cache.DeletionStats()
		return d - noop
	}
	before := dropped()
	return func(what string) {
		t.Helper()
		redistest.Eventually(t, 10*time.Second, "the invalidation push of "+what, func() bool { return dropped() > before })
	}
}

// TestClientSideCaching: on RESP3 clients with go-redis client-side
// caching, a node's hits are served from its cache, and what another node
// does to the key (a fill, an Invalidate, a refresh) is what the node
// serves as soon as the invalidation push for the key's entry arrives.
func TestClientSideCaching(t *testing.T) {
	a, b := newCSCNode(t, Options{}), newCSCNode(t, Options{})
	key := redistest.Key(t)
	load := func(v string) LoadFunc {
		return func(context.Context) ([]byte, error) { return []byte(v), nil }
	}
	if r, err := a.g.Do(ctxT(t), key, load("v1")); err != nil || r.Status != Miss {
		t.Fatalf("fill on a: %v %v", r.Status, err)
	}
	// b: the script (hint taken), a GET (cached), then hits from the cache.
	for range 3 {
		if r, err := b.g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit || string(r.Value) != "v1" {
			t.Fatalf("b: %v %q %v, want a hit of v1", r.Status, r.Value, err)
		}
	}
	served := b.served()
	for range 100 {
		if r, err := b.g.Do(ctxT(t), key, nil2); err != nil || string(r.Value) != "v1" {
			t.Fatalf("b: %q %v", r.Value, err)
		}
	}
	if got := b.served() - served; got != 100 {
		t.Fatalf("b's client cache served %d of 100 hits, want all", got)
	}

	t.Run("Invalidate and fill", func(t *testing.T) {
		pushed := b.expect(t)
		if err := a.g.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		pushed("the Invalidate")
		// b's hint still says v1 is fresh; only the push keeps it from
		// being served. The miss loads v2 on b...
		if r, err := b.g.Do(ctxT(t), key, load("v2")); err != nil || r.Status != Miss || string(r.Value) != "v2" {
			t.Fatalf("b after a's Invalidate: %v %q %v, want a miss loading v2", r.Status, r.Value, err)
		}
		// ...and a, which cached nothing since, reads b's fill.
		if r, err := a.g.Do(ctxT(t), key, nil2); err != nil || string(r.Value) != "v2" {
			t.Fatalf("a after b's fill: %q %v", r.Value, err)
		}
	})

	t.Run("fill over a cached value", func(t *testing.T) {
		// Cache v2 in b's client cache, then a replaces the entry (an
		// Invalidate and its fill, back to back, as another writer would).
		redistest.Eventually(t, 10*time.Second, "v2 in b's client cache", func() bool {
			served := b.served()
			r, err := b.g.Do(ctxT(t), key, nil2)
			return err == nil && string(r.Value) == "v2" && b.served() > served
		})
		if err := a.g.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		if r, err := a.g.Do(ctxT(t), key, load("v3")); err != nil || string(r.Value) != "v3" {
			t.Fatalf("refill on a: %q %v", r.Value, err)
		}
		// Here the push that drops b's copy cannot be told from the
		// others (go-redis counts some live drops as no-ops: the cached
		// copy may go with the push of another connection): b serves v2
		// until go-redis has applied it, then v3, never anything else.
		redistest.Eventually(t, 10*time.Second, "b serving a's fill", func() bool {
			r, err := b.g.Do(ctxT(t), key, nil2)
			switch {
			case err != nil || (string(r.Value) != "v2" && string(r.Value) != "v3"):
				t.Fatalf("b: %v %q %v, want v2 until the push, then v3", r.Status, r.Value, err)
			}
			return string(r.Value) == "v3"
		})
	})
}

// TestClientSideCachingRefresh: a background refresh on one node replaces
// the value every node serves once its push arrives, and no node serves a
// value past its stale-until, whatever its client cache holds.
func TestClientSideCachingRefresh(t *testing.T) {
	o := Options{FreshFor: 300 * time.Millisecond, StaleFor: 400 * time.Millisecond, Jitter: Disabled, ErrorBackoff: 50 * time.Millisecond}
	a, b := newCSCNode(t, o), newCSCNode(t, o)
	key := redistest.Key(t)
	name := a.g.names(key).entry
	if _, err := a.g.Do(ctxT(t), key, valueOf("v1")); err != nil {
		t.Fatal(err)
	}
	plain := redistest.Shared(t).Client(t) // reads Redis, not a client cache
	raw, err := plain.Get(ctxT(t), name).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	e1, err := entry.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	down := func(context.Context) ([]byte, error) { return nil, errors.New("origin down") }

	// b serves v1 from its client cache until fresh-until, stale after,
	// its refreshes failing, and never once stale-until has passed on
	// Redis's clock, read before each call.
	var staleSeen, afterSeen int
	for afterSeen < 20 {
		now, err := plain.Time(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.g.Do(ctxT(t), key, down)
		if now.UnixMilli() >= e1.StaleUntil {
			afterSeen++
			if string(r.Value) == "v:v1" {
				t.Fatalf("v1 served %dms past its stale-until (%v)", now.UnixMilli()-e1.StaleUntil, r.Status)
			}
			continue
		}
		if err == nil && r.Status == Stale {
			staleSeen++
		}
	}
	if staleSeen == 0 {
		t.Error("v1 never served stale: the test did not cover the stale window")
	}

	// A refresh on a reaches b within one push.
	redistest.Eventually(t, 10*time.Second, "v2 filled on a, past the error back-off", func() bool {
		_, err := a.g.Do(ctxT(t), key, valueOf("v2"))
		return err == nil
	})
	for range 2 { // b caches v2
		if r, err := b.g.Do(ctxT(t), key, nil2); err != nil || string(r.Value) != "v:v2" {
			t.Fatalf("b: %q %v", r.Value, err)
		}
	}
	redistest.Eventually(t, 10*time.Second, "v2 stale on Redis's clock", func() bool {
		r, err := a.g.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
			// The refresh: b must see it once the push lands.
			return []byte("v3"), nil
		})
		return err == nil && r.Status == Stale
	})
	a.g.bg.Wait() // the background refresh has stored v3
	redistest.Eventually(t, 10*time.Second, "b serving a's refresh", func() bool {
		r, err := b.g.Do(ctxT(t), key, nil2)
		return err == nil && string(r.Value) == "v3"
	})
}

// TestClientSideCachingWaiters: under RESP3 with client-side caching, a
// cold key is loaded once across nodes (the lease) and the waiters on the
// other node are woken by the fill's Pub/Sub notification.
func TestClientSideCachingWaiters(t *testing.T) {
	var notified, polled atomic.Int64
	woken := Hooks{Woken: func(_ string, byNotice bool, _ time.Duration) {
		if byNotice {
			notified.Add(1)
		} else {
			polled.Add(1)
		}
	}}
	a, b := newCSCNode(t, Options{}), newCSCNode(t, Options{Hooks: woken})
	org := newOrigin(true)
	key := redistest.Key(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		if r, err := a.g.Do(ctxT(t), key, org.load); err != nil || r.Status != Miss {
			t.Errorf("a: %v %v", r.Status, err)
		}
	})
	redistest.Eventually(t, 10*time.Second, "a loading", func() bool { return org.calls.Load() == 1 })
	const waiters = 4
	for range waiters {
		wg.Go(func() {
			if r, err := b.g.Do(ctxT(t), key, org.load); err != nil || string(r.Value) != "v1" {
				t.Errorf("b: %v %q %v", r.Status, r.Value, err)
			}
		})
	}
	redistest.Eventually(t, 10*time.Second, "b waiting for the fill", func() bool {
		return b.g.hub.Waiters(b.g.names(key).entry) > 0
	})
	close(org.gate)
	wg.Wait()
	if n := org.calls.Load(); n != 1 {
		t.Errorf("origin called %d times, want 1", n)
	}
	if notified.Load() == 0 || polled.Load() != 0 {
		t.Errorf("b woken %d times by the notification, %d by its timer; want the notification", notified.Load(), polled.Load())
	}
}

// TestClientSideCachingCluster: go-redis v9.23 has client-side caching on
// *redis.Client only. NewUniversalClient given cluster addresses returns a
// *redis.ClusterClient without it (the option is dropped), so the guard on
// it sends every hit to Redis, batched, and is coherent at once.
func TestClientSideCachingCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	uc := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: cl.Addrs, Protocol: 3, ContextTimeoutEnabled: true, IsClusterMode: true,
		ClientSideCacheConfig: &redis.ClientSideCacheConfig{MaxEntries: 1000},
	})
	t.Cleanup(func() { _ = uc.Close() })
	if _, ok := uc.(*redis.ClusterClient); !ok {
		t.Fatalf("NewUniversalClient built a %T, want a *redis.ClusterClient", uc)
	}
	h := &nameHook{}
	uc.AddHook(h)
	a, b := newGroup(t, uc, Options{}), newGroup(t, uc, Options{})
	if !b.hits.Batching() {
		t.Fatal("hits on a cluster client are not batched")
	}
	key := redistest.Key(t)
	if _, err := a.Do(ctxT(t), key, valueOf("v1")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if r, err := b.Do(ctxT(t), key, nil2); err != nil || string(r.Value) != "v:v1" {
			t.Fatalf("b: %q %v", r.Value, err)
		}
	}
	h.take()
	if r, err := b.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit {
		t.Fatalf("b: %v %v", r.Status, err)
	}
	if got := h.take(); len(got) != 1 || got[0] != "get" {
		t.Fatalf("a hit on the cluster client sent %v, want one GET to Redis", got)
	}
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Do(ctxT(t), key, valueOf("v2")); err != nil || r.Status != Miss || string(r.Value) != "v:v2" {
		t.Fatalf("b right after a's Invalidate: %v %q %v, want a miss loading v2", r.Status, r.Value, err)
	}
}
