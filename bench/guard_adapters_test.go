package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/guard"
)

// This file holds the cache strategies that the Guard* benchmarks compare,
// each behind one small adapter (cacheNode), and the origin they all load
// from. A "node" is one simulated service instance: its own *redis.Client
// (so its own connection pool) and its own instance of the library, sharing
// only the redis-server with the other nodes.

// originSize is the size of every value the origin returns.
const originSize = 256

// origin is the slow data source behind every cache: each load sleeps for
// latency (or until ctx ends) and is logged, so the benchmarks can count
// loads per key and tell which requests overlapped a load.
type origin struct {
	latency time.Duration

	mu    sync.Mutex
	loads []loadRec
	seq   int64
}

// loadRec is one origin load of key, from start to end.
type loadRec struct {
	key        string
	start, end time.Time
}

func newOrigin(latency time.Duration) *origin { return &origin{latency: latency} }

// load returns a originSize-byte value naming key and a version number that
// grows with every load (of any key).
func (o *origin) load(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	t := time.NewTimer(o.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	o.mu.Lock()
	o.seq++
	v := o.seq
	o.loads = append(o.loads, loadRec{key: key, start: start, end: time.Now()})
	o.mu.Unlock()
	b := make([]byte, originSize)
	copy(b, fmt.Sprintf("%s#v%d;", key, v))
	return b, nil
}

// loadsOf returns the logged loads of key, in the order they ended.
func (o *origin) loadsOf(key string) []loadRec {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []loadRec
	for _, l := range o.loads {
		if l.key == key {
			out = append(out, l)
		}
	}
	return out
}

// cacheNode is one node of a strategy: get returns the value of key, loading
// it from the origin when the strategy decides to.
type cacheNode interface {
	get(ctx context.Context, key string) ([]byte, error)
	close() error
}

// statusCounter is a node that can say how its answers were served (guard:
// hit, stale, miss, shared, degraded).
type statusCounter interface {
	statuses() [guard.Degraded + 1]int64
}

// cacheConfig is what a scenario asks of every strategy.
type cacheConfig struct {
	// freshFor is how long a loaded value is served as fresh: the Redis TTL
	// of the strategies without a stale window.
	freshFor time.Duration
	// staleFor is the stale-while-revalidate window after freshFor, for the
	// strategies that have one (guard, sturdyc); the others ignore it.
	staleFor time.Duration
}

// cacheImpl is one caching strategy under test.
type cacheImpl struct {
	name string
	// open returns a node with its own Redis client (counting every command
	// it sends in cmds) and its own library instance, loading from org.
	open func(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error)
}

var cacheImpls = []cacheImpl{
	{name: "naive", open: openNaive},
	{name: "singleflight", open: openSingleflight},
	{name: "go-redis-cache", open: openGoRedisCache},
	{name: "sturdyc", open: openSturdyc},
	{name: "guard", open: openGuard},
}

// newCountingRedis returns a go-redis client with the library defaults plus
// ContextTimeoutEnabled (which guard requires, so context deadlines bound
// socket I/O; every strategy gets the same client) that adds every command
// it sends (a pipeline counts its commands) to cmds.
func newCountingRedis(addr string, cmds *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	if cmds != nil {
		rdb.AddHook(cmdHook{n: cmds})
	}
	return rdb
}

// cmdHook counts the commands a client sends, whatever their outcome.
// Pub/Sub traffic (guard's fill notifications) does not pass through it.
type cmdHook struct{ n *atomic.Int64 }

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// --- (a) naive cache-aside ------------------------------------------------

// naiveNode: GET; on a miss every caller loads and SETs with EX freshFor.
type naiveNode struct {
	rdb *redis.Client
	org *origin
	ttl time.Duration
}

func openNaive(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error) {
	return &naiveNode{rdb: newCountingRedis(addr, cmds), org: org, ttl: cfg.freshFor}, nil
}

func (n *naiveNode) get(ctx context.Context, key string) ([]byte, error) {
	v, err := n.rdb.Get(ctx, key).Bytes()
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	v, err = n.org.load(ctx, key)
	if err != nil {
		return nil, err
	}
	return v, n.rdb.Set(ctx, key, v, n.ttl).Err()
}

func (n *naiveNode) close() error { return n.rdb.Close() }

// --- (b) singleflight per node + cache-aside -------------------------------

// singleflightNode: GET; on a miss the callers of this node share one
// load + SET through golang.org/x/sync/singleflight. Nodes do not
// coordinate, so a cold key costs up to one load per node.
type singleflightNode struct {
	naiveNode
	sf singleflight.Group
}

func openSingleflight(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error) {
	return &singleflightNode{naiveNode: naiveNode{rdb: newCountingRedis(addr, cmds), org: org, ttl: cfg.freshFor}}, nil
}

func (n *singleflightNode) get(ctx context.Context, key string) ([]byte, error) {
	v, err := n.rdb.Get(ctx, key).Bytes()
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	r, err, _ := n.sf.Do(key, func() (any, error) {
		v, err := n.org.load(context.WithoutCancel(ctx), key)
		if err != nil {
			return nil, err
		}
		return v, n.rdb.Set(context.WithoutCancel(ctx), key, v, n.ttl).Err()
	})
	if err != nil {
		return nil, err
	}
	return r.([]byte), nil
}

// --- (c) github.com/go-redis/cache/v9 --------------------------------------

// goRedisCacheNode: cache.Once with Redis as the only store (Options.LocalCache
// nil: no local cache). Once runs GET, and on a miss load + SET, inside the
// instance's own singleflight; nodes do not coordinate. Note: go-redis/cache
// replaces a TTL under 1s by 1 hour (Item.ttl), hence freshFor >= 1s in the
// benchmarks.
type goRedisCacheNode struct {
	rdb *redis.Client
	c   *gocache.Cache
	org *origin
	ttl time.Duration
}

func openGoRedisCache(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error) {
	if cfg.freshFor < time.Second {
		return nil, fmt.Errorf("go-redis/cache: freshFor %v < 1s would be stored for 1h", cfg.freshFor)
	}
	rdb := newCountingRedis(addr, cmds)
	return &goRedisCacheNode{rdb: rdb, c: gocache.New(&gocache.Options{Redis: rdb}), org: org, ttl: cfg.freshFor}, nil
}

func (n *goRedisCacheNode) get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := n.c.Once(&gocache.Item{
		Ctx:   ctx,
		Key:   key,
		Value: &v,
		TTL:   n.ttl,
		Do:    func(it *gocache.Item) (any, error) { return n.org.load(it.Context(), key) },
	})
	return v, err
}

