package guard

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The in-process tier across nodes: two Groups on two clients stand for
// two nodes of a fleet.

// localProbe is the key waitLocal reads.
const localProbe = "local-probe"

// localNode is a Group with its in-process tier on, and the hits it
// served from that tier.
type localNode struct {
	*Group
	local atomic.Int64
}

func newLocalNode(t *testing.T, rdb redis.UniversalClient, o Options) *localNode {
	t.Helper()
	n := &localNode{}
	o.Hooks.Hit = func(key string, _ time.Duration, local bool) {
		if local {
			n.local.Add(1)
		}
	}
	n.Group = newGroup(t, rdb, o)
	return n
}

// waitLocal returns once n serves a hit from its tier: the tier is on
// (its report connections confirmed).
func waitLocal(t *testing.T, n *localNode) {
	t.Helper()
	load := func(context.Context) ([]byte, error) { return []byte("probe"), nil }
	redistest.Eventually(t, 10*time.Second, "the in-process tier on", func() bool {
		before := n.local.Load()
		for range 2 { // the first keeps the copy (a short LocalTTL may end it soon)
			if _, err := n.Get(ctxT(t), localProbe, load); err != nil {
				t.Fatal(err)
			}
		}
		return n.local.Load() > before
	})
}

// read is one call of a reader: when it began and ended, and the version
// it got (-1: an error).
type read struct {
	start, end time.Time
	v          int
}

// version parses a value "v<n>".
func version(b []byte) int {
	n, err := strconv.Atoi(string(b[1:]))
	if len(b) < 2 || err != nil {
		return -1
	}
	return n
}

// readers runs n goroutines calling node for key until stop is closed,
// and returns what each call got. With pause, each waits 10µs between
// calls, as a request handler waits for its client: goroutines that do
// nothing but local hits on every core leave the reports' goroutine to
// Go's scheduler, which polls the network only every 10ms then
// (BenchmarkLocalCoherence measures both).
func readers(t *testing.T, node *localNode, key string, load LoadFunc, n int, pause bool, stop <-chan struct{}) func() []read {
	var wg sync.WaitGroup
	out := make([][]read, n)
	for w := range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := read{start: time.Now()}
				v, err := node.Get(context.Background(), key, load)
				r.end, r.v = time.Now(), -1
				if err == nil {
					r.v = version(v)
				}
				out[w] = append(out[w], r)
				if !pause {
					continue
				}
				p := time.NewTimer(10 * time.Microsecond)
				select {
				case <-p.C:
				case <-stop:
					p.Stop()
				}
			}
		})
	}
	return func() []read {
		wg.Wait()
		return slices.Concat(out...)
	}
}

// TestLocalTierCoherent: node A changes a key 1000 times (an Invalidate,
// then a fill of the next version) while four goroutines of node B read
// it, mostly from B's tier, paced as request handlers are or spinning on
// every core. Once A's Invalidate of version i has returned, no read of B
// that begins more than LocalLag after gets a version before i; and with
// TrackAll, since the report is on B's host before the return, none that
// begins at once does either, before B's report goroutine has run: no
// change is read stale after it returned (the fence's quiet check, whose
// one kernel check serves the hits of the next tier.Window: with 20 µs,
// spinning readers read 1-10 of the 1,000 changes stale in every run).
// The tier serves copies for a minute here, so a tier bounded by LocalTTL
// alone fails too. Standalone and on the 3-master cluster.
func TestLocalTierCoherent(t *testing.T) {
	for _, mode := range []Tracking{TrackAll, TrackHeld} {
		t.Run(map[Tracking]string{TrackAll: "all", TrackHeld: "held"}[mode], func(t *testing.T) {
			testLocalTierCoherent(t, mode, true)
		})
	}
	t.Run("all/spinning", func(t *testing.T) { testLocalTierCoherent(t, TrackAll, false) })
}

