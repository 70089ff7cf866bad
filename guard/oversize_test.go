package guard

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestOversizeLoadsOncePerNode: a value over MaxValueBytes costs the
// origin at most one load per node per refresh, however many calls ask.
// Before the fix every call loaded it (a 9 MiB value: 46 loads in 3s from
// two nodes).
func TestOversizeLoadsOncePerNode(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var loads atomic.Int64
	big := bytes.Repeat([]byte("x"), 4096)
	load := func(context.Context) ([]byte, error) { loads.Add(1); return big, nil }
	nodes := []*Group{
		newGroup(t, rdb, Options{MaxValueBytes: 1024}),
		newGroup(t, rdb, Options{MaxValueBytes: 1024}),
	}
	key := redistest.Key(t)
	for round := range 3 {
		for n, g := range nodes {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					r, err := g.Do(ctxT(t), key, load)
					if err != nil || !bytes.Equal(r.Value, big) {
						t.Errorf("round %d node %d: %v %d bytes %v; want the value", round, n, r.Status, len(r.Value), err)
					}
				})
			}
			wg.Wait()
		}
	}
	if n := loads.Load(); n > int64(len(nodes)) {
		t.Fatalf("%d origin loads of one oversized value from %d nodes; want at most one per node", n, len(nodes))
	}
}

// TestOversizeRefreshEpochs: an oversized value is reported (Hooks.Oversize,
// Result.Oversize), stored as a marker, served from each node's copy, and
// reloaded by each node once per refresh: when the marker goes stale one
// node refreshes it under the lease while the copies are served stale, and
// the new marker retires every copy. Invalidate retires them too. Batches
// follow the same rules.
func TestOversizeRefreshEpochs(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var loads, reported atomic.Int64
	big := bytes.Repeat([]byte("y"), 2048)
	load := func(context.Context) ([]byte, error) { loads.Add(1); return big, nil }
	var sizes sync.Map
	o := Options{MaxValueBytes: 1024, FreshFor: 300 * time.Millisecond, StaleFor: time.Minute, Jitter: Disabled,
		Hooks: Hooks{Oversize: func(key string, size int) { reported.Add(1); sizes.Store(key, size) }}}
	a, b := newGroup(t, rdb, o), newGroup(t, rdb, o)
	key := redistest.Key(t)

	r, err := a.Do(ctxT(t), key, load)
	if err != nil || r.Status != Miss || !r.Oversize || !bytes.Equal(r.Value, big) {
		t.Fatalf("first load: %v oversize=%v %v", r.Status, r.Oversize, err)
	}
	if size, _ := sizes.Load(key); reported.Load() != 1 || size != len(big) {
		t.Fatalf("Oversize hook: %d reports, size %v; want 1 of %d", reported.Load(), size, len(big))
	}
	if e := entryOf(t, rdb, a, key); !e.Oversize || len(e.Value) != 0 {
		t.Fatalf("stored %+v; want an oversize marker without payload", e)
	}
	for _, g := range []*Group{a, b, b} {
		if r, err := g.Do(ctxT(t), key, load); err != nil || !r.Oversize || !bytes.Equal(r.Value, big) {
			t.Fatalf("%v oversize=%v %v; want the value", r.Status, r.Oversize, err)
		}
	}
	if n := loads.Load(); n != 2 {
		t.Fatalf("%d loads after both nodes asked; want 2 (one per node)", n)
	}

	// The marker goes stale: one refresh fleet-wide, then one load per
	// node for the new marker.
	redistest.Eventually(t, 5*time.Second, "a stale answer", func() bool {
		r, err := a.Do(ctxT(t), key, load)
		return err == nil && r.Status == Stale && bytes.Equal(r.Value, big)
	})
	redistest.Eventually(t, 5*time.Second, "the refreshed marker", func() bool {
		r, err := b.Do(ctxT(t), key, load)
		return err == nil && r.Status != Stale && bytes.Equal(r.Value, big)
	})
	if n := loads.Load(); n != 4 {
		t.Fatalf("%d loads after a refresh; want 4 (the refresh, and node b's copy of it)", n)
	}

	// Invalidate on one node retires the copies of every node.
	if err := a.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	before := loads.Load()
	for _, g := range []*Group{b, a, b} {
		if _, err := g.Do(ctxT(t), key, load); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load() - before; n != 2 {
		t.Fatalf("%d loads after Invalidate; want 2 (one per node)", n)
	}

	// Batches.
	bkey := redistest.Key(t, "batch")
	var batchLoads atomic.Int64
	bload := func(_ context.Context, keys []string) (map[string][]byte, error) {
		batchLoads.Add(1)
		return map[string][]byte{keys[0]: big}, nil
	}
	for _, g := range []*Group{a, a, b, b} {
		got, err := g.GetMany(ctxT(t), []string{bkey}, bload)
		if err != nil || !bytes.Equal(got[bkey], big) {
			t.Fatalf("GetMany: %d bytes, %v", len(got[bkey]), err)
		}
	}
	if n := batchLoads.Load(); n != 2 {
		t.Fatalf("%d batch loads; want 2 (one per node)", n)
	}
}

// TestGetManyOversizeKeysOneLoaderCall: 60 keys whose values are over
// MaxValueBytes, loaded by node A (Redis keeps markers, not the values);
// node B, which holds no copy, asks for all 60 in one GetMany. Its loader
// is called once for them (MaxBatch is 100), not once per key: the keys'
// flights share one call. Each key gets its own value.
func TestGetManyOversizeKeysOneLoaderCall(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		prefix := redistest.Key(t)
		keys := make([]string, 60)
		for i := range keys {
			keys[i] = prefix + ":" + strconv.Itoa(i)
		}
		big := func(k string) []byte { return bytes.Repeat([]byte(k), 2048/len(k)+1) }
		var calls atomic.Int64
		load := func(_ context.Context, ks []string) (map[string][]byte, error) {
			calls.Add(1)
			out := make(map[string][]byte, len(ks))
			for _, k := range ks {
				out[k] = big(k)
			}
			return out, nil
		}
		a := newGroup(t, rdb, Options{MaxValueBytes: 1024, FreshFor: time.Minute})
		if _, err := a.GetMany(ctxT(t), keys, load); err != nil {
			t.Fatal(err)
		}
		calls.Store(0)
		b := newGroup(t, rdb, Options{MaxValueBytes: 1024, FreshFor: time.Minute})
		got, err := b.GetMany(ctxT(t), keys, load)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !bytes.Equal(got[k], big(k)) {
				t.Fatalf("key %s: %d bytes, not its value", k, len(got[k]))
			}
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("node B: %d loader calls for a batch of %d oversize keys, want 1", n, len(keys))
		}
	})
}
