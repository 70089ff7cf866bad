package chaos

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestClusterFailover: on a 3-master cluster with one replica each, the
// master serving a hot key is killed and its replica promoted while 3 nodes
// keep calling. Every call is answered without error within callBound, and
// the key is coordinated through Redis again once the replica serves it.
func TestClusterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	var nodes []*node
	for i := range 3 {
		rdb := cl.Client(t, func(o *redis.ClusterOptions) {
			o.MaxRetries = -1
			o.DialTimeout = redisTimeout
			o.ContextTimeoutEnabled = true
		})
		nodes = append(nodes, &node{name: fmt.Sprint("n", i), rdb: rdb, g: newGroup(t, rdb, scenarioOptions())})
	}
	org := newOrigin(originLatency)
	keys := keysOf(t, 6) // spread over the masters
	c := newCalls()
	stop := make(chan struct{})
	wait := load(nodes, org, keys, 4, 2*callBound, c, stop)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			wait()
		}
	}()
	redistest.Eventually(t, 20*time.Second, "stale answers before the failover", func() bool { return c.status(guard.Stale) > 100 })

	victim := cl.MasterFor(t, keys[0])
	replicas := cl.ReplicasOf(victim)
	if len(replicas) != 1 {
		t.Fatalf("master %s has %d replicas, want 1", victim.Addr, len(replicas))
	}
	victim.Kill(t)
	cl.Failover(t, replicas[0])
	promoted := time.Now()
	c.markRecovery(promoted)
	redistest.Eventually(t, 20*time.Second, "every node coordinating again after the failover", func() bool {
		_, ok := c.recovery(nodes)
		return ok
	})
	// And the key on the promoted replica is served through Redis.
	redistest.Eventually(t, 20*time.Second, "the failed-over key served from Redis", func() bool {
		r, err := nodes[0].g.Do(ctxT(t, 5*time.Second), keys[0], org.loader("n0", keys[0]))
		return err == nil && (r.Status == guard.Hit || r.Status == guard.Stale)
	})
	close(stop)
	wait()
	stopped = true

	n, errs, worst := c.summary()
	rec, _ := c.recovery(nodes)
	t.Logf("failover: %d calls, %d degraded, worst call %v, coordination back %v after the promotion",
		n, c.status(guard.Degraded), worst.Round(time.Millisecond), rec.Round(time.Millisecond))
	if len(errs) > 0 {
		t.Errorf("%d+ calls failed through the failover, first: %v", len(errs), errs[0])
	}
	if worst > callBound {
		t.Errorf("a call took %v, want ≤ %v", worst, callBound)
	}
}

// TestLoaderFailuresUnderLoad: the origin fails, then panics, under load
// from 3 nodes. While a stale value exists every caller gets it
// (stale-if-error); the failing origin is called about once per key per
// ErrorBackoff fleet-wide, not once per caller; cold keys answer the
// loader's error, a *PanicError or ErrBackoff; the process survives and no
// goroutine is left behind.
func TestLoaderFailuresUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const backoff = 300 * time.Millisecond
	opts := scenarioOptions()
	opts.ErrorBackoff = backoff
	var nodes []*node
	for i := range 3 {
		rdb := srv.Client(t, clientOptions)
		nodes = append(nodes, &node{name: fmt.Sprint("n", i), rdb: rdb, g: newGroup(t, rdb, opts)})
	}
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	org := newOrigin(originLatency)
	warm := keysOf(t, 4)
	errDB := errors.New("db down")

	for _, mode := range []struct {
		name string
		fail func(string) error
	}{
		{"errors", func(string) error { return errDB }},
		{"panics", func(string) error { panic("origin exploded") }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			// Fresh values first, then the origin breaks.
			for _, k := range warm {
				if _, err := nodes[0].g.Do(ctxT(t, 5*time.Second), k, org.loader("n0", k)); err != nil {
					t.Fatal(err)
				}
			}
			before := map[string]int64{}
			for _, k := range warm {
				before[k] = org.callsOf(k)
			}
			org.fail.Store(mode.fail)
			defer org.fail.Store(func(string) error { return nil })

			c := newCalls()
			stop := make(chan struct{})
			wait := load(nodes, org, warm, 8, 2*callBound, c, stop)
			start := time.Now()
			time.Sleep(2 * time.Second) // the failure lasts 2s: a duration, not a synchronisation
			close(stop)
			wait()
			ran := time.Since(start)

			n, errs, _ := c.summary()
			if len(errs) > 0 {
				t.Fatalf("%d+ of %d calls failed while a stale value existed, first: %v", len(errs), n, errs[0])
			}
			if c.status(guard.Stale) == 0 {
				t.Fatal("no stale answers while the origin failed")
			}
			// Per key: one failed refresh per back-off period, fleet-wide,
			// plus one for the period that was running at the end.
			limit := int64(ran/backoff) + 2
			for _, k := range warm {
				if got := org.callsOf(k) - before[k]; got > limit {
					t.Errorf("failing origin called %d times for one key in %v, want ≤ %d (one per %v)", got, ran.Round(time.Millisecond), limit, backoff)
				}
			}
			t.Logf("%s: %d calls, all answered stale; %d origin calls for %d keys in %v", mode.name, n, org.totalCalls(), len(warm), ran.Round(time.Millisecond))

			// Cold keys: the callers get the failure itself, then ErrBackoff.
			cold := keysOf(t, 2)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var bad []error
			for _, nd := range nodes {
				for _, k := range cold {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := nd.g.Do(ctxT(t, callBound), k, org.loader(nd.name, k))
						var pe *guard.PanicError
						if !(errors.Is(err, errDB) || errors.As(err, &pe) || errors.Is(err, guard.ErrBackoff)) {
							mu.Lock()
							bad = append(bad, err)
							mu.Unlock()
						}
					}()
				}
			}
			wg.Wait()
			if len(bad) > 0 {
				t.Fatalf("cold keys with a failing origin answered %v, want its error, *PanicError or ErrBackoff", bad)
			}
		})
	}
}
