package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestSilentOutageServesTierCopies: three nodes hold five hot keys fresh
// in their in-process tiers when Redis stops answering without closing a
// connection (frozen by SIGSTOP, or CLIENT PAUSE ALL), three times, 600
// ms each, with ten callers per node calling throughout (Get, or GetMany
// of the five). The origin must
// not be called once: every node holds every key fresh in memory, and an
// outage is served from that memory (the reserve). A call finds Redis
// unreachable well before the tier gives its report connection up and
// hands its copies to the reserve; the call found the reserve empty and
// loaded, on every node, for every key, at every outage: 30-40 loads in
// all here (1-2 per node and key an outage), where a closed connection
// loaded none. The tier
// now hands a call's copy over as soon as the call finds Redis
// unreachable.
func TestSilentOutageServesTierCopies(t *testing.T) {
	const (
		nodes, keys, callers = 3, 5, 10
		outages              = 3
		down                 = 600 * time.Millisecond
	)
	for _, tc := range []struct{ fault, call string }{
		{"freeze", "get"}, {"pause", "get"}, {"freeze", "getmany"},
	} {
		fault := tc.fault
		t.Run(tc.fault+"/"+tc.call, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Minute, LocalEntries: 1000,
				RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond}
			var fleet []*localNode
			for range nodes {
				n := newLocalNode(t, srv.Client(t), o)
				waitLocal(t, n)
				fleet = append(fleet, n)
			}
			var loads atomic.Int64
			load := func(context.Context) ([]byte, error) {
				loads.Add(1)
				return []byte("v"), nil
			}
			loadMany := func(_ context.Context, ks []string) (map[string][]byte, error) {
				loads.Add(int64(len(ks)))
				vals := map[string][]byte{}
				for _, k := range ks {
					vals[k] = []byte("v")
				}
				return vals, nil
			}
			all := make([]string, keys)
			for i := range all {
				all[i] = fmt.Sprintf("hot-%d", i)
			}
			key := func(i int) string { return fmt.Sprintf("hot-%d", i) }
			// warm has every node hold every key in its tier (a hit from
			// memory), as a hot key is held.
			warm := func() {
				t.Helper()
				for _, n := range fleet {
					waitLocal(t, n)
					for i := range keys {
						redistest.Eventually(t, 10*time.Second, "a hit from the tier", func() bool {
							before := n.local.Load()
							if _, err := n.Get(ctxT(t), key(i), load); err != nil {
								t.Fatal(err)
							}
							return n.local.Load() > before
						})
					}
				}
			}
			warm()
			if got := loads.Load(); got != keys {
				t.Fatalf("%d loads to fill %d keys, want one each", got, keys)
			}
			loads.Store(0)
			var calls, errs atomic.Int64
			for range outages {
				switch fault {
				case "freeze":
					srv.Freeze(t)
				case "pause":
					if err := admin.Do(ctxT(t), "CLIENT", "PAUSE", down.Milliseconds(), "ALL").Err(); err != nil {
						t.Fatal(err)
					}
				}
				end := time.Now().Add(down)
				var wg sync.WaitGroup
				for _, n := range fleet {
					for range callers {
						wg.Go(func() {
							for c := 0; c < 10_000 && time.Now().Before(end); c++ {
								ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
								var err error
								if tc.call == "getmany" {
									var vals map[string][]byte
									if vals, err = n.GetMany(ctx, all, loadMany); err == nil && len(vals) != keys {
										err = fmt.Errorf("%d values of %d keys", len(vals), keys)
									}
								} else {
									_, err = n.Get(ctx, key(rand.IntN(keys)), load)
								}
								cancel()
								calls.Add(1)
								if err != nil {
									errs.Add(1)
								}
							}
						})
					}
				}
				wg.Wait()
				if fault == "freeze" {
					srv.Thaw(t)
				}
				warm()
			}
			t.Logf("%d calls during the outages, %d errors", calls.Load(), errs.Load())
			if got := loads.Load(); got != 0 {
				t.Errorf("%d loads through %d outages of %v, of %d keys every node of %d held fresh in memory; want 0",
					got, outages, down, keys, nodes)
			}
			if errs.Load() > 0 {
				t.Errorf("%d of %d calls failed during the outages; want all served from memory", errs.Load(), calls.Load())
			}
		})
	}
}