// testLocalTierCoherent is TestLocalTierCoherent with tracking mode, B's
// readers paced or spinning: with TrackHeld, Redis sends a writer's reply
// before the report of its change, so only the LocalLag bound holds, not
// the at-once of TrackAll.
func testLocalTierCoherent(t *testing.T, mode Tracking, paced bool) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Cleanup(noLeaks(t)) // after the Groups' Close: cleanups run last first
		const changes = 1000
		ns := redistest.Key(t) + ":"
		o := Options{Namespace: ns, LocalEntries: 1000, LocalTTL: time.Minute, FreshFor: time.Hour, LocalTracking: mode}
		a := newLocalNode(t, rdb, o)
		b := newLocalNode(t, otherClient(t, rdb), o)
		waitLocal(t, a)
		waitLocal(t, b)
		grace := b.opts.LocalLag // the bound the tier guarantees

		key := "hot"
		var cur atomic.Int64 // the version every load returns now
		load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(cur.Load(), 10)), nil }
		if _, err := a.Get(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		collect := readers(t, b, key, load, 4, paced, stop)
		changed := make([]time.Time, changes+1) // when A's change to version i returned
		for i := 1; i <= changes; i++ {
			cur.Store(int64(i))
			if err := a.Invalidate(ctxT(t), key); err != nil {
				t.Fatal(err)
			}
			changed[i] = time.Now()
			if _, err := a.Get(ctxT(t), key, load); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		reads := collect()

		// For each read, the last change that returned before it began:
		// it must not get an older version.
		late, stale := 0, make([]time.Duration, changes+1)
		for _, r := range reads {
			j, _ := slices.BinarySearchFunc(changed[1:], r.start.Add(-grace), func(c, at time.Time) int { return c.Compare(at) })
			// changed[1:j+1] returned before r.start (less grace): version >= j.
			if r.v >= 0 && r.v < j {
				if late++; late <= 5 {
					t.Errorf("B served version %d at %v after the Invalidate of version %d returned on A", r.v, r.start.Sub(changed[j]), j)
				}
			}
			// How long after the change to r.v+1 did B still serve r.v?
			if n := r.v + 1; r.v >= 0 && n <= changes && r.start.After(changed[n]) {
				stale[n] = max(stale[n], r.start.Sub(changed[n]))
			}
		}
		if late > 0 {
			t.Errorf("%d of %d reads of B served a version older than one whose Invalidate had returned on A before the read began", late, len(reads))
		}
		readStale := 0 // the changes read stale after they returned
		for _, d := range stale {
			if d > 0 {
				readStale++
			}
		}
		slices.Sort(stale)
		t.Logf("%d reads of B, %d from its tier; %d of %d changes read stale after they returned, up to p50 %v, p99 %v, max %v after A's Invalidate returned",
			len(reads), b.local.Load(), readStale, changes, stale[changes/2], stale[changes*99/100], stale[changes])
		if readStale > 0 && mode == TrackAll {
			t.Errorf("%d of %d changes read stale after they returned (up to %v after): the quiet check does not hold", readStale, changes, stale[changes])
		}
		// Not a speed check: a tier that served nothing would read
		// nothing stale. Each change drops B's copy and B's next read
		// goes to Redis, so on a loaded machine (CI's packages run side
		// by side) fewer reads find one: 233 of 945 in one run.
		if b.local.Load() < int64(len(reads)/8) {
			t.Errorf("B served %d of %d reads from its tier, want an eighth or more", b.local.Load(), len(reads))
		}
	})
}

// TestLocalTierMonotonic: node A fills a key with a new version again
// and again (its refreshes) while eight goroutines of node B read it.
// No call of B gets a version older than one a call of B that ended
// before it began got: a GET's reply that arrives late must not put a
// replaced value back into B's tier. B's copies live 1ms (LocalTTL), so
// that B reads Redis often, as it would with many keys. Standalone and
// cluster.
func TestLocalTierMonotonic(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Cleanup(noLeaks(t)) // after the Groups' Close: cleanups run last first
		ns := redistest.Key(t) + ":"
		o := Options{Namespace: ns, LocalEntries: 1000, LocalTTL: time.Millisecond, FreshFor: time.Hour}
		a := newLocalNode(t, rdb, o)
		b := newLocalNode(t, otherClient(t, rdb), o)
		waitLocal(t, b)
		key := "hot"
		var cur atomic.Int64
		load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(cur.Load(), 10)), nil }
		if _, err := a.Get(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		collect := readers(t, b, key, load, 8, false, stop)
		for i := 1; i <= 1000; i++ {
			cur.Store(int64(i))
			// A refill under a fresh lease (as a refresh stores): the
			// read script's forced lease, then the fill script.
			nm := a.names(key)
			rr, err := a.read(ctxT(t), nm, true)
			if err != nil || rr.x <= 0 {
				t.Fatalf("lease: %v %d", err, rr.x)
			}
			a.store(ctxT(t), key, nm, fillSpec{fence: rr.x, value: []byte("v" + strconv.Itoa(i)), fresh: time.Hour, stale: time.Minute, mode: "w"})
		}
		close(stop)
		checkMonotonic(t, collect())
	})
}

