package guard

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierHeldOtherDatabase: with TrackHeld, the tracked reader (and,
// over RESP3, the report connection, which reads the held keys itself)
// read the entries in database 0 whatever the client's, so on any other
// database the tier served no hit, every call cost Redis a read that kept
// nothing, and Hooks.LocalTier said "on". They read the client's
// database now.
func TestLocalTierHeldOtherDatabase(t *testing.T) {
	srv := redistest.Start(t)
	for _, resp3 := range []bool{false, true} {
		t.Run(fmt.Sprintf("resp3=%v", resp3), func(t *testing.T) {
			defer func(f bool) { tier.ForceRESP3 = f }(tier.ForceRESP3)
			tier.ForceRESP3 = resp3
			rdb := srv.Client(t, func(o *redis.Options) { o.DB = 1 })
			n := newLocalNode(t, rdb, Options{Namespace: redistest.Key(t) + ":", LocalEntries: 100, LocalTracking: TrackHeld})
			waitLocal(t, n)
		})
	}
}

// TestLocalTierHookWhyEmptyWhenOn: Hooks.LocalTier's why is "" when on,
// as its documentation says; it carried the reason of the state before
// ("connecting", "lost").
func TestLocalTierHookWhyEmptyWhenOn(t *testing.T) {
	srv := redistest.Start(t)
	var (
		mu    sync.Mutex
		calls []string
		ons   int
	)
	o := Options{LocalEntries: 100, Hooks: Hooks{LocalTier: func(on bool, why string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, fmt.Sprintf("(%v, %q)", on, why))
		if on {
			ons++
			if why != "" {
				t.Errorf("LocalTier(true, %q): want why \"\" when on", why)
			}
		}
	}}}
	n := newLocalNode(t, srv.Client(t), o)
	waitLocal(t, n)
	if err := srv.Client(t).ClientKillByFilter(ctxT(t), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the tier on again after its report connection was killed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ons >= 2
	})
	mu.Lock()
	t.Logf("LocalTier calls: %v", calls)
	mu.Unlock()
}
