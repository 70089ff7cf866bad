package guard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/commit"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// gateHook holds the plain GETs of some Redis names until gate is closed,
// and counts the batches of hits the client sends.
type gateHook struct {
	names   map[string]bool
	entered chan struct{} // closed when every held GET reached the hook
	held    atomic.Int64
	gate    chan struct{}
	panics  bool         // a held GET panics when let go
	pipes   atomic.Int64 // batches sent: pipelines, and MGETs sent alone
	piped   atomic.Int64 // the hits in them (GETs, and the names of MGETs)
}

func newGateHook(names ...string) *gateHook {
	h := &gateHook{names: map[string]bool{}, entered: make(chan struct{}), gate: make(chan struct{})}
	for _, n := range names {
		h.names[n] = true
	}
	return h
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name, _ := args[len(args)-1].(string); cmd.Name() == "get" && len(args) == 2 && h.names[name] {
			if h.held.Add(1) == int64(len(h.names)) {
				close(h.entered)
			}
			select {
			case <-h.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			if h.panics {
				panic("hook panics")
			}
		}
		if cmd.Name() == "mget" {
			h.pipes.Add(1)
			h.piped.Add(int64(len(args) - 1))
		}
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		for _, c := range cmds {
			switch c.Name() {
			case "get":
				h.piped.Add(1)
			case "mget":
				h.piped.Add(int64(len(c.Args()) - 1))
			}
		}
		return next(ctx, cmds)
	}
}

// oneRoundTrip makes the hits of the Groups a test creates go out one
// round trip at a time (commit.Window 1), as the tests that hold one GET and
// count the callers queued behind it need.
func oneRoundTrip(t *testing.T) {
	old := commit.Window
	commit.Window = 1
	t.Cleanup(func() { commit.Window = old })
}

// hotKeys fills n keys through g, each with the value "v:"+key, and hits
// each once so that its hint is taken.
func hotKeys(t *testing.T, g *Group, n int) []string {
	t.Helper()
	keys := make([]string, n)
	cc, cluster := g.rdb.(*redis.ClusterClient)
	var master *redis.Client
	for i, j := 0, 0; i < n; j++ {
		keys[i] = redistest.Key(t, strconv.Itoa(j))
		if cluster {
			// One master's keys, in several slots: a master's hits
			// share its queue (commit.Shards).
			m, err := cc.MasterForKey(ctxT(t), g.names(keys[i]).entry)
			if err != nil {
				t.Fatal(err)
			}
			if master == nil {
				master = m
			} else if m != master {
				continue
			}
		}
		i++
	}
	for i := range keys {
		for _, want := range []Status{Miss, Hit} {
			r, err := g.Do(ctxT(t), keys[i], valueOf(keys[i]))
			if err != nil || r.Status != want {
				t.Fatalf("warm-up of %s: %v %v, want %v", keys[i], r.Status, err, want)
			}
		}
	}
	return keys
}

func valueOf(key string) LoadFunc {
	return func(context.Context) ([]byte, error) { return []byte("v:" + key), nil }
}

// queued waits until n callers are queued behind the GET in flight.
func queued(t *testing.T, g *Group, n int) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, strconv.Itoa(n)+" callers queued", func() bool {
		queued := 0
		g.hits.Each(func(h *commit.Hits) { queued += h.Queued() })
		return queued == n
	})
}