// checkMonotonic fails t for each read that got a version older than one
// a read that ended before it began got.
func checkMonotonic(t *testing.T, reads []read) {
	t.Helper()
	ended := slices.Clone(reads)
	slices.SortFunc(ended, func(a, b read) int { return a.end.Compare(b.end) })
	slices.SortFunc(reads, func(a, b read) int { return a.start.Compare(b.start) })
	best, j, bad := -1, 0, 0
	for _, r := range reads {
		for ; j < len(ended) && ended[j].end.Before(r.start); j++ {
			best = max(best, ended[j].v)
		}
		if r.v >= 0 && r.v < best {
			if bad++; bad <= 5 {
				t.Errorf("a call got v%d after a call that ended before it began got v%d", r.v, best)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d calls went back in time", bad, len(reads))
	}
}

// otherClient returns a client of its own to the server(s) rdb talks to:
// another node's.
func otherClient(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		c = redis.NewClient(&redis.Options{Addr: o.Addr, Password: o.Password, TLSConfig: o.TLSConfig, ContextTimeoutEnabled: true})
	case *redis.ClusterClient:
		o := r.Options()
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.Addrs, Password: o.Password, TLSConfig: o.TLSConfig, ContextTimeoutEnabled: true})
	default:
		t.Fatalf("client %T", rdb)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FuzzEntryName: the reports of Redis name keys; isEntryName tells a key's
// entry from its other names (lease, fence, waiters, invalidation) and
// from a tag's, whatever bytes the key holds.
func FuzzEntryName(f *testing.F) {
	for _, k := range []string{"k", "", "{", "}", "{}", "{t}x", "a{t}b:lease", "x}/3:abc", "%7D", "{t}/1:x", "{ab}/5:ab:lease"} {
		f.Add(k)
	}
	g := &Group{opts: Options{Namespace: "ns:"}}
	f.Fuzz(func(t *testing.T, key string) {
		nm := g.names(key)
		if !tier.IsEntryName("ns:{", nm.entry) {
			t.Fatalf("key %q: entry %q not recognized", key, nm.entry)
		}
		for _, other := range nm.keys[1:] {
			if tier.IsEntryName("ns:{", other) {
				t.Fatalf("key %q: %q taken for an entry", key, other)
			}
		}
		if tier.IsEntryName("other:{", nm.entry) {
			t.Fatalf("key %q: entry %q of another namespace taken", key, nm.entry)
		}
	})
}

// TestLocalTierServesStale: while a stale value is refreshed, every node
// serves it from its in-process tier at hit latency (Stale, no Redis
// command for most calls), never past its stale-until (its Age stays
// within FreshFor+StaleFor), and drops it the moment the refresh's fill
// lands (the report), on the refreshing node and on the other.
func TestLocalTierServesStale(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Cleanup(noLeaks(t))
		ns := redistest.Key(t) + ":"
		const fresh, stale = 100 * time.Millisecond, time.Minute
		o := Options{Namespace: ns, LocalEntries: 1000, FreshFor: fresh, StaleFor: stale, Jitter: Disabled}
		a := newLocalNode(t, rdb, o)
		bc := otherClient(t, rdb)
		counter := &cmdCounter{}
		bc.AddHook(counter)
		b := newLocalNode(t, bc, o)
		waitLocal(t, a)
		waitLocal(t, b)
		key := "hot"
		if _, err := a.Get(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v1"), nil }); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		refresh := func(context.Context) ([]byte, error) { <-release; return []byte("v2"), nil }
		// Once v1 is stale, B's read wins the lease and refreshes in the
		// background (the refresh waits for release).
		redistest.Eventually(t, 10*time.Second, "v1 served stale", func() bool {
			r, err := b.Do(ctxT(t), key, refresh)
			return err == nil && r.Status == Stale
		})
		for _, n := range []*localNode{b, a} {
			before := counter.n.Load()
			const calls = 200
			for range calls {
				r, err := n.Do(ctxT(t), key, refresh)
				if err != nil || r.Status != Stale || string(r.Value) != "v1" {
					t.Fatalf("during the refresh: %q %v %v, want v1 stale", r.Value, r.Status, err)
				}
				if r.Age > fresh+stale {
					t.Fatalf("served at age %v, past its stale-until", r.Age)
				}
			}
			if n == b {
				// A read of Redis per staleLocal at most, and a few for a
				// slow machine.
				if got := counter.n.Load() - before; got > 20 {
					t.Errorf("%d Redis commands for %d stale calls, want most served from the tier", got, calls)
				}
			}
		}
		close(release)
		for name, n := range map[string]*localNode{"refreshing node": b, "other node": a} {
			redistest.Eventually(t, 10*time.Second, name+" serving the refreshed value", func() bool {
				r, err := n.Do(ctxT(t), key, refresh)
				if err != nil {
					t.Fatal(err)
				}
				return string(r.Value) == "v2" && r.Status == Hit
			})
		}
	})
}

