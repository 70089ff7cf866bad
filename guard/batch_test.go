package guard

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// idOrigin is a batch loader over int ids that counts the loads of each id
// and the calls, and can be held until released.
type idOrigin struct {
	mu      sync.Mutex
	loads   map[int]int
	running map[int]int
	maxRun  int // most loads of one id running at once
	calls   atomic.Int64
	sizes   []int
	gate    chan struct{} // nil: do not block
	// found reports whether id has a value; nil: every id has one.
	found func(id int) bool
}

func newIDOrigin(blocking bool) *idOrigin {
	o := &idOrigin{loads: map[int]int{}, running: map[int]int{}}
	if blocking {
		o.gate = make(chan struct{})
	}
	return o
}

func idValue(id int) string { return "value of " + strconv.Itoa(id) }

func (o *idOrigin) load(ctx context.Context, ids []int) (map[int]string, error) {
	o.calls.Add(1)
	o.mu.Lock()
	o.sizes = append(o.sizes, len(ids))
	for _, id := range ids {
		o.loads[id]++
		o.running[id]++
		o.maxRun = max(o.maxRun, o.running[id])
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		for _, id := range ids {
			o.running[id]--
		}
		o.mu.Unlock()
	}()
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make(map[int]string, len(ids))
	for _, id := range ids {
		if o.found == nil || o.found(id) {
			out[id] = idValue(id)
		}
	}
	return out, nil
}

func (o *idOrigin) loadsOf(id int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads[id]
}

// idKey returns a key func putting ids under prefix.
func idKey(prefix string) func(int) string {
	return func(id int) string { return prefix + ":" + strconv.Itoa(id) }
}

func ids(from, n, mod int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (from + i) % mod
	}
	return out
}

// checkValues fails unless got holds exactly want's ids with their values.
func checkValues(t *testing.T, got map[int]string, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for _, id := range want {
		if got[id] != idValue(id) {
			t.Fatalf("id %d: got %q, want %q", id, got[id], idValue(id))
		}
	}
}

// TestFetchManyOnceFleetWide: 4 nodes × 16 callers ask at once for
// overlapping batches of 100 ids out of 1,000; every id is loaded once in
// the whole fleet, and every caller gets every value.
func TestFetchManyOnceFleetWide(t *testing.T) {
	// A lease won by a read is short (leaseGrace) until the load's watchdog
	// extends it. On a starved machine (-race, 2 busy cores) a pipeline of
	// 100 reads can take longer than that to come back, and another node
	// then takes the lease over, by design. The claim here is the
	// coordination, so the first lease is made long enough.
	old := leaseGrace
	leaseGrace = 20 * time.Second
	t.Cleanup(func() { leaseGrace = old })
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const nodes, callers, batch, space = 4, 16, 100, 1000
		org := newIDOrigin(false)
		key := idKey(redistest.Key(t))
		start := make(chan struct{})
		var wg sync.WaitGroup
		asked := map[int]bool{}
		for n := range nodes {
			// Generous timeouts: the claim is one load per id, and a loaded
			// machine (-race, 2 cores) must not turn a slow pipeline into a
			// degraded load, or a slow fill into a waiter's own load.
			g := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second, WaitTimeout: time.Minute})
			for c := range callers {
				// Windows 37 ids apart: each overlaps several others, on
				// this node and on the others.
				want := ids((n*callers+c)*37, batch, space)
				for _, id := range want {
					asked[id] = true
				}
				wg.Go(func() {
					<-start
					got, err := FetchMany(ctxT(t), g, want, key, org.load)
					if err != nil {
						t.Error(err)
						return
					}
					checkValues(t, got, want)
				})
			}
		}
		close(start)
		wg.Wait()
		for id := range asked {
			if n := org.loadsOf(id); n != 1 {
				t.Errorf("id %d loaded %d times, want 1", id, n)
			}
		}
		t.Logf("%d ids asked, %d loader calls", len(asked), org.calls.Load())
	})
}