// TestHitBatching: the hits that arrive while a GET is in flight go out
// together when it is back (one MGET; on a cluster one MGET per slot, in a
// pipeline split by node), and every caller gets its own key's value. Then many
// callers hitting many keys at once each get their own values.
func TestHitBatching(t *testing.T) {
	oneRoundTrip(t)
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		// Correctness is the claim here, not latency: a RedisTimeout that
		// a loaded machine running -race cannot miss.
		g := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second})
		const n = 32
		keys := hotKeys(t, g, n)
		h := newGateHook(g.names(keys[0]).entry)
		rdb.AddHook(h)

		results := make([]Result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		do := func(i int) {
			wg.Go(func() { results[i], errs[i] = g.Do(ctxT(t), keys[i], nil2) })
		}
		do(0)
		<-h.entered // the lone caller's GET is in flight, held
		for i := 1; i < n; i++ {
			do(i)
		}
		queued(t, g, n-1)
		close(h.gate)
		wg.Wait()
		for i, r := range results {
			if errs[i] != nil || r.Status != Hit || string(r.Value) != "v:"+keys[i] {
				t.Errorf("caller %d: %v %q %v, want a hit of v:%s", i, r.Status, r.Value, errs[i], keys[i])
			}
		}
		if got, batches := h.piped.Load(), h.pipes.Load(); got != n-1 || batches != 1 {
			t.Errorf("%d hits batched in %d batches, want the %d queued in one", got, batches, n-1)
		}

		t.Run("herd", func(t *testing.T) {
			var wg sync.WaitGroup
			var bad atomic.Int64
			for i := range 4 * n {
				key := keys[i%n]
				wg.Go(func() {
					for range 50 {
						r, err := g.Do(ctxT(t), key, nil2)
						if err != nil || r.Status != Hit || string(r.Value) != "v:"+key {
							if bad.Add(1) == 1 {
								t.Errorf("%s: %v %q %v", key, r.Status, r.Value, err)
							}
						}
					}
				})
			}
			wg.Wait()
		})
	})
}

// TestHitBatchCallersLeave: queued callers whose ctx ends leave at once,
// while the GET ahead of them is still held, without a breaker verdict;
// the callers that stayed are answered, and the Group serves hits after.
func TestHitBatchCallersLeave(t *testing.T) {
	oneRoundTrip(t)
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var redisErrs atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{RedisError: func(string, error) { redisErrs.Add(1) }}})
		const n = 9
		keys := hotKeys(t, g, n)
		h := newGateHook(g.names(keys[0]).entry)
		rdb.AddHook(h)

		var wg sync.WaitGroup
		wg.Go(func() {
			if r, err := g.Do(ctxT(t), keys[0], nil2); err != nil || r.Status != Hit {
				t.Errorf("the held caller: %v %v", r.Status, err)
			}
		})
		<-h.entered
		ctx, cancel := context.WithCancel(ctxT(t))
		errs := make([]error, n)
		var left sync.WaitGroup
		for i := 1; i < n; i++ {
			if i%2 == 0 { // these stay
				wg.Go(func() {
					r, err := g.Do(ctxT(t), keys[i], nil2)
					if err != nil || string(r.Value) != "v:"+keys[i] {
						t.Errorf("caller %d that stayed: %q %v", i, r.Value, err)
					}
				})
				continue
			}
			left.Go(func() { _, errs[i] = g.Do(ctx, keys[i], nil2) })
		}
		queued(t, g, n-1)
		cancel()
		left.Wait() // while the GET ahead is still held
		for i := 1; i < n; i += 2 {
			if !errors.Is(errs[i], context.Canceled) {
				t.Errorf("caller %d that left: %v, want context.Canceled", i, errs[i])
			}
		}
		close(h.gate)
		wg.Wait()
		if g.br.Open() || redisErrs.Load() != 0 {
			t.Fatalf("callers that left counted against Redis: breaker open %v, %d Redis errors", g.br.Open(), redisErrs.Load())
		}
		for _, key := range keys {
			if r, err := g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit {
				t.Fatalf("after: %v %v", r.Status, err)
			}
		}
	})
}

// TestHitBatchLonePanics: a lone caller's GET that panics (a hook) still
// hands the callers queued behind it to a flusher.
func TestHitBatchLonePanics(t *testing.T) {
	oneRoundTrip(t)
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{})
	const n = 5
	keys := hotKeys(t, g, n)
	h := newGateHook(g.names(keys[0]).entry)
	h.panics = true
	rdb.AddHook(h)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			if recover() == nil {
				t.Error("the hook's panic did not reach its caller")
			}
		}()
		_, _ = g.Do(ctxT(t), keys[0], nil2)
	})
	<-h.entered
	for i := 1; i < n; i++ {
		wg.Go(func() {
			if r, err := g.Do(ctxT(t), keys[i], nil2); err != nil || string(r.Value) != "v:"+keys[i] {
				t.Errorf("caller %d queued behind the panic: %q %v", i, r.Value, err)
			}
		})
	}
	queued(t, g, n-1)
	close(h.gate)
	wg.Wait()
}

