package guard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/breaker"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The breakers of a cluster are probed in the background while open (the
// Group's and each master's), so that what they say follows Redis with no
// call to start a probe: an idle Group, a master whose keys nobody asks
// for, a master a failover replaced and a failback brings back.

// mastersOpen counts the breakers of g's current masters that are open,
// and those failing.
func mastersOpen(g *Group) (open, failing int) {
	g.masters.EachCurrent(context.Background(), func(b *breaker.Breaker) {
		if b.Open() {
			open++
		}
		if b.Failing() {
			failing++
		}
	})
	return open, failing
}

// countMasterOpens returns o with a RedisError hook that counts the
// openings of master breakers (op "master").
func countMasterOpens(o Options) (Options, *atomic.Int64) {
	n := new(atomic.Int64)
	o.Hooks.RedisError = func(op string, _ error) {
		if op == "master" {
			n.Add(1)
		}
	}
	return o, n
}

// TestClusterIdleBreakerClosesBesideFrozenMaster: every master frozen
// until the Group's breaker opened, then all thawed but one, the master of
// the probe key the Group once used alone; no call. The Group's breaker
// says no master answers: the others do, and its probes find them, so it
// closes.
func TestClusterIdleBreakerClosesBesideFrozenMaster(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	var open atomic.Bool
	g := newGroup(t, cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries = -1 }), Options{
		RedisTimeout: 200 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond, FreshFor: time.Minute,
		Hooks: Hooks{Breaker: func(o bool) { open.Store(o) }}})
	defer g.Close()
	_, byMaster := keysOnTwoMasters(t, cl, g, 3)
	keys := append(byMaster[0], byMaster[1]...)
	for _, k := range keys {
		if _, err := g.Do(ctxT(t), k, valueOf(k)); err != nil {
			t.Fatal(err)
		}
	}
	frozen := cl.MasterFor(t, g.names(breakerProbeKey).entry)
	for _, m := range cl.Masters {
		m.Freeze(t)
		defer m.Thaw(t)
	}
	redistest.Eventually(t, 20*time.Second, "the Group's breaker open", func() bool {
		for _, k := range keys {
			_, _ = g.Do(ctxT(t), k, valueOf(k))
		}
		return open.Load()
	})
	for _, m := range cl.Masters {
		if m != frozen {
			m.Thaw(t)
		}
	}
	redistest.Eventually(t, 10*time.Second, "the idle Group's breaker closed, one master still frozen", func() bool {
		return !g.br.Open() && !open.Load()
	})
}

// TestClusterThawedMasterClosesWithoutCalls: a master frozen until its
// breaker opened (its keys served from the reserve), then thawed, and
// calls go on to the other master's keys only. Its breaker closes and the
// reserve empties; then, once another node replaced one of its keys, this
// node serves the new value, not the outage's copy.
func TestClusterThawedMasterClosesWithoutCalls(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	o, masterOpened := countMasterOpens(Options{
		RedisTimeout: 200 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond, FreshFor: time.Minute})
	g := newGroup(t, cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries = -1 }), o)
	defer g.Close()
	masters, byMaster := keysOnTwoMasters(t, cl, g, 3)
	for _, ks := range byMaster {
		for _, k := range ks {
			if _, err := g.Do(ctxT(t), k, valueOf(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the frozen master's breaker open", func() bool {
		for _, k := range byMaster[0] {
			_, _ = g.Do(ctxT(t), k, valueOf(k))
		}
		return masterOpened.Load() > 0
	})
	if g.reserve.Len() == 0 {
		t.Fatal("the frozen master's keys are served, but the reserve holds nothing")
	}
	masters[0].Thaw(t)
	redistest.Eventually(t, 10*time.Second, "its breaker closed and the reserve emptied, no call to its keys", func() bool {
		for _, k := range byMaster[1] {
			if _, err := g.Do(ctxT(t), k, valueOf(k)); err != nil {
				t.Fatal(err)
			}
		}
		o, f := mastersOpen(g)
		return o == 0 && f == 0 && g.reserve.Len() == 0
	})
	other := newGroup(t, cl.Client(t), Options{FreshFor: time.Minute})
	defer other.Close()
	k := byMaster[0][0]
	if err := other.Invalidate(ctxT(t), k); err != nil {
		t.Fatal(err)
	}
	if r, err := other.Do(ctxT(t), k, func(context.Context) ([]byte, error) { return []byte("new"), nil }); err != nil || string(r.Value) != "new" {
		t.Fatalf("the other node: %q %v", r.Value, err)
	}
	if r, err := g.Do(ctxT(t), k, func(context.Context) ([]byte, error) { return []byte("loaded here"), nil }); err != nil || string(r.Value) != "new" {
		t.Fatalf("after another node replaced the value, this node served %q (%v, %v); Redis holds %q", r.Value, r.Status, err, "new")
	}
}

// TestClusterFailbackFindsBreakerClosed: a master X frozen until its
// breaker opened, failed over to its replica, thawed (now a replica), and
// later made master again (a failback). Its keys' values are fresh in
// Redis, so no load is due: X's breaker, left behind by the failover, was
// closed as its keys' new master answered, and the failback finds it so.
func TestClusterFailbackFindsBreakerClosed(t *testing.T) {
	defer noLeaks(t)()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1, NodeTimeout: time.Minute})
	var loads atomic.Int64
	o, masterOpened := countMasterOpens(Options{
		RedisTimeout: 200 * time.Millisecond, BreakerCooldown: 300 * time.Millisecond, FreshFor: time.Hour})
	g := newGroup(t, cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries = -1 }), o)
	defer g.Close()
	masters, byMaster := keysOnTwoMasters(t, cl, g, 4)
	x, keys := masters[0], byMaster[0]
	load := func(ctx context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	all := func() (hits int) {
		for _, k := range keys {
			r, err := g.Do(ctxT(t), k, load)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == Hit {
				hits++
			}
		}
		return hits
	}
	all()
	x.Freeze(t)
	defer x.Thaw(t)
	redistest.Eventually(t, 10*time.Second, "X's breaker open", func() bool { all(); return masterOpened.Load() > 0 })
	cl.Failover(t, cl.ReplicasOf(x)[0])
	x.Thaw(t)
	redistest.Eventually(t, 20*time.Second, "the keys served by the promoted replica, the reserve emptied", func() bool {
		o, f := mastersOpen(g)
		return all() == len(keys) && g.reserve.Len() == 0 && o == 0 && f == 0
	})
	redistest.Eventually(t, 20*time.Second, "X a replica in sync", func() bool {
		info, err := x.Client(t).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	before := loads.Load()
	if err := x.Client(t).Do(ctxT(t), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 20*time.Second, "X master again", func() bool {
		info, err := x.Client(t).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	// A window of calls after the failback: each must be answered by
	// Redis (the value stored before the outage), none by a load.
	var notHit int
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		notHit += len(keys) - all()
	}
	if n := loads.Load() - before; n > 0 || notHit > 0 {
		t.Errorf("after a failback to X (its values fresh in Redis): %d loads, %d calls not a hit; want none", n, notHit)
	}
}