// recorder collects what a hook is called with.
type recorder[T any] struct {
	mu  sync.Mutex
	got []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	r.got = append(r.got, v)
	r.mu.Unlock()
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// rtCounter counts round trips: one per pipeline and one per command sent
// alone, at the level of each Redis node's client.
type rtCounter struct {
	n atomic.Int64
}

// setup reports go-redis's own commands: connection set-up and, on a
// cluster, slot-map reloads.
func setup(name string) bool { return name == "hello" || name == "client" || name == "cluster" }

func (h *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd.Name()) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !setup(c.Name()) }) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestGetManyRoundTrips: a batch of hits costs at most one round trip per
// Redis node, whatever its size, by the script read (a node that has not
// seen the keys) and by the fast path alike; a cold batch costs one more
// for the fills, and one loader call.
func TestGetManyRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name    string
		masters int
		client  func(t *testing.T, h *rtCounter) redis.UniversalClient
	}{
		{"standalone", 1, func(t *testing.T, h *rtCounter) redis.UniversalClient {
			c := redistest.Shared(t).Client(t)
			c.AddHook(h)
			return c
		}},
		{"cluster", 3, func(t *testing.T, h *rtCounter) redis.UniversalClient {
			c := redistest.SharedCluster(t).Client(t)
			c.OnNewNode(func(c *redis.Client) { c.AddHook(h) })
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &rtCounter{}
			rdb := tc.client(t, h)
			for name, s := range lua.All() {
				if err := s.Load(ctxT(t), rdb).Err(); err != nil {
					t.Fatalf("load %s: %v", name, err)
				}
			}
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				// Load the scripts on every master: EVALSHA falls back to
				// EVAL once per server, which is not the steady state.
				err := cc.ForEachMaster(ctxT(t), func(ctx context.Context, c *redis.Client) error {
					for _, s := range lua.All() {
						if err := s.Load(ctx, c).Err(); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			prefix := redistest.Key(t)
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = prefix + ":" + strconv.Itoa(i)
			}
			var calls atomic.Int64
			load := func(_ context.Context, ks []string) (map[string][]byte, error) {
				calls.Add(1)
				out := map[string][]byte{}
				for _, k := range ks {
					out[k] = []byte("v:" + k)
				}
				return out, nil
			}
			measure := func(g *Group, ks []string) int64 {
				t.Helper()
				before := h.n.Load()
				got, err := g.GetMany(ctxT(t), ks, load)
				if err != nil || len(got) != len(ks) {
					t.Fatalf("%d of %d values, %v", len(got), len(ks), err)
				}
				return h.n.Load() - before
			}
			a, b := newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})
			if n := measure(a, keys); n > int64(2*tc.masters) {
				t.Errorf("cold batch of 100: %d round trips, want at most %d (a read and a fill per node)", n, 2*tc.masters)
			}
			if calls.Load() != 1 {
				t.Errorf("cold batch of 100: %d loader calls, want 1", calls.Load())
			}
			for _, g := range []*Group{b, a} { // b reads by script, a by GET
				small, large := measure(g, keys[:10]), measure(g, keys)
				if large > int64(tc.masters) || small > large {
					t.Errorf("hits: %d round trips for 10 keys, %d for 100, want at most %d for each", small, large, tc.masters)
				}
			}
			if calls.Load() != 1 {
				t.Errorf("hits called the loader: %d calls", calls.Load())
			}
		})
	}
}

// TestFetchManyPartial: ids the loader does not return are not found, and
// cached so: the next call loads nothing.
func TestFetchManyPartial(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var rec recorder[BatchStats]
		g := newGroup(t, rdb, Options{Hooks: Hooks{Batch: rec.add}})
		org := newIDOrigin(false)
		org.found = func(id int) bool { return id%2 == 0 }
		key := idKey(redistest.Key(t))
		want := ids(0, 20, 20)
		var even []int
		for _, id := range want {
			if id%2 == 0 {
				even = append(even, id)
			}
		}
		for range 2 {
			got, err := FetchMany(ctxT(t), g, want, key, org.load)
			if err != nil {
				t.Fatal(err)
			}
			checkValues(t, got, even)
		}
		if n := org.calls.Load(); n != 1 {
			t.Fatalf("%d loader calls, want 1 (the second call's misses are cached)", n)
		}
		stats := rec.all()
		if len(stats) != 2 {
			t.Fatalf("%d Batch hook calls, want 2", len(stats))
		}
		if s := stats[0]; s.Keys != 20 || s.Loaded != 10 || s.NotFound != 10 || s.Loads != 1 {
			t.Errorf("first call: %+v, want 20 keys, 10 loaded, 10 not found, 1 load", s)
		}
		if s := stats[1]; s.Hits != 10 || s.NotFound != 10 || s.Loads != 0 {
			t.Errorf("second call: %+v, want 10 hits, 10 not found, no load", s)
		}
	})
}