func (n *goRedisCacheNode) close() error { return n.rdb.Close() }

// --- (d) github.com/viccon/sturdyc with Redis as distributed storage ------

// sturdycNode: sturdyc's in-memory cache (it has no mode without one) with
// early refreshes, over Redis through WithDistributedStorageEarlyRefreshes:
//
//   - in memory: kept for freshFor+staleFor; a request after a random
//     moment in [freshFor/2, freshFor] since the entry was written starts
//     one background refresh on this node (the old value is served
//     meanwhile); after freshFor+staleFor the refresh is synchronous;
//   - a refresh (and an in-memory miss, deduplicated per node) reads Redis
//     first; the record there is used as is while younger than freshFor,
//     otherwise the origin is called and the result written back (async).
//     Redis TTL is freshFor+staleFor.
//
// Nodes do not coordinate: every node whose refresh finds the Redis record
// older than freshFor loads the origin.
type sturdycNode struct {
	rdb   *redis.Client
	c     *sturdyc.Client[[]byte]
	org   *origin
	store *redisStorage
}

func openSturdyc(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error) {
	rdb := newCountingRedis(addr, cmds)
	window := cfg.freshFor + cfg.staleFor
	c, store := newSturdyc(rdb, cfg.freshFor, window)
	return &sturdycNode{rdb: rdb, c: c, org: org, store: store}, nil
}