// TestHitBatchFrozenRedis: on a frozen server, callers queued behind a
// stalled GET each leave within RedisTimeout of their own start (not after
// the stalled GET and then their own batch), are served by the loader, and
// the breaker opens; after the thaw, hits resume. No goroutine is left. On
// a cluster the master of every key is frozen: its callers leave within
// the same bound, and that master's breaker opens.
func TestHitBatchFrozenRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		frozenHits(t, srv.Client(t), srv)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
		rdb := cl.Client(t)
		frozenHits(t, rdb, nil, func(keys []string) *redistest.Server { return cl.MasterFor(t, keys[0]) })
	})
}

// frozenHits freezes srv, or the server pick returns for the keys.
func frozenHits(t *testing.T, rdb redis.UniversalClient, srv *redistest.Server, pick ...func([]string) *redistest.Server) {
	defer noLeaks(t)()
	const timeout = 400 * time.Millisecond
	// LocalEntries Disabled: hits must reach the frozen server.
	g, opened := countingOpens(t, rdb, Options{RedisTimeout: timeout, BreakerCooldown: 200 * time.Millisecond, LocalEntries: Disabled})
	defer g.Close()
	const n = 16
	keys := hotKeys(t, g, n)
	if srv == nil {
		srv = pick[0](keys)
	}

	srv.Freeze(t)
	took := make([]time.Duration, n)
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	do := func(i int) {
		wg.Go(func() {
			start := time.Now()
			results[i], errs[i] = g.Do(ctxT(t), keys[i], valueOf(keys[i]))
			took[i] = time.Since(start)
		})
	}
	do(0) // keys[0] lives on the frozen server
	redistest.Eventually(t, 10*time.Second, "the lone GET in flight", func() bool {
		busy := false
		g.hits.Each(func(h *commit.Hits) { busy = busy || h.Busy() })
		return busy
	})
	for i := 1; i < n; i++ {
		do(i)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || string(results[i].Value) != "v:"+keys[i] {
			t.Errorf("caller %d: %v %q %v, want the value", i, results[i].Status, results[i].Value, errs[i])
		}
		// The bound is RedisTimeout plus scheduling on a loaded machine; a
		// caller that paid for the stalled GET ahead of it and then for its
		// own batch would take twice RedisTimeout.
		if took[i] >= 2*timeout {
			t.Errorf("caller %d took %v on a frozen Redis, RedisTimeout %v", i, took[i], timeout)
		}
	}
	// A standalone server's failures open the Group's breaker; on a
	// cluster, the frozen master's own breaker: the Group's waits for a
	// longer silence, which the other masters would break had a caller
	// keys of theirs (TestClusterFrozenMasterMixedCallers).
	open := opened.Load() > 0
	if g.masters != nil {
		open = g.masterOpen(ctxT(t), g.names(keys[0]).entry)
	}
	if results[0].Status != Degraded || !open {
		t.Errorf("the caller on the frozen server: %v; breaker open %v; want degraded and open", results[0].Status, open)
	}
	srv.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "hits after the thaw", func() bool {
		r, err := g.Do(ctxT(t), keys[0], valueOf(keys[0]))
		return err == nil && r.Status == Hit
	})
}

