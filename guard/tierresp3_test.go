package guard

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierRESP3: where the server refuses tracking with a REDIRECT
// (as Redis Cloud and Redis Software do; here a proxy in front of node B's
// report connection turns the option into one Redis refuses), B's tier
// runs its report connection in RESP3, serves hits from memory, and
// drops another node's change within LocalLag; and the same with RESP3
// forced, under both tracking modes.
func TestLocalTierRESP3(t *testing.T) {
	for _, row := range []struct {
		name  string
		mode  Tracking
		force bool
	}{
		{"redirect refused", TrackAll, false},
		{"forced, all", TrackAll, true},
		{"forced, held", TrackHeld, true},
	} {
		t.Run(row.name, func(t *testing.T) {
			srv := redistest.Start(t)
			o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour, LocalEntries: 100, LocalTracking: row.mode}
			a := newLocalNode(t, srv.Client(t), o)
			proxy := redistest.NewProxy(t, srv.Addr)
			proxy.RefuseRedirect()
			tier.ReportAddr = func(string) string { return proxy.Addr }
			tier.ForceRESP3 = row.force
			b := newLocalNode(t, srv.Client(t), o)
			tier.ReportAddr, tier.ForceRESP3 = nil, false
			waitLocal(t, a)
			waitLocal(t, b)
			assertLag(t, row.name, runLagChecker(t, lagRun{a: a, b: b}), b.opts.LocalLag, false)
			held := b.local.Load()
			load := func(context.Context) ([]byte, error) { return []byte(strconv.Itoa(1)), nil }
			redistest.Eventually(t, 10*time.Second, "B serving from its tier", func() bool {
				if _, err := b.Get(ctxT(t), "other", load); err != nil {
					t.Fatal(err)
				}
				return b.local.Load() > held
			})
		})
	}
}