// newSturdyc returns sturdyc configured as sturdycNode describes, over rdb.
func newSturdyc(rdb *redis.Client, fresh, window time.Duration) (*sturdyc.Client[[]byte], *redisStorage) {
	store := &redisStorage{rdb: rdb, ttl: window}
	c := sturdyc.New[[]byte](1<<16, 8, window, 10,
		sturdyc.WithNoContinuousEvictions(), // its eviction goroutine never exits otherwise
		sturdyc.WithEarlyRefreshes(fresh/2, fresh, window, 10*time.Millisecond),
		sturdyc.WithDistributedStorageEarlyRefreshes(store, fresh),
		sturdyc.WithLog(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	return c, store
}

func (n *sturdycNode) get(ctx context.Context, key string) ([]byte, error) {
	return n.c.GetOrFetch(ctx, key, func(ctx context.Context) ([]byte, error) { return n.org.load(ctx, key) })
}

// close waits for the Redis writes sturdyc started (it writes from goroutines
// of its own that cannot be waited for; the grace period lets those about to
// start begin) before closing the client.
func (n *sturdycNode) close() error {
	time.Sleep(20 * time.Millisecond)
	n.store.writes.Wait()
	return n.rdb.Close()
}

// redisStorage is sturdyc's DistributedStorageWithDeletions on go-redis:
// the records sturdyc hands over are stored as they are with a TTL.
type redisStorage struct {
	rdb    *redis.Client
	ttl    time.Duration
	writes sync.WaitGroup // Set calls in progress
}

func (s *redisStorage) Get(ctx context.Context, key string) ([]byte, bool) {
	b, err := s.rdb.Get(ctx, key).Bytes()
	return b, err == nil
}

func (s *redisStorage) Set(ctx context.Context, key string, value []byte) {
	s.writes.Add(1)
	defer s.writes.Done()
	_ = s.rdb.Set(ctx, key, value, s.ttl).Err()
}

func (s *redisStorage) GetBatch(ctx context.Context, keys []string) map[string][]byte {
	out := make(map[string][]byte, len(keys))
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return out
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[keys[i]] = []byte(str)
		}
	}
	return out
}

func (s *redisStorage) SetBatch(ctx context.Context, records map[string][]byte) {
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, v := range records {
			p.Set(ctx, k, v, s.ttl)
		}
		return nil
	})
}

func (s *redisStorage) Delete(ctx context.Context, key string) { _ = s.rdb.Del(ctx, key).Err() }

func (s *redisStorage) DeleteBatch(ctx context.Context, keys []string) {
	_ = s.rdb.Del(ctx, keys...).Err()
}

// --- (e) stampede guard ----------------------------------------------------

// guardNode: guard.Group.Do with FreshFor/StaleFor from the scenario, other
// Options at their defaults (no in-process tier, 10% TTL jitter).
type guardNode struct {
	rdb *redis.Client
	g   *guard.Group
	org *origin
	st  [guard.Degraded + 1]atomic.Int64
}

func openGuard(addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) (cacheNode, error) {
	rdb := newCountingRedis(addr, cmds)
	g, err := guard.New(rdb, guard.Options{FreshFor: cfg.freshFor, StaleFor: cfg.staleFor})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &guardNode{rdb: rdb, g: g, org: org}, nil
}

func (n *guardNode) get(ctx context.Context, key string) ([]byte, error) {
	r, err := n.g.Do(ctx, key, func(ctx context.Context) ([]byte, error) { return n.org.load(ctx, key) })
	if int(r.Status) < len(n.st) {
		n.st[r.Status].Add(1)
	}
	return r.Value, err
}

func (n *guardNode) statuses() [guard.Degraded + 1]int64 {
	var out [guard.Degraded + 1]int64
	for i := range n.st {
		out[i] = n.st[i].Load()
	}
	return out
}

func (n *guardNode) close() error { return errors.Join(n.g.Close(), n.rdb.Close()) }

// --- helpers ---------------------------------------------------------------