// TestGetManyIgnoresUnasked: keys a loader returns without being asked are
// neither returned nor stored, and are reported.
func TestGetManyIgnoresUnasked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var unasked atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{BatchLoad: func(s BatchLoadStats) { unasked.Add(int64(s.Unasked)) }}})
		prefix := redistest.Key(t)
		asked, extra := []string{prefix + ":a", prefix + ":b"}, prefix+":extra"
		got, err := g.GetMany(ctxT(t), asked, func(_ context.Context, ks []string) (map[string][]byte, error) {
			out := map[string][]byte{extra: []byte("x")}
			for _, k := range ks {
				out[k] = []byte(k)
			}
			return out, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || string(got[asked[0]]) != asked[0] || string(got[asked[1]]) != asked[1] {
			t.Fatalf("got %q, want the two keys asked", got)
		}
		if n, err := rdb.Exists(ctxT(t), g.names(extra).entry).Result(); err != nil || n != 0 {
			t.Fatalf("the unasked key was stored (%d, %v)", n, err)
		}
		if unasked.Load() != 1 {
			t.Fatalf("BatchLoad reported %d unasked keys, want 1", unasked.Load())
		}

		// FetchMany: ids not asked for, the same.
		unasked.Store(0)
		key := idKey(prefix + ":typed")
		res, err := FetchMany(ctxT(t), g, []int{1, 2}, key, func(_ context.Context, ids []int) (map[int]string, error) {
			return map[int]string{1: idValue(1), 2: idValue(2), 3: idValue(3)}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		checkValues(t, res, []int{1, 2})
		if n, err := rdb.Exists(ctxT(t), g.names(key(3)).entry).Result(); err != nil || n != 0 {
			t.Fatalf("the unasked id was stored (%d, %v)", n, err)
		}
		if unasked.Load() != 1 {
			t.Fatalf("BatchLoad reported %d unasked ids, want 1", unasked.Load())
		}
	})
}

// TestFetchManyDuplicates: an id asked for twice is loaded once and
// answered once.
func TestFetchManyDuplicates(t *testing.T) {
	g := newGroup(t, redistest.Universal(t), Options{})
	org := newIDOrigin(false)
	key := idKey(redistest.Key(t))
	got, err := FetchMany(ctxT(t), g, []int{3, 1, 3, 2, 1, 3}, key, org.load)
	if err != nil {
		t.Fatal(err)
	}
	checkValues(t, got, []int{1, 2, 3})
	org.mu.Lock()
	defer org.mu.Unlock()
	if !slices.Equal(org.sizes, []int{3}) {
		t.Fatalf("loader called with batches of %v, want one of 3", org.sizes)
	}

	// Two ids with one key share one load and one value.
	same := func(id int) string { return key(id / 10) }
	res, err := FetchMany(ctxT(t), g, []int{50, 51}, same, func(_ context.Context, ids []int) (map[int]string, error) {
		if !slices.Equal(ids, []int{50}) {
			t.Errorf("loader asked for %v, want [50]", ids)
		}
		return map[int]string{50: "five"}, nil
	})
	if err != nil || len(res) != 2 || res[50] != "five" || res[51] != "five" {
		t.Fatalf("got %v %v, want both ids with the one value", res, err)
	}
}

// TestGetManyMaxBatch: the keys won go to the loader MaxBatch at a time.
func TestGetManyMaxBatch(t *testing.T) {
	g := newGroup(t, redistest.Universal(t), Options{MaxBatch: 100})
	org := newIDOrigin(false)
	got, err := FetchMany(ctxT(t), g, ids(0, 250, 250), idKey(redistest.Key(t)), org.load)
	if err != nil {
		t.Fatal(err)
	}
	checkValues(t, got, ids(0, 250, 250))
	org.mu.Lock()
	defer org.mu.Unlock()
	slices.Sort(org.sizes)
	if !slices.Equal(org.sizes, []int{50, 100, 100}) {
		t.Fatalf("loader called with batches of %v, want 100, 100 and 50", org.sizes)
	}
}

// TestGetManyCancel: a caller that leaves returns its ctx's error at once;
// the load goes on and serves the callers that stay.
func TestGetManyCancel(t *testing.T) {
	rdb := redistest.Universal(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	org := newIDOrigin(true)
	key := idKey(redistest.Key(t))
	want := ids(0, 10, 10)
	ctx, cancel := context.WithCancel(ctxT(t))
	left := make(chan error, 1)
	go func() {
		_, err := FetchMany(ctx, g, want, key, org.load)
		left <- err
	}()
	redistest.Eventually(t, 10*time.Second, "the load to start", func() bool { return org.calls.Load() == 1 })
	stayed := make(chan map[int]string, 1)
	go func() {
		got, err := FetchMany(ctxT(t), g, want, key, org.load)
		if err != nil {
			t.Error(err)
		}
		stayed <- got
	}()
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v, want context.Canceled", err)
	}
	close(org.gate)
	checkValues(t, <-stayed, want)
	if n := org.calls.Load(); n != 1 {
		t.Fatalf("%d loader calls, want 1", n)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// leasesFree fails unless no lease of keys is held.
func leasesFree(t *testing.T, rdb redis.UniversalClient, g *Group, keys []string) {
	t.Helper()
	for _, k := range keys {
		if n, err := rdb.Exists(ctxT(t), g.names(k).keys[1]).Result(); err != nil || n != 0 {
			t.Fatalf("lease of %q still held (%d, %v)", k, n, err)
		}
	}
}

// TestGetManyLoaderPanicAndGoexit: a loader that panics or calls
// runtime.Goexit fails the batch's keys with an error (*PanicError for a
// panic) at once; the leases are released.
func TestGetManyLoaderPanicAndGoexit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		load  func()
		check func(error) bool
	}{
		{"panic", func() { panic("boom") }, func(err error) bool {
			var pe *PanicError
			return errors.As(err, &pe) && pe.Value == "boom" && len(pe.Stack) > 0
		}},
		{"goexit", runtime.Goexit, func(err error) bool { return errors.Is(err, ErrGoexit) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
				g := newGroup(t, rdb, Options{})
				prefix := redistest.Key(t)
				keys := []string{prefix + ":a", prefix + ":b", prefix + ":c"}
				got, err := g.GetMany(ctxT(t), keys, func(context.Context, []string) (map[string][]byte, error) {
					tc.load()
					return nil, nil
				})
				if !tc.check(err) || len(got) != 0 {
					t.Fatalf("got %q, %v", got, err)
				}
				leasesFree(t, rdb, g, keys)
			})
		})
	}
}

