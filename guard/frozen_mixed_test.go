package guard

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestClusterFrozenMasterMixedCallers: callers that each serve keys of
// every master (a worker pool) were all waiting on a frozen master at
// once, so no call answered within the Group breaker's Silence: the
// breaker opened, and the healthy master's keys were served Degraded
// (355k-506k of them in 3 s), loaded per node. The Group's breaker now
// waits a Silence that outlasts a first wave of timeouts, by which the
// frozen master's own breaker has opened and the callers reach the other
// masters again.
func TestClusterFrozenMasterMixedCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster, and 2 s of a frozen master")
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	var opened atomic.Bool
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: 300 * time.Millisecond, StaleFor: time.Minute,
		LocalEntries: Disabled, RedisTimeout: 250 * time.Millisecond, BreakerCooldown: 200 * time.Millisecond}
	o.Hooks.Breaker = func(open bool) {
		if open {
			opened.Store(true)
		}
	}
	g := newGroup(t, cl.Client(t), o)
	masters, keys := keysOnTwoMasters(t, cl, g, 3)
	all := append(slices.Clone(keys[0]), keys[1]...)
	for _, k := range all {
		if _, err := g.Do(ctxT(t), k, valueOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	var healthyDegraded, healthy atomic.Int64
	stop := callUntilStopped(t, 9, func(i, c int) {
		k := all[(i+c)%len(all)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, _ := g.Do(ctx, k, valueOf(k))
		cancel()
		if slices.Contains(keys[1], k) {
			healthy.Add(1)
			if r.Status == Degraded {
				healthyDegraded.Add(1)
			}
		}
	})
	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	time.Sleep(2 * time.Second) // the condition under test: a frozen master
	masters[0].Thaw(t)
	stop()
	if opened.Load() || healthyDegraded.Load() > 0 {
		t.Errorf("one master frozen: Group breaker opened %v, %d of %d calls of the healthy master's keys Degraded; want closed, none",
			opened.Load(), healthyDegraded.Load(), healthy.Load())
	}
}