// openNodes opens n nodes of im, closed when tb ends.
func openNodes(tb testing.TB, im cacheImpl, n int, addr string, cfg cacheConfig, org *origin, cmds *atomic.Int64) []cacheNode {
	tb.Helper()
	nodes := make([]cacheNode, n)
	for i := range nodes {
		nd, err := im.open(addr, cfg, org, cmds)
		if err != nil {
			tb.Fatalf("%s: open: %v", im.name, err)
		}
		nodes[i] = nd
		tb.Cleanup(func() {
			if err := nd.close(); err != nil {
				tb.Errorf("%s: close: %v", im.name, err)
			}
		})
	}
	return nodes
}

// statusLine formats the guard statuses the nodes counted since since ("" for
// other strategies).
func statusLine(nodes []cacheNode, since [guard.Degraded + 1]int64) string {
	now := sumStatuses(nodes)
	for i := range now {
		now[i] -= since[i]
	}
	return formatStatuses(now)
}

func formatStatuses(st [guard.Degraded + 1]int64) string {
	var parts []string
	for s := guard.Hit; s <= guard.Degraded; s++ {
		if st[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", s, st[s]))
		}
	}
	return strings.Join(parts, " ")
}

func sumStatuses(nodes []cacheNode) [guard.Degraded + 1]int64 {
	var sum [guard.Degraded + 1]int64
	for _, n := range nodes {
		if sc, ok := n.(statusCounter); ok {
			s := sc.statuses()
			for i := range sum {
				sum[i] += s[i]
			}
		}
	}
	return sum
}

// TestGuardAdapters runs every strategy's adapter against the real server:
// a cold key is loaded once and served from Redis to a second node (no
// second load), and 4 callers on each of 2 nodes get the value of another
// cold key with at most one load per node.
func TestGuardAdapters(t *testing.T) {
	addr := server(t)
	cfg := cacheConfig{freshFor: 2 * time.Second, staleFor: 2 * time.Second}
	for _, im := range cacheImpls {
		t.Run(im.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			org := newOrigin(20 * time.Millisecond)
			var cmds atomic.Int64
			nodes := openNodes(t, im, 2, addr, cfg, org, &cmds)

			key := uniqueKey(t.Name())
			v1, err := nodes[0].get(ctx, key)
			if err != nil {
				t.Fatalf("node 0: %v", err)
			}
			if !strings.HasPrefix(string(v1), key+"#v") || len(v1) != originSize {
				t.Fatalf("node 0 got %q", v1)
			}
			// sturdyc writes to its distributed storage asynchronously.
			time.Sleep(50 * time.Millisecond)
			v2, err := nodes[1].get(ctx, key)
			if err != nil {
				t.Fatalf("node 1: %v", err)
			}
			if string(v2) != string(v1) {
				t.Fatalf("node 1 got %.20q, node 0 %.20q", v2, v1)
			}
			if n := len(org.loadsOf(key)); n != 1 {
				t.Fatalf("%d origin loads for one key read by two nodes, want 1", n)
			}
			if cmds.Load() == 0 {
				t.Fatal("the command-counting hook saw nothing")
			}

			key = uniqueKey(t.Name())
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for _, n := range nodes {
				for range 4 {
					wg.Go(func() {
						v, err := n.get(ctx, key)
						if err == nil && !strings.HasPrefix(string(v), key+"#v") {
							err = fmt.Errorf("got %.20q", v)
						}
						if err != nil {
							errs <- err
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			loads := len(org.loadsOf(key))
			maxLoads := len(nodes)
			if im.name == "naive" {
				maxLoads = 8
			}
			if loads < 1 || loads > maxLoads {
				t.Fatalf("%d origin loads for 8 concurrent callers on 2 nodes, want 1..%d", loads, maxLoads)
			}
			if im.name == "guard" && loads != 1 {
				t.Errorf("guard: %d origin loads for a cold key, want 1 (statuses %s)", loads, statusLine(nodes, [guard.Degraded + 1]int64{}))
			}
		})
	}
}