// TestGetManyJoinsLoadInProcess: a key already loading in this process
// (here by Do) is joined, not loaded again nor waited for through Redis.
func TestGetManyJoinsLoadInProcess(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var coalesced atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{Coalesced: func(string) { coalesced.Add(1) }}})
		prefix := redistest.Key(t)
		busy, other := prefix+":busy", prefix+":other"
		org := newOrigin(true)
		done := make(chan error, 1)
		go func() {
			_, err := g.Do(ctxT(t), busy, org.load)
			done <- err
		}()
		redistest.Eventually(t, 10*time.Second, "Do loading", func() bool { return org.calls.Load() == 1 })
		var asked [][]string
		var mu sync.Mutex
		res := make(chan map[string][]byte, 1)
		go func() {
			got, err := g.GetMany(ctxT(t), []string{busy, other}, func(_ context.Context, ks []string) (map[string][]byte, error) {
				mu.Lock()
				asked = append(asked, ks)
				mu.Unlock()
				return map[string][]byte{other: []byte("o")}, nil
			})
			if err != nil {
				t.Error(err)
			}
			res <- got
		}()
		// The batch decides to join while it registers for the key's fill,
		// holding the lock Do needs to end its load.
		redistest.Eventually(t, 10*time.Second, "the batch waiting for the busy key", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return g.hub.Waiters(g.names(busy).entry) == 1 && len(asked) == 1
		})
		close(org.gate)
		got := <-res
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if string(got[busy]) != "v1" || string(got[other]) != "o" {
			t.Fatalf("got %q", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(asked) != 1 || !slices.Equal(asked[0], []string{other}) {
			t.Fatalf("batch loader asked for %q, want only %q", asked, other)
		}
		if org.calls.Load() != 1 || coalesced.Load() != 1 {
			t.Fatalf("%d loads of the busy key, %d coalesced, want 1 and 1", org.calls.Load(), coalesced.Load())
		}
	})
}