// TestHitBatchOff: with MaxHitBatch Disabled every hit is a GET of its
// own; a client with go-redis client-side caching is batched as any other
// (its reads go out in pipelines, which that cache does not answer).
func TestHitBatchOff(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if g := newGroup(t, rdb, Options{MaxHitBatch: Disabled}); g.hits.Any.Batching() {
		t.Error("MaxHitBatch Disabled still batches")
	}
	if g := newGroup(t, rdb, Options{}); !g.hits.Any.Batching() || g.hits.Any.Max() != defaultHitBatch {
		t.Errorf("default MaxHitBatch: %d, want a batcher of %d", g.hits.Any.Max(), defaultHitBatch)
	}
	csc := redistest.Shared(t).Client(t, func(o *redis.Options) {
		o.Protocol = 3
		o.ClientSideCacheConfig = &redis.ClientSideCacheConfig{MaxEntries: 100}
	})
	if g := newGroup(t, csc, Options{}); !g.hits.Any.Batching() {
		t.Error("a client-side caching client's hits are not batched (pipelines, which bypass that cache)")
	}
	if _, err := New(rdb, Options{MaxHitBatch: -2}); err == nil {
		t.Error("MaxHitBatch -2 accepted")
	}
}

// TestHitBatchWindow: two round trips of hits may be in flight at once
// (commit.Window): with two GETs held, the callers that come next queue, and
// go out together once one is back.
func TestHitBatchWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second})
		const n = 12
		keys := hotKeys(t, g, n)
		h := newGateHook(g.names(keys[0]).entry, g.names(keys[1]).entry)
		rdb.AddHook(h)
		var wg sync.WaitGroup
		do := func(i int) {
			wg.Go(func() {
				if r, err := g.Do(ctxT(t), keys[i], nil2); err != nil || r.Status != Hit || string(r.Value) != "v:"+keys[i] {
					t.Errorf("caller %d: %v %q %v", i, r.Status, r.Value, err)
				}
			})
		}
		do(0)
		do(1)
		<-h.entered // two lone GETs in flight
		for i := 2; i < n; i++ {
			do(i)
		}
		queued(t, g, n-2)
		close(h.gate)
		wg.Wait()
		if got := h.piped.Load(); got != n-2 {
			t.Errorf("%d hits batched, want the %d queued", got, n-2)
		}
	})
}

// TestHitBatchOneKey: concurrent hits of one key share its name in the
// batch's MGET, and each caller gets the value.
func TestHitBatchOneKey(t *testing.T) {
	oneRoundTrip(t)
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second})
	keys := hotKeys(t, g, 2)
	h := newGateHook(g.names(keys[0]).entry)
	rdb.AddHook(h)
	var wg sync.WaitGroup
	do := func(key string) {
		wg.Go(func() {
			if r, err := g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit || string(r.Value) != "v:"+key {
				t.Errorf("%v %q %v", r.Status, r.Value, err)
			}
		})
	}
	do(keys[0])
	<-h.entered
	for range 8 {
		do(keys[1])
	}
	queued(t, g, 8)
	close(h.gate)
	wg.Wait()
	if got := h.piped.Load(); got != 1 {
		t.Errorf("the batch of 8 hits of one key read %d names, want 1", got)
	}
}

// tryAgainHook answers every MGET of a pipeline with TRYAGAIN, as a node
// does while the slot's keys are split by a migration.
type tryAgainHook struct{ n atomic.Int64 }

type tryAgainErr struct{}

func (tryAgainErr) Error() string { return "TRYAGAIN Multiple keys request during rehashing of slot" }
func (tryAgainErr) RedisError()   {}

func (h *tryAgainHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *tryAgainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *tryAgainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "mget" {
				h.n.Add(1)
				c.SetErr(tryAgainErr{})
			}
		}
		return err
	}
}

