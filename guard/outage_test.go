package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// outageRig is a fleet of Groups on one redis-server, paced callers on a
// set of hot keys, and an origin that counts its loads.
type outageRig struct {
	nodes []*Group
	keys  []string
	loads atomic.Int64

	mu    sync.Mutex
	calls []outageCall
}

// outageCall is one call: when it began, how long it took, how it ended.
type outageCall struct {
	at   time.Time
	took time.Duration
	err  error
}

func (r *outageRig) load(ctx context.Context) ([]byte, error) {
	r.loads.Add(1)
	select {
	case <-time.After(20 * time.Millisecond): // the origin's query
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []byte("value"), nil
}

// run drives callers paced callers until stop, each calling a random key
// on a random node every pace.
func (r *outageRig) run(callers int, pace time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			t := time.NewTicker(pace)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				g := r.nodes[rng.IntN(len(r.nodes))]
				key := r.keys[rng.IntN(len(r.keys))]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				_, err := g.Get(ctx, key, r.load)
				cancel()
				r.mu.Lock()
				r.calls = append(r.calls, outageCall{at: start, took: time.Since(start), err: err})
				r.mu.Unlock()
			}
		})
	}
	return &wg
}

// between returns the calls that began in [from, to).
func (r *outageRig) between(from, to time.Time) []outageCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []outageCall
	for _, c := range r.calls {
		if !c.at.Before(from) && c.at.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

func p50(calls []outageCall) time.Duration {
	d := make([]time.Duration, len(calls))
	for i, c := range calls {
		d[i] = c.took
	}
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2]
}

// TestRedisOutageServesFromMemory kills Redis (SIGKILL) under a paced load
// of three Groups on 20 hot keys, and restarts it on the same port 6s
// later. While it is down, each node serves what it holds in memory and
// refreshes a key at most once per FreshFor: the loads follow the keys
// and nodes, not the rate of calls, no call fails, and calls take hit
// latency. Once it is back, the fleet loads each key about once per
// refresh again.
func TestRedisOutageServesFromMemory(t *testing.T) {
	const (
		nodes    = 3
		keys     = 20
		freshFor = 2 * time.Second
		outage   = 6 * time.Second
	)
	srv := redistest.Start(t)
	r := &outageRig{}
	for i := range keys {
		r.keys = append(r.keys, fmt.Sprintf("hot:%d", i))
	}
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: freshFor, StaleFor: time.Minute,
		RedisTimeout: 250 * time.Millisecond, LocalEntries: 1000}
	for range nodes {
		g, err := New(srv.Client(t), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		r.nodes = append(r.nodes, g)
	}
	stop := make(chan struct{})
	wg := r.run(24, 5*time.Millisecond, stop)
	defer func() { close(stop); wg.Wait() }()

	// Warm: every key held in memory on every node.
	redistest.Eventually(t, 20*time.Second, "every hot key held by every node's tier", func() bool {
		for _, g := range r.nodes {
			if g.loc.Len() < keys {
				return false
			}
		}
		return true
	})
	killed := time.Now()
	before := r.loads.Load()
	srv.Kill(t)
	time.Sleep(outage) // the outage's length: the condition under test
	during := r.loads.Load() - before
	srv.Restart(t)
	back := time.Now()
	afterBack := r.loads.Load()
	prev := afterBack
	for i := range 10 {
		time.Sleep(500 * time.Millisecond)
		n := r.loads.Load()
		t.Logf("after %v: %d loads", time.Duration(i+1)*500*time.Millisecond, n-prev)
		prev = n
	}
	after := r.loads.Load() - afterBack

	calls := r.between(killed, back)
	failed := 0
	for _, c := range calls {
		if c.err != nil {
			failed++
		}
	}
	limit := int64(nodes * keys * (int(outage/freshFor) + 2))
	t.Logf("outage: %d calls, %d loads (limit %d), p50 %v, %d failed; after: %d loads in 5s",
		len(calls), during, limit, p50(calls), failed, after)
	if during > limit {
		t.Errorf("%d loads during a %v outage; want at most %d (nodes x keys x (outage/FreshFor + 2))", during, outage, limit)
	}
	if d := p50(calls); d > 3*time.Millisecond {
		t.Errorf("p50 of the calls during the outage %v; want at most 3ms", d)
	}
	if failed > 0 {
		t.Errorf("%d of %d calls failed during the outage; want none", failed, len(calls))
	}
	cycles := 5 * time.Second / freshFor
	if maxAfter := int64(float64(keys) * 1.5 * float64(cycles+1)); after > maxAfter {
		t.Errorf("%d loads in the 5s after Redis came back; want at most %d (1.5 per key per refresh cycle)", after, maxAfter)
	}
}

// TestRedisOutageBatchServesFromMemory: GetMany during an outage serves
// the keys the node holds in memory without loading them, refreshes each
// stale one once (in one background loader call), and loads only the keys
// it holds nothing of.
func TestRedisOutageBatchServesFromMemory(t *testing.T) {
	srv := redistest.Start(t)
	const freshFor = 2 * time.Second
	g := newGroup(t, srv.Client(t), Options{FreshFor: freshFor, StaleFor: time.Minute, Jitter: Disabled,
		LocalEntries: 100, RedisTimeout: 250 * time.Millisecond})
	var loads atomic.Int64
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		loads.Add(int64(len(keys)))
		out := map[string][]byte{}
		for _, k := range keys {
			out[k] = []byte("v:" + k)
		}
		return out, nil
	}
	held := []string{"a", "b", "c"}
	if _, err := g.GetMany(ctxT(t), held, load); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the keys held by the tier", func() bool {
		if _, err := g.GetMany(ctxT(t), held, load); err != nil {
			t.Fatal(err)
		}
		return g.loc.Len() == len(held)
	})
	srv.Kill(t)
	before := loads.Load()
	for range 50 {
		got, err := g.GetMany(ctxT(t), append([]string{"new"}, held...), load)
		if err != nil || len(got) != 4 {
			t.Fatalf("GetMany during the outage: %d values, %v", len(got), err)
		}
	}
	if n := loads.Load() - before; n != 1 {
		t.Errorf("%d keys loaded by 50 batches during the outage; want 1 (the key held nothing of)", n)
	}
	// Past the fresh window: the held keys are served stale and refreshed
	// once, together (the new key is not asked for again).
	redistest.Eventually(t, 10*time.Second, "the held keys refreshed once", func() bool {
		if _, err := g.GetMany(ctxT(t), held, load); err != nil {
			t.Fatal(err)
		}
		return loads.Load()-before >= 1+int64(len(held))
	})
	for range 50 { // calls that must not refresh again within FreshFor
		if _, err := g.GetMany(ctxT(t), held, load); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load() - before; n != 1+int64(len(held)) {
		t.Errorf("%d keys loaded; want the new key once and each held key refreshed once", n)
	}
}