// TestGetManyWaitsForOtherNode: keys another node is loading are waited
// for and served from its fill.
func TestGetManyWaitsForOtherNode(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var woken, notified atomic.Int64
		a := newGroup(t, rdb, Options{LockTTL: time.Minute})
		b := newGroup(t, rdb, Options{LockTTL: time.Minute, Hooks: Hooks{Woken: func(_ string, n bool, _ time.Duration) {
			woken.Add(1)
			if n {
				notified.Add(1)
			}
		}}})
		if err := b.hub.Ready(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		org := newIDOrigin(true)
		key := idKey(redistest.Key(t))
		want := ids(0, 20, 20)
		first := make(chan error, 1)
		go func() {
			_, err := FetchMany(ctxT(t), a, want, key, org.load)
			first <- err
		}()
		redistest.Eventually(t, 10*time.Second, "node a loading", func() bool { return org.calls.Load() == 1 })
		second := make(chan map[int]string, 1)
		go func() {
			got, err := FetchMany(ctxT(t), b, want, key, org.load)
			if err != nil {
				t.Error(err)
			}
			second <- got
		}()
		redistest.Eventually(t, 10*time.Second, "node b waiting", func() bool {
			return b.hub.Waiters(b.names(key(want[len(want)-1])).entry) == 1
		})
		close(org.gate)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		checkValues(t, <-second, want)
		if n := org.calls.Load(); n != 1 {
			t.Fatalf("%d loader calls, want 1", n)
		}
		if notified.Load() == 0 {
			t.Fatalf("node b woke %d times, never by a fill notification", woken.Load())
		}
	})
}

// TestGetManyStaleRefreshedInOneBatch: stale keys are served at once and
// refreshed together in one background loader call.
func TestGetManyStaleRefreshedInOneBatch(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var rec recorder[BatchLoadStats]
		g := newGroup(t, rdb, Options{Hooks: Hooks{BatchLoad: rec.add}})
		key := idKey(redistest.Key(t))
		want := ids(0, 10, 10)
		for _, id := range want {
			putEntry(t, rdb, g, key(id), "old", -1, 60_000, 1)
		}
		org := newIDOrigin(false)
		got, err := FetchMany(ctxT(t), g, want, key, org.load)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range want {
			if got[id] != "old" {
				t.Fatalf("id %d: %q, want the stale \"old\"", id, got[id])
			}
		}
		g.bg.Wait()
		if refreshes := rec.all(); len(refreshes) != 1 || !refreshes[0].Refresh || refreshes[0].Keys != 10 {
			t.Fatalf("refresh loads %+v, want one of 10 keys", refreshes)
		}
		got, err = FetchMany(ctxT(t), g, want, key, org.load)
		if err != nil {
			t.Fatal(err)
		}
		checkValues(t, got, want)
	})
}

// TestGetManyRedisDown: without Redis, keys are loaded through this
// process alone: a key loading is joined, so at most one load of a key runs
// at a time.
func TestGetManyRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	var degraded atomic.Int64
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, Hooks: Hooks{
		Batch: func(s BatchStats) { degraded.Add(int64(s.Degraded)) },
	}})
	srv.Kill(t)
	org := newIDOrigin(true)
	key := idKey(redistest.Key(t))
	var wg sync.WaitGroup
	for c := range 8 {
		want := ids(c*5, 20, 40)
		wg.Go(func() {
			got, err := FetchMany(ctxT(t), g, want, key, org.load)
			if err != nil {
				t.Error(err)
				return
			}
			checkValues(t, got, want)
		})
	}
	redistest.Eventually(t, 10*time.Second, "every id loading", func() bool {
		g.lmu.Lock()
		defer g.lmu.Unlock()
		return len(g.loads) == 40
	})
	close(org.gate)
	wg.Wait()
	org.mu.Lock()
	defer org.mu.Unlock()
	if org.maxRun != 1 {
		t.Errorf("%d loads of one id ran at once on one node, want 1", org.maxRun)
	}
	if degraded.Load() != 8*20 {
		t.Errorf("%d keys served degraded, want %d", degraded.Load(), 8*20)
	}
}

