package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalHitsWaitForBarrier: a node whose report connection takes 2 ms
// each way (a proxy delays it, its other connections untouched) has a
// barrier in flight about a twentieth of the time; readers hitting one
// key meanwhile wait for the barrier's reply and are served from the tier,
// rather than reading Redis. Against the control (the same second of
// readers with the wait off, as before it existed), at most a quarter as
// many hits read Redis: about one in a hundred here, unloaded, a quarter
// on a loaded machine (a barrier that outlasts the wait's 5 ms lets its
// readers through).
func TestLocalHitsWaitForBarrier(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	tier.ReportAddr = func(string) string { return proxy.Addr }
	var local, remote atomic.Int64
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, LocalEntries: 100}
	o.Hooks.Hit = func(_ string, _ time.Duration, isLocal bool) {
		if isLocal {
			local.Add(1)
		} else {
			remote.Add(1)
		}
	}
	g := newGroup(t, srv.Client(t), o)
	tier.ReportAddr = nil
	proxy.Delay(2 * time.Millisecond)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	redistest.Eventually(t, 10*time.Second, "the in-process tier on", func() bool {
		before := local.Load()
		for range 2 {
			if _, err := g.Get(ctxT(t), "k", load); err != nil {
				t.Fatal(err)
			}
		}
		return local.Load() > before
	})
	// run has 4 readers hit the key for a second, and returns how many
	// hits the tier served and how many read Redis.
	run := func() (l, r int64) {
		local.Store(0)
		remote.Store(0)
		var wg sync.WaitGroup
		end := time.Now().Add(time.Second)
		for range 4 {
			wg.Go(func() {
				for n := 0; n < 1_000_000 && time.Now().Before(end); n++ {
					if _, err := g.Get(ctxT(t), "k", load); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return local.Load(), remote.Load()
	}
	tier.NoAwait = true
	cl, cr := run()
	tier.NoAwait = false
	l, r := run()
	t.Logf("waiting: %d hits from the tier, %d from Redis; the control: %d, %d", l, r, cl, cr)
	if l == 0 || cr == 0 || r*4 > cr {
		t.Errorf("%d hits read Redis waiting for barriers, %d in the control; want at most a quarter", r, cr)
	}
}