// TestHitBatchTryAgain: on a cluster, a slot's MGET refused with TRYAGAIN
// (a migration splits its keys) is read again as GETs: its callers get
// their values, and the breaker hears nothing.
func TestHitBatchTryAgain(t *testing.T) {
	oneRoundTrip(t)
	rdb := redistest.SharedCluster(t).Client(t)
	var redisErrs atomic.Int64
	g := newGroup(t, rdb, Options{RedisTimeout: 10 * time.Second, Hooks: Hooks{RedisError: func(string, error) { redisErrs.Add(1) }}})
	const n = 6
	keys := hotKeys(t, g, n)
	gate := newGateHook(g.names(keys[0]).entry)
	rdb.AddHook(gate)
	ta := &tryAgainHook{}
	rdb.AddHook(ta)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if r, err := g.Do(ctxT(t), keys[i], nil2); err != nil || r.Status != Hit || string(r.Value) != "v:"+keys[i] {
				t.Errorf("caller %d: %v %q %v", i, r.Status, r.Value, err)
			}
		})
		if i == 0 {
			<-gate.entered
		}
	}
	queued(t, g, n-1)
	close(gate.gate)
	wg.Wait()
	if ta.n.Load() == 0 || redisErrs.Load() != 0 || g.br.Open() {
		t.Errorf("%d MGETs refused, %d Redis errors, breaker open %v; want refusals, no errors", ta.n.Load(), redisErrs.Load(), g.br.Open())
	}
}