// TestGetManyBadInput: bad calls get clear errors and touch nothing.
func TestGetManyBadInput(t *testing.T) {
	g := newGroup(t, redistest.Universal(t), Options{})
	load := func(context.Context, []string) (map[string][]byte, error) { return nil, nil }
	var nilGroup *Group
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"nil load", func() error { _, err := g.GetMany(ctxT(t), []string{"k"}, nil); return err }},
		{"nil group", func() error { _, err := nilGroup.GetMany(ctxT(t), []string{"k"}, load); return err }},
		//lint:ignore SA1012 a nil ctx is the input under test
		{"nil ctx", func() error { _, err := g.GetMany(nil, []string{"k"}, load); return err }},
		{"empty key", func() error { _, err := g.GetMany(ctxT(t), []string{"k", ""}, load); return err }},
		{"long key", func() error {
			_, err := g.GetMany(ctxT(t), []string{string(make([]byte, MaxKeyBytes+1))}, load)
			return err
		}},
		{"nil key func", func() error {
			_, err := FetchMany[int, string](ctxT(t), g, []int{1}, nil, func(context.Context, []int) (map[int]string, error) { return nil, nil })
			return err
		}},
		{"nil typed load", func() error {
			_, err := FetchMany[int, string](ctxT(t), g, []int{1}, strconv.Itoa, nil)
			return err
		}},
		{"nil group typed", func() error {
			_, err := FetchMany(ctxT(t), nil, []int{1}, strconv.Itoa, func(context.Context, []int) (map[int]string, error) { return nil, nil })
			return err
		}},
		{"negative freshness", func() error {
			_, err := g.GetMany(ctxT(t), []string{"k"}, load, WithFreshFor(-1))
			return err
		}},
	} {
		if err := tc.call(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if got, err := g.GetMany(ctxT(t), nil, load); err != nil || len(got) != 0 {
		t.Errorf("no keys: %v %v, want an empty map", got, err)
	}
	if _, err := New(redistest.Universal(t), Options{MaxBatch: -1}); err == nil {
		t.Error("negative MaxBatch accepted")
	}
	_ = g.Close()
	if _, err := g.GetMany(ctxT(t), []string{"k"}, load); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestGetManyLoaderError: a loader error fails the keys of its call, once
// in the error, and cold keys back off like single keys.
func TestGetManyLoaderError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
		prefix := redistest.Key(t)
		keys := []string{prefix + ":a", prefix + ":b"}
		boom := errors.New("origin down")
		var calls atomic.Int64
		load := func(context.Context, []string) (map[string][]byte, error) { calls.Add(1); return nil, boom }
		got, err := g.GetMany(ctxT(t), keys, load)
		if !errors.Is(err, boom) || err.Error() != boom.Error() || len(got) != 0 {
			t.Fatalf("got %q, %v; want the loader's error, once", got, err)
		}
		if _, err := g.GetMany(ctxT(t), keys, load); !errors.Is(err, ErrBackoff) {
			t.Fatalf("second call: %v, want ErrBackoff", err)
		}
		if calls.Load() != 1 {
			t.Fatalf("%d loader calls, want 1", calls.Load())
		}
		leasesFree(t, rdb, g, keys)
	})
}

// TestGetManyWaitTimeout: keys whose holder never fills are answered by
// WaitTimeoutPolicy: ErrWaitTimeout, or a load of this node's own.
func TestGetManyWaitTimeout(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		holder := newGroup(t, rdb, Options{LockTTL: time.Minute})
		key := idKey(redistest.Key(t))
		stuck := newIDOrigin(true)
		defer close(stuck.gate)
		go func() { _, _ = FetchMany(ctxT(t), holder, []int{1, 2}, key, stuck.load) }()
		redistest.Eventually(t, 10*time.Second, "the holder loading", func() bool { return stuck.calls.Load() == 1 })

		strict := newGroup(t, rdb, Options{WaitTimeout: 50 * time.Millisecond, WaitTimeoutPolicy: ReturnError})
		org := newIDOrigin(false)
		got, err := FetchMany(ctxT(t), strict, []int{1, 2, 3}, key, org.load)
		if !errors.Is(err, ErrWaitTimeout) {
			t.Fatalf("ReturnError: %v, want ErrWaitTimeout", err)
		}
		checkValues(t, got, []int{3}) // the key nobody held was loaded

		patient := newGroup(t, rdb, Options{WaitTimeout: 50 * time.Millisecond})
		got, err = FetchMany(ctxT(t), patient, []int{1, 2}, key, org.load)
		if err != nil {
			t.Fatalf("LoadLocally: %v", err)
		}
		checkValues(t, got, []int{1, 2})
		if org.loadsOf(1) != 1 || org.loadsOf(2) != 1 {
			t.Fatalf("ids 1 and 2 loaded %d and %d times after the wait, want once each", org.loadsOf(1), org.loadsOf(2))
		}
	})
}