// replyHolder is a hook that, once armed, holds back the reply of the next
// script call after Redis ran it: a read answered, whose reply is late.
type replyHolder struct {
	armed   atomic.Bool
	held    chan struct{} // closed when a reply is held
	release chan struct{}
}

func (h *replyHolder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replyHolder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && h.armed.CompareAndSwap(true, false) {
			close(h.held)
			<-h.release
		}
		return err
	}
}
func (h *replyHolder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestJoinedReadNotOlder: a call that joins a read sent before it began
// (the process's singleflight) does not take that read's value when a
// newer one was returned since: a read of the key answers v1, its reply
// held back; another node fills v2; a Peek on this node returns v2; then
// a call joins the held read. Once the reply lands, the read's own caller
// gets v1 (it began before v2 was returned) and the joiner v2.
func TestJoinedReadNotOlder(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := redistest.Key(t) + ":"
	o := Options{Namespace: ns, LocalEntries: 1000, LocalTTL: time.Millisecond, FreshFor: time.Hour}
	a := newGroup(t, rdb, o)
	bc := otherClient(t, rdb)
	h := &replyHolder{held: make(chan struct{}), release: make(chan struct{})}
	bc.AddHook(h)
	b := newGroup(t, bc, o)
	waitTier(t, b)
	key := "k"
	value := func(v string) LoadFunc { return func(context.Context) ([]byte, error) { return []byte(v), nil } }
	if _, err := a.Get(ctxT(t), key, value("v1")); err != nil {
		t.Fatal(err)
	}
	var joined atomic.Int64
	b.testJoined = func(string) { joined.Add(1) }
	h.armed.Store(true)
	// get calls B's Get in a goroutine of its own and delivers its value.
	get := func() <-chan string {
		out := make(chan string, 1)
		go func() {
			v, err := b.Get(ctxT(t), key, nil2Loader(t))
			if err != nil {
				t.Error(err)
			}
			out <- string(v)
		}()
		return out
	}
	first := get()
	<-h.held // the read ran in Redis: it answered v1
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctxT(t), key, value("v2")); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Peek(ctxT(t), key); err != nil || string(r.Value) != "v2" {
		t.Fatalf("Peek after the refill: %q %v", r.Value, err)
	}
	// Its copy lives 1 ms (LocalTTL): past it, a call reads Redis, and
	// joins the read in flight.
	redistest.Eventually(t, 10*time.Second, "the Peek's copy gone", func() bool { _, _, ok := b.loc.Get(key); return !ok })
	second := get()
	redistest.Eventually(t, 10*time.Second, "the second call in the held read's flight", func() bool { return joined.Load() == 2 })
	close(h.release)
	if v := <-first; v != "v1" {
		t.Errorf("the held read's own caller got %q, want v1", v)
	}
	if v := <-second; v != "v2" {
		t.Errorf("a call that began after v2 was returned got %q from a read sent before it began", v)
	}
}

