package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Windows of the load scenarios: keys go stale fast so that refreshes run
// all the time, and stay servable long after.
const (
	freshFor    = 200 * time.Millisecond
	staleFor    = time.Minute
	waitTimeout = time.Second
)

// callBound is the longest a call may take with a healthy loader, whatever
// Redis does: the fast-path GET and the read script, a wait for another
// node's fill, a poll read, the watchdog's last renewal and the fill, each
// bounded by RedisTimeout, plus two loads and a second of scheduling slack
// for a 2-core machine running the race detector.
const callBound = waitTimeout + 6*redisTimeout + 2*originLatency + time.Second

func scenarioOptions() guard.Options {
	return guard.Options{FreshFor: freshFor, StaleFor: staleFor, WaitTimeout: waitTimeout}
}

func keysOf(t *testing.T, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = redistest.Key(t, fmt.Sprint(i))
	}
	return keys
}

// TestRedisOutageUnderLoad: Redis frozen, unreachable, silently dropping
// traffic, or pausing its clients for 2s under load from 3 nodes. Every
// call is answered without error within callBound, no node runs two loads
// of one key at once, and every node is coordinating through Redis again
// within 2s of its return.
func TestRedisOutageUnderLoad(t *testing.T) {
	faults := []struct {
		name       string
		start, end func(t *testing.T, srv *redistest.Server, nodes []*node)
	}{
		{"frozen", func(t *testing.T, srv *redistest.Server, _ []*node) { srv.Freeze(t) },
			func(t *testing.T, srv *redistest.Server, _ []*node) { srv.Thaw(t) }},
		{"unreachable", func(t *testing.T, _ *redistest.Server, nodes []*node) {
			for _, n := range nodes {
				n.proxy.Down(t)
			}
		}, func(t *testing.T, _ *redistest.Server, nodes []*node) {
			for _, n := range nodes {
				n.proxy.Up(t)
			}
		}},
		{"blackholed", func(t *testing.T, _ *redistest.Server, nodes []*node) {
			for _, n := range nodes {
				n.proxy.Blackhole(t)
			}
		}, func(t *testing.T, _ *redistest.Server, nodes []*node) {
			for _, n := range nodes {
				n.proxy.Clear(t)
			}
		}},
		{"client pause", func(t *testing.T, srv *redistest.Server, _ []*node) {
			admin := srv.Client(t)
			if err := admin.Do(ctxT(t, 5*time.Second), "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, srv *redistest.Server, _ []*node) {
			// The pause ends by itself; wait until the server answers.
			admin := srv.Client(t)
			redistest.Eventually(t, 10*time.Second, "the pause to end", func() bool {
				return admin.Ping(ctxT(t, time.Second)).Err() == nil
			})
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var nodes []*node
			for i := range 3 {
				nodes = append(nodes, newNode(t, fmt.Sprint("n", i), srv, scenarioOptions()))
			}
			org := newOrigin(originLatency)
			keys := keysOf(t, 4)
			c := newCalls()
			stop := make(chan struct{})
			wait := load(nodes, org, keys, 6, 2*callBound, c, stop)
			defer func() {
				select {
				case <-stop:
				default:
					close(stop)
					wait()
				}
			}()
			redistest.Eventually(t, 10*time.Second, "stale answers before the fault", func() bool { return c.status(guard.Stale) > 100 })

			f.start(t, srv, nodes)
			held := time.Now()
			redistest.Eventually(t, 10*time.Second, "callers served without Redis", func() bool { return c.status(guard.Degraded) > 0 })
			time.Sleep(2*time.Second - time.Since(held)) // the outage lasts 2s: a duration, not a synchronisation
			f.end(t, srv, nodes)
			back := time.Now()
			c.markRecovery(back)
			redistest.Eventually(t, 10*time.Second, "every node coordinating again", func() bool {
				_, ok := c.recovery(nodes)
				return ok
			})
			close(stop)
			wait()

			n, errs, worst := c.summary()
			rec, _ := c.recovery(nodes)
			t.Logf("%s: %d calls, %d degraded, worst call %v, coordination back after %v, %d origin loads",
				f.name, n, c.status(guard.Degraded), worst.Round(time.Millisecond), rec.Round(time.Millisecond), org.totalCalls())
			if len(errs) > 0 {
				t.Errorf("%d+ calls failed with a healthy loader, first: %v", len(errs), errs[0])
			}
			if worst > callBound {
				t.Errorf("a call took %v, want ≤ %v", worst, callBound)
			}
			if m := org.maxPerNode(); m != 1 {
				t.Errorf("a node ran %d loads of one key at once, want at most 1", m)
			}
			if rec > 2*time.Second {
				t.Errorf("coordination back %v after Redis returned, want ≤ 2s", rec)
			}
		})
	}
}

// TestSlowAndLossyLink: one node's link to Redis gets slower than
// RedisTimeout, drops everything, or resets connections. Its callers stay
// bounded by RedisTimeout (plus a load), its breaker opens, and closes once
// the link is healthy again.
func TestSlowAndLossyLink(t *testing.T) {
	srv := redistest.Start(t)
	var opened, closed counter
	opts := scenarioOptions()
	opts.Hooks.Breaker = func(open bool) {
		if open {
			opened.add()
		} else {
			closed.add()
		}
	}
	n := newNode(t, "n0", srv, opts)
	org := newOrigin(originLatency)
	org.pad = 64 << 10 // so that a throttled link cannot carry a value within RedisTimeout
	keys := keysOf(t, 2)
	for _, k := range keys {
		if _, err := n.g.Do(ctxT(t, 5*time.Second), k, org.loader(n.name, k)); err != nil {
			t.Fatal(err)
		}
	}
	// A slow link costs each call at most the fast-path GET, the read and
	// the fill (each RedisTimeout) and one load; slack as for callBound.
	const bound = 3*redisTimeout + originLatency + time.Second
	for _, fault := range []struct {
		name   string
		inject func()
	}{
		{"latency", func() { n.proxy.Latency(t, 3*redisTimeout, redisTimeout/2) }},
		{"bandwidth", func() { n.proxy.Bandwidth(t, 16) }}, // a 64 KB value takes 4s
		{"dropped", func() { n.proxy.Blackhole(t) }},
		{"reset", func() { n.proxy.ResetPeer(t, 0) }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			o, cl := opened.get(), closed.get()
			fault.inject()
			var worst time.Duration
			for i := 0; opened.get() == o || i < 20; i++ {
				if i > 200 {
					t.Fatalf("breaker still closed after %d calls over a bad link", i)
				}
				k := keys[i%len(keys)]
				start := time.Now()
				r, err := n.g.Do(ctxT(t, 10*time.Second), k, org.loader(n.name, k))
				worst = max(worst, time.Since(start))
				if err != nil {
					t.Fatalf("call %d over a bad link: %v", i, err)
				}
				if _, err := versionOf(k, r.Value); err != nil {
					t.Fatal(err)
				}
			}
			if worst > bound {
				t.Fatalf("a call over a bad link took %v, want ≤ %v", worst, bound)
			}
			n.proxy.Clear(t)
			cleared := time.Now()
			redistest.Eventually(t, 10*time.Second, "the breaker to close", func() bool {
				r, err := n.g.Do(ctxT(t, 10*time.Second), keys[0], org.loader(n.name, keys[0]))
				return err == nil && r.Status != guard.Degraded && closed.get() > cl
			})
			t.Logf("%s: breaker opened, worst call %v, 0 errors; breaker closed %v after the link healed",
				fault.name, worst.Round(time.Millisecond), time.Since(cleared).Round(time.Millisecond))
		})
	}
}