// TestGetManyLocalTier: with the in-process tier, a batch of fresh keys
// costs no round trip.
func TestGetManyLocalTier(t *testing.T) {
	h := &rtCounter{}
	rdb := redistest.Shared(t).Client(t)
	rdb.AddHook(h)
	var rec recorder[BatchStats]
	g := newGroup(t, rdb, Options{LocalEntries: 1000, LocalTTL: time.Minute, Hooks: Hooks{Batch: rec.add}})
	waitTier(t, g)
	org := newIDOrigin(false)
	key := idKey(redistest.Key(t))
	want := ids(0, 50, 50)
	if _, err := FetchMany(ctxT(t), g, want, key, org.load); err != nil {
		t.Fatal(err)
	}
	// A read fills the local tier; the fill of a load does not. A read
	// sent before the report of this Group's own fill arrived keeps
	// nothing (it might be older), so it may take more than one.
	redistest.Eventually(t, 10*time.Second, "the batch's keys in the tier", func() bool {
		if _, err := FetchMany(ctxT(t), g, want, key, org.load); err != nil {
			t.Fatal(err)
		}
		return g.loc.Len() == len(want)
	})
	before := h.n.Load()
	got, err := FetchMany(ctxT(t), g, want, key, org.load)
	if err != nil {
		t.Fatal(err)
	}
	checkValues(t, got, want)
	if n := h.n.Load() - before; n != 0 {
		t.Errorf("%d round trips for a batch held in memory, want 0", n)
	}
	if s := rec.all(); s[len(s)-1].Hits != 50 {
		t.Errorf("last batch: %+v, want 50 hits", s[len(s)-1])
	}
}

// TestGetManyCloseWaitsForRefresh: Close waits for a batch's background
// refresh; no goroutine outlives the Group.
func TestGetManyCloseWaitsForRefresh(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	g, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := idKey(redistest.Key(t))
	for _, id := range []int{1, 2} {
		putEntry(t, rdb, g, key(id), "old", -1, 60_000, 1)
	}
	var refreshed atomic.Int64
	got, err := FetchMany(ctxT(t), g, []int{1, 2}, key, func(_ context.Context, ids []int) (map[int]string, error) {
		refreshed.Add(int64(len(ids)))
		return map[int]string{1: "new", 2: "new"}, nil
	})
	if err != nil || got[1] != "old" || got[2] != "old" {
		t.Fatalf("got %v %v, want the stale values", got, err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if refreshed.Load() != 2 {
		t.Fatalf("Close returned before the refresh of 2 keys ran (%d)", refreshed.Load())
	}
}

// TestGetManyLateWriterRejected: a batch whose loads began before the data
// changed (an Invalidate, another node's newer load) does not overwrite the
// newer values: its fills are rejected by their fences, key by key.
func TestGetManyLateWriterRejected(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var rejected atomic.Int64
		late := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.Add(1) }}})
		fresh := newGroup(t, rdb, Options{})
		prefix := redistest.Key(t)
		keys := []string{prefix + ":a", prefix + ":b"}
		gate, started := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := late.GetMany(ctxT(t), keys, func(context.Context, []string) (map[string][]byte, error) {
				close(started)
				<-gate
				return map[string][]byte{keys[0]: []byte("old"), keys[1]: []byte("old")}, nil
			})
			done <- err
		}()
		<-started
		newer := map[string][]byte{keys[0]: []byte("new"), keys[1]: []byte("new")}
		for _, k := range keys {
			if err := fresh.Invalidate(ctxT(t), k); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fresh.GetMany(ctxT(t), keys, func(context.Context, []string) (map[string][]byte, error) { return newer, nil }); err != nil {
			t.Fatal(err)
		}
		close(gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if rejected.Load() != 2 {
			t.Fatalf("%d fills rejected, want the late batch's 2", rejected.Load())
		}
		other := newGroup(t, rdb, Options{})
		got, err := other.GetMany(ctxT(t), keys, func(context.Context, []string) (map[string][]byte, error) {
			t.Error("loader called for keys with values")
			return nil, nil
		})
		if err != nil || string(got[keys[0]]) != "new" || string(got[keys[1]]) != "new" {
			t.Fatalf("after the late fills: %q %v, want the newer values", got, err)
		}
	})
}