// TestClusterMasterFrozenOthersServed: on a cluster with one master frozen,
// the keys of the other masters are still served by Redis, as hits, each
// within RedisTimeout, and the breaker stays closed. The frozen master's
// batches must not hold up the other masters' calls (a queue per master),
// and its failures, between the others' answers, must not open the breaker
// for every key. The frozen master's own keys are served without Redis
// once its breaker opened (masters.go), with no error: each of their
// callers waits RedisTimeout once, as the master stops answering, and
// again only for the master's probes (one per BreakerCooldown), not on
// every call.
func TestClusterMasterFrozenOthersServed(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	rdb := cl.Client(t)
	// A RedisTimeout well above a loaded machine's scheduling delays (a
	// hit took 322 ms once under -race with 300 ms), so that a call taking
	// it is one that waited on the frozen master.
	const (
		timeout   = time.Second
		cooldown  = time.Second
		frozenFor = 3 * time.Second
	)
	o, masterOpened := countMasterOpens(Options{RedisTimeout: timeout, BreakerCooldown: cooldown, LocalEntries: Disabled})
	g, opened := countingOpens(t, rdb, o)
	defer g.Close()
	masters, byMaster := keysOnTwoMasters(t, cl, g, 8)
	frozen, others := byMaster[0], byMaster[1]
	for _, key := range append(slices.Clone(frozen), others...) {
		for _, want := range []Status{Miss, Hit} {
			if r, err := g.Do(ctxT(t), key, valueOf(key)); err != nil || r.Status != want {
				t.Fatalf("warm-up of %s: %v %v, want %v", key, r.Status, err, want)
			}
		}
	}

	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var frozenMu sync.Mutex
	var frozenCalls int
	var frozenSlow, frozenFailed []string
	for i := range 8 { // the frozen master's callers, batching
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r, err := g.Do(ctxT(t), frozen[i], valueOf(frozen[i]))
				took := time.Since(start)
				frozenMu.Lock()
				frozenCalls++
				if err != nil || string(r.Value) != "v:"+frozen[i] {
					frozenFailed = append(frozenFailed, fmt.Sprintf("%s: %q %v %v", frozen[i], r.Value, r.Status, err))
				} else if took >= timeout {
					frozenSlow = append(frozenSlow, fmt.Sprintf("%s: %v", frozen[i], took))
				}
				frozenMu.Unlock()
			}
		})
	}
	var mu sync.Mutex
	var slow, notHit []string
	calls := 0
	for i := range 4 { // the other master's
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := others[(i+4*n)%len(others)]
				start := time.Now()
				r, err := g.Do(ctxT(t), key, valueOf(key))
				took := time.Since(start)
				mu.Lock()
				calls++
				if err != nil || r.Status != Hit {
					notHit = append(notHit, fmt.Sprintf("%s: %v %v after %v", key, r.Status, err, took))
				} else if took >= timeout {
					slow = append(slow, fmt.Sprintf("%s: %v", key, took))
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(frozenFor) // the condition under test: 3s of a frozen master
	close(stop)
	wg.Wait()
	t.Logf("%d calls of the other master's keys; %d of the frozen master's, %d of them slow", calls, frozenCalls, len(frozenSlow))
	if len(notHit) > 0 || len(slow) > 0 || opened.Load() != 0 {
		t.Errorf("while another master was frozen, of %d calls of this master's keys %d were no hit (first: %v) and %d took RedisTimeout or more (first: %v); the breaker opened %d times; want hits, in time, closed",
			calls, len(notHit), first(notHit), len(slow), first(slow), opened.Load())
	}
	// Each frozen caller once or twice as the master stopped (a call in
	// flight and one queued behind it), and one per probe; before the
	// master's breaker, nearly every call (52 of 59 in one run).
	maxSlow := 2*len(frozen) + int(frozenFor/cooldown) + 1
	if len(frozenFailed) > 0 || len(frozenSlow) > maxSlow || masterOpened.Load() == 0 {
		t.Errorf("of %d calls of the frozen master's keys %d failed (first: %v) and %d took RedisTimeout or more (first: %v), want none and at most %d; its breaker reported open %d times, want at least 1",
			frozenCalls, len(frozenFailed), first(frozenFailed), len(frozenSlow), first(frozenSlow), maxSlow, masterOpened.Load())
	}
	// Thawed, the master's keys are coordinated again: its probe closes
	// its breaker, and the reserve is emptied once the master answered
	// for a cooldown (clearReserve).
	masters[0].Thaw(t)
	for _, key := range frozen {
		redistest.Eventually(t, 10*time.Second, key+" served by Redis again", func() bool {
			r, err := g.Do(ctxT(t), key, valueOf(key))
			return err == nil && r.Status == Hit
		})
	}
	redistest.Eventually(t, 10*time.Second, "the reserve emptied once the master came back", func() bool {
		return g.reserve.Len() == 0
	})
}

// countingOpens returns a Group on rdb with o, and the count of the times
// its breaker opened. The caller closes it.
func countingOpens(t *testing.T, rdb redis.UniversalClient, o Options) (*Group, *atomic.Int64) {
	t.Helper()
	opened := new(atomic.Int64)
	o.Hooks.Breaker = func(open bool) {
		if open {
			opened.Add(1)
		}
	}
	g, err := New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	return g, opened
}

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// TestClusterMasterFrozenBatch: GetMany on a cluster with one master
// frozen. Its batches mix that master's keys with another's; once the
// frozen master's breaker opened, a batch no longer waits RedisTimeout for
// it (its keys are served without Redis, the other master's by Redis,
// and the Group's breaker stays closed), but for the master's probes, one
// per BreakerCooldown; every value is right.
func TestClusterMasterFrozenBatch(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	const (
		timeout   = 300 * time.Millisecond
		cooldown  = time.Second
		frozenFor = 2 * time.Second
	)
	g, opened := countingOpens(t, cl.Client(t), Options{RedisTimeout: timeout, BreakerCooldown: cooldown, LocalEntries: Disabled})
	defer g.Close()
	masters, byMaster := keysOnTwoMasters(t, cl, g, 4)
	keys := append(slices.Clone(byMaster[0]), byMaster[1]...)
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		vals := make(map[string][]byte, len(keys))
		for _, k := range keys {
			vals[k] = []byte("v:" + k)
		}
		return vals, nil
	}
	check := func(vals map[string][]byte, err error) string {
		if err != nil {
			return err.Error()
		}
		for _, k := range keys {
			if string(vals[k]) != "v:"+k {
				return fmt.Sprintf("%s: %q", k, vals[k])
			}
		}
		return ""
	}
	if bad := check(g.GetMany(ctxT(t), keys, load)); bad != "" {
		t.Fatalf("warm-up: %s", bad)
	}

	other := masters[1].Client(t)
	sum := func(m map[string]int64) (n int64) {
		for _, c := range m {
			n += c
		}
		return n
	}
	before := sum(commandCalls(t, other))
	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	calls := 0
	var slow, bad []string
	for start := time.Now(); time.Since(start) < frozenFor; calls++ {
		s := time.Now()
		vals, err := g.GetMany(ctxT(t), keys, load)
		took := time.Since(s)
		if b := check(vals, err); b != "" {
			bad = append(bad, b)
		} else if took >= timeout {
			slow = append(slow, took.String())
		}
	}
	// The other master's keys still go to Redis: at least one command per
	// batch (the INFO calls are two more).
	sent := sum(commandCalls(t, other)) - before - 2
	// BreakerFailures (3) batches as the master stopped, then its probes
	// (one per cooldown, twice that for a process too busy to judge).
	maxSlow := 3 + 2*(int(frozenFor/cooldown)+1)
	t.Logf("%d batches, %d slow; %d commands to the other master", calls, len(slow), sent)
	if len(bad) > 0 || len(slow) > maxSlow || opened.Load() != 0 || sent < int64(calls) {
		t.Errorf("of %d batches with a frozen master's keys %d were wrong (first: %v) and %d took RedisTimeout or more (%v), want none and at most %d; the breaker opened %d times, want 0; the other master's keys sent %d commands, want one a batch at least",
			calls, len(bad), first(bad), len(slow), slow, maxSlow, opened.Load(), sent)
	}
}