// TestLocalTierOffWithReplicaReads: a cluster client that may read from
// replicas (ReadOnly, RouteByLatency, RouteRandomly) gets no in-process
// tier. A replica lags its master, and only masters are listened to: a
// read answered by a replica after the report of a change was applied
// would keep the replaced value until LocalTTL (found by an outside
// attack, with a replica held back by CLIENT PAUSE WRITE).
func TestLocalTierOffWithReplicaReads(t *testing.T) {
	for _, c := range []struct {
		name     string
		set      func(*redis.ClusterOptions)
		replicas bool
	}{
		{"ReadOnly", func(o *redis.ClusterOptions) { o.ReadOnly = true }, true},
		{"RouteByLatency", func(o *redis.ClusterOptions) { o.RouteByLatency = true }, true},
		{"RouteRandomly", func(o *redis.ClusterOptions) { o.RouteRandomly = true }, true},
		{"masters only", func(*redis.ClusterOptions) {}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(t, redistest.SharedCluster(t).Client(t, c.set), Options{Namespace: redistest.Key(t) + ":", LocalEntries: 100})
			if on := g.loc != nil; on == c.replicas {
				t.Errorf("in-process tier on: %v, want %v", on, !c.replicas)
			}
		})
	}
}

// TestLocalTierSentinel: behind Sentinel (a failover client) the tier
// serves hits from memory, its report connections are fenced (the
// failover client's dialer returns a TCP connection), and once node A's
// Invalidate and fill of a new version have returned, node B's next read
// gets the new version at once, 200 times.
func TestLocalTierSentinel(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	t.Cleanup(noLeaks(t))
	o := Options{Namespace: redistest.Key(t) + ":", LocalEntries: 1000, LocalTTL: time.Minute, FreshFor: time.Hour}
	a := newLocalNode(t, st.FailoverClient(t), o)
	b := newLocalNode(t, st.FailoverClient(t), o)
	waitLocal(t, a)
	waitLocal(t, b)
	if n, w := b.loc.Watched(); n == 0 || w != n {
		t.Errorf("%d of B's %d report connections watched by the fence behind Sentinel; want all", w, n)
	}
	key := "hot"
	var cur atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(cur.Load(), 10)), nil }
	for i := range 200 {
		before := b.local.Load()
		redistest.Eventually(t, 10*time.Second, "B holding version i", func() bool {
			if _, err := b.Get(ctxT(t), key, load); err != nil {
				t.Fatal(err)
			}
			return b.local.Load() > before
		})
		cur.Store(int64(i + 1))
		if err := a.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Get(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Get(ctxT(t), key, load); err != nil || string(got) != "v"+strconv.Itoa(i+1) {
			t.Fatalf("round %d: B got %q %v after A's change to v%d returned", i, got, err, i+1)
		}
	}
	if n := b.local.Load(); n < 200 {
		t.Errorf("B served %d reads from its tier, want one each round at least", n)
	}
}

// TestLocalTierTLS: over TLS the fence cannot see the records TLS has
// buffered, so the report connections are left unwatched and the tier
// works as before the fence: it serves from memory, and a change made by
// another node is dropped when its report is applied.
func TestLocalTierTLS(t *testing.T) {
	redistest.NeedTLS(t) // the CI matrix's servers are built without it
	srv := redistest.Start(t, redistest.WithTLS())
	t.Cleanup(noLeaks(t))
	o := Options{Namespace: redistest.Key(t) + ":", LocalEntries: 1000, LocalTTL: time.Minute, FreshFor: time.Hour}
	a := newLocalNode(t, srv.Client(t), o)
	b := newLocalNode(t, srv.Client(t), o)
	waitLocal(t, a)
	waitLocal(t, b)
	if n, w := b.loc.Watched(); n == 0 || w != 0 {
		t.Errorf("%d of B's %d report connections over TLS watched by the fence; want none", w, n)
	}
	key := "hot"
	var cur atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(cur.Load(), 10)), nil }
	for range 2 {
		if _, err := b.Get(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
	}
	cur.Store(1)
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 5*time.Second, "B to drop its copy", func() bool {
		got, err := b.Get(ctxT(t), key, load)
		return err == nil && string(got) == "v1"
	})
}

// redisInfo returns INFO server of one node of rdb (a master of a