// TestMergeBatchHooks: MergeHooks chains the batch hooks too.
func TestMergeBatchHooks(t *testing.T) {
	var batches, loads int
	m := MergeHooks(
		Hooks{Batch: func(BatchStats) { batches++ }, BatchLoad: func(BatchLoadStats) { loads++ }},
		Hooks{Batch: func(BatchStats) { batches++ }, BatchLoad: func(BatchLoadStats) { loads++ }},
	)
	m.Batch(BatchStats{})
	m.BatchLoad(BatchLoadStats{})
	if batches != 2 || loads != 2 {
		t.Fatalf("Batch called %d times, BatchLoad %d, want 2 and 2", batches, loads)
	}
}

// TestFetchManyIdsSharingKey: 100,000 ids, all on one key (a key func that
// groups ids), some twice. The loader is asked the key's first id once;
// every id gets the key's value. The ids are sorted out in one pass:
// before, each was checked against every id of its key already seen, and
// the call took 5 s (11 s for 200,000), its caller's deadline unseen.
func TestFetchManyIdsSharingKey(t *testing.T) {
	g := newGroup(t, redistest.Shared(t).Client(t), Options{FreshFor: time.Minute})
	key := redistest.Key(t)
	const n = 100_000
	ids := make([]int, 0, n+n/10)
	for i := range n {
		ids = append(ids, i)
	}
	for i := range n / 10 {
		ids = append(ids, i*7%n) // asked twice
	}
	var asked atomic.Int64
	start := time.Now()
	got, err := FetchMany(ctxT(t), g, ids, func(int) string { return key }, func(_ context.Context, ids []int) (map[int]string, error) {
		asked.Add(int64(len(ids)))
		out := make(map[int]string, len(ids))
		for _, id := range ids {
			out[id] = "v" + strconv.Itoa(id)
		}
		return out, nil
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 1 {
		t.Errorf("the loader was asked %d ids for one key, want 1", asked.Load())
	}
	if len(got) != n || got[n-1] != "v0" {
		t.Errorf("%d ids answered (id %d: %q), want %d, each with the key's value %q", len(got), n-1, got[n-1], n, "v0")
	}
	if elapsed > 3*time.Second {
		t.Errorf("FetchMany of %d ids on one key took %v: quadratic in the ids of a key", len(ids), elapsed)
	}
}

// TestGetManyLargeBatchOfStoredKeys: 40,000 keys stored in Redis, then
// asked for in one GetMany with the default RedisTimeout: every value
// comes from Redis, no key is loaded. The batch's pipeline is given time
// for its size; with one RedisTimeout for any batch (padded at most
// fourfold on a late process) it timed out while Redis answered, and
// every key of it was loaded, at every call (five calls of 40,000 stored
// keys: 200,000 loads), leaving the leases its scripts had won held.
func TestGetManyLargeBatchOfStoredKeys(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	const n = 40_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = redistest.Key(t, strconv.Itoa(i))
	}
	value := func(_ context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k] = []byte("v:" + k)
		}
		return out, nil
	}
	fill := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second, FreshFor: time.Hour, MaxBatch: 5000})
	for i := 0; i < n; i += 5000 {
		if _, err := fill.GetMany(ctxT(t), keys[i:i+5000], value); err != nil {
			t.Fatal(err)
		}
	}
	// The default RedisTimeout (newGroup's is longer).
	g := newGroup(t, rdb, Options{RedisTimeout: 250 * time.Millisecond, FreshFor: time.Hour})
	var loaded atomic.Int64
	start := time.Now()
	got, err := g.GetMany(ctxT(t), keys, func(ctx context.Context, keys []string) (map[string][]byte, error) {
		loaded.Add(int64(len(keys)))
		return value(ctx, keys)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one batch of %d keys: %v", n, time.Since(start))
	for _, k := range keys {
		if string(got[k]) != "v:"+k {
			t.Fatalf("key %s: %q", k, got[k])
		}
	}
	if l := loaded.Load(); l > 0 {
		t.Errorf("%d keys loaded by a batch of %d keys stored in Redis; want none", l, n)
	}
}
