package guard

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// TestClientSideCacheBypassed: go-redis's client-side cache answers a
// GET from memory, out of the tier's fence and its lag bound, and was seen
// to serve a node the value another node had replaced for seconds. The
// guard's reads bypass it (pipelines, which it does not serve): the cache
// answers none of them, and a refill made through one node is what the
// other serves, at once, in every run.
func TestClientSideCacheBypassed(t *testing.T) {
	for _, local := range []int{0, Disabled} {
		name := map[int]string{0: "tier on", Disabled: "tier off"}[local]
		t.Run(name, func(t *testing.T) {
			o := Options{LocalEntries: local, FreshFor: time.Hour}
			if local == 0 {
				o.LocalEntries = 100
			}
			a, b := newCSCNode(t, o), newCSCNode(t, o)
			key := redistest.Key(t)
			for run := range 6 {
				want := "v" + string(rune('1'+run))
				if err := a.g.Invalidate(ctxT(t), key); err != nil {
					t.Fatal(err)
				}
				if _, err := a.g.Do(ctxT(t), key, valueOf(want)); err != nil {
					t.Fatal(err)
				}
				returned := time.Now()
				for range 50 {
					start := time.Now()
					r, err := b.g.Do(ctxT(t), key, valueOf("unexpected load"))
					if err != nil {
						t.Fatal(err)
					}
					if string(r.Value) != "v:"+want && start.Sub(returned) > b.g.opts.LocalLag {
						t.Fatalf("run %d: b served %q %v after a's refill to %q returned", run, r.Value, start.Sub(returned), want)
					}
				}
			}
			if n := a.served() + b.served(); n != 0 {
				t.Errorf("go-redis's client-side cache answered %d of the guard's reads; want none", n)
			}
		})
	}
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
	if !b.hits.Any.Batching() {
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
