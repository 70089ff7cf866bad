package guard

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/outagetest"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestRedisOutageServesFromMemory kills Redis (SIGKILL) under a paced load
// of three Groups on 20 hot keys, and restarts it on the same port 6s
// later. While it is down, each node serves what it holds in memory and
// refreshes a key at most once per FreshFor: the loads follow the keys
// and nodes, not the rate of calls, no call fails, and calls take hit
// latency. Once it is back, the fleet loads each key about once per
// refresh again.
func TestRedisOutageServesFromMemory(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	load := func(ctx context.Context) ([]byte, error) {
		loads.Add(1)
		select {
		case <-time.After(20 * time.Millisecond): // the origin's query
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("value"), nil
	}
	s := outagetest.Scenario{Nodes: 3, Keys: 20, FreshFor: 2 * time.Second, Outage: 6 * time.Second,
		Callers: 24, Pace: 5 * time.Millisecond, Loads: &loads}
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: s.FreshFor, StaleFor: time.Minute,
		RedisTimeout: 250 * time.Millisecond, LocalEntries: 1000}
	var nodes []*Group
	for range s.Nodes {
		g, err := New(srv.Client(t), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		nodes = append(nodes, g)
	}
	s.Call = func(ctx context.Context, node, key int) error {
		_, err := nodes[node].Get(ctx, "hot:"+strconv.Itoa(key), load)
		return err
	}
	s.Held = func() bool {
		for _, g := range nodes {
			if g.loc.Len() < s.Keys {
				return false
			}
		}
		return true
	}
	s.Check(t, outagetest.Run(t, srv, s))
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