// TestRedisRestartDataLost: Redis dies and comes back empty while a key is
// being loaded and a lock is held. Nothing stays stuck: the load's callers
// are answered, waiters on another node too, the lock can be taken at once,
// and fences keep increasing.
func TestRedisRestartDataLost(t *testing.T) {
	srv := redistest.Start(t)
	a := newNode(t, "a", srv, scenarioOptions())
	b := newNode(t, "b", srv, scenarioOptions())
	lc := newLocks(t, srv)
	key, lockKey := redistest.Key(t, "entry"), redistest.Key(t, "lock")

	held, err := lc.Obtain(ctxT(t, 5*time.Second), lockKey, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	heldFence := held.Fence() // minted while held
	gate, loading := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.g.Do(ctxT(t, time.Minute), key, func(context.Context) ([]byte, error) {
			close(loading)
			<-gate
			return []byte("a"), nil
		})
		aDone <- err
	}()
	<-loading
	bDone := make(chan error, 1)
	go func() {
		_, err := b.g.Do(ctxT(t, time.Minute), key, func(context.Context) ([]byte, error) { return []byte("b"), nil })
		bDone <- err
	}()

	srv.Restart(t) // SIGKILL, then a new process on the same port: the data is gone
	close(gate)
	for name, ch := range map[string]chan error{"loader": aDone, "waiter": bDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("the %s's call after the restart: %v", name, err)
			}
		case <-time.After(callBound + lockTTL):
			t.Fatalf("the %s's call stuck after the restart", name)
		}
	}
	restarted := time.Now()
	// The key is usable: the next read is a hit or loads it anew.
	redistest.Eventually(t, 10*time.Second, "a coordinated answer after the restart", func() bool {
		r, err := b.g.Do(ctxT(t, 5*time.Second), key, func(context.Context) ([]byte, error) { return []byte("b2"), nil })
		return err == nil && r.Status != guard.Degraded
	})

	// The lock is free at once, and its fence is above the lost holder's.
	again, err := lc.Obtain(ctxT(t, 5*time.Second), lockKey, time.Minute)
	if err != nil {
		t.Fatalf("lock after the restart: %v", err)
	}
	if heldFence <= 0 || again.Fence() <= heldFence {
		t.Fatalf("fence after the restart %d, want above %d", again.Fence(), heldFence)
	}
	if err := held.Release(ctxT(t, 5*time.Second)); err == nil {
		t.Fatal("the lost holder released the new holder's lock")
	}
	if err := again.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart with data lost: loader and waiter answered, 0 errors; coordinated %v after the restart; lock free at once, fence %d → %d",
		time.Since(restarted).Round(time.Millisecond), heldFence, again.Fence())
}