// TestClusterMasterBreakerFailover: a master frozen until its breaker
// opened (its keys served from the reserve), then replaced by its replica
// in a failover. The keys are served by the promoted replica, and the
// reserve is emptied: the replaced master's breaker, which no call will
// ever close, must not keep the values of the outage for good.
func TestClusterMasterBreakerFailover(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1, NodeTimeout: time.Minute})
	o, masterOpened := countMasterOpens(Options{RedisTimeout: 300 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond,
		LocalEntries: Disabled})
	g, _ := countingOpens(t, cl.Client(t), o)
	defer g.Close()
	masters, byMaster := keysOnTwoMasters(t, cl, g, 4)
	m, keys := masters[0], byMaster[0]
	all := func(want func(Result) bool) bool {
		ok := true
		for _, key := range keys {
			r, err := g.Do(ctxT(t), key, valueOf(key))
			if err != nil || string(r.Value) != "v:"+key {
				t.Fatalf("%s: %q %v", key, r.Value, err)
			}
			ok = ok && want(r)
		}
		return ok
	}
	all(func(Result) bool { return true })

	m.Freeze(t)
	defer m.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the frozen master's breaker open", func() bool {
		all(func(Result) bool { return true })
		return masterOpened.Load() > 0
	})
	if g.reserve.Len() == 0 {
		t.Fatal("the frozen master's keys are served, but the reserve holds nothing")
	}
	cl.Failover(t, cl.ReplicasOf(m)[0])
	redistest.Eventually(t, 20*time.Second, "the keys served by the promoted replica", func() bool {
		return all(func(r Result) bool { return r.Status == Hit })
	})
	redistest.Eventually(t, 10*time.Second, "the reserve emptied", func() bool {
		all(func(Result) bool { return true })
		return g.reserve.Len() == 0
	})
}

// keysOnTwoMasters returns two masters of cl and n keys of g on each (by
// the slot of the keys' Redis names).
func keysOnTwoMasters(t *testing.T, cl *redistest.Cluster, g *Group, n int) ([2]*redistest.Server, [2][]string) {
	t.Helper()
	var masters [2]*redistest.Server
	var keys [2][]string
	for j := 0; len(keys[0]) < n || len(keys[1]) < n; j++ {
		key := redistest.Key(t, strconv.Itoa(j))
		m := cl.MasterFor(t, g.names(key).entry)
		for i := range masters {
			if masters[i] == nil {
				masters[i] = m
			}
			if masters[i] == m {
				if len(keys[i]) < n {
					keys[i] = append(keys[i], key)
				}
				break
			}
		}
	}
	return masters, keys
}
