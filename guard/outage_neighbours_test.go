package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestTwoNamespacesThroughFlaps: two services share one Redis, each a
// Group with a Namespace of its own and its tier on, the same key names,
// different values. Redis flaps under them (connections cut, then a
// stall, in turn), callers of both calling throughout. Each service's
// reserve and tier must keep to its own values: no call gets the other
// service's value, none fails, and no key is loaded, both services
// holding every key fresh in memory.
func TestTwoNamespacesThroughFlaps(t *testing.T) {
	const keys, callers, flaps = 5, 6, 8
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr)
	base := redistest.Key(t)
	var (
		nodes [2]*localNode
		loads [2]atomic.Int64
		load  [2]LoadFunc
		value [2]string
	)
	for j := range nodes {
		o := Options{Namespace: fmt.Sprintf("%s-%d:", base, j), FreshFor: time.Minute, LocalEntries: 1000,
			RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 200 * time.Millisecond}
		nodes[j] = newLocalNode(t, redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true}), o)
		waitLocal(t, nodes[j])
		value[j] = fmt.Sprintf("service %d", j)
		load[j] = func(context.Context) ([]byte, error) {
			loads[j].Add(1)
			return []byte(value[j]), nil
		}
	}
	key := func(i int) string { return fmt.Sprintf("hot-%d", i) }
	for j, n := range nodes {
		holdEvery(t, []*localNode{n}, keys, key, load[j])
		loads[j].Store(0)
	}

	var calls, failed atomic.Int64
	var mu sync.Mutex
	var foreign []string
	stopCallers := callUntilStopped(t, len(nodes)*callers, func(i, _ int) {
		j := i % len(nodes)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := nodes[j].Get(ctx, key(rand.IntN(keys)), load[j])
		cancel()
		calls.Add(1)
		switch {
		case err != nil:
			failed.Add(1)
		case string(v) != value[j]:
			mu.Lock()
			foreign = append(foreign, fmt.Sprintf("service %d got %q", j, v))
			mu.Unlock()
		}
	})
	for f := range flaps {
		if f%2 == 0 {
			for stop := time.Now().Add(300 * time.Millisecond); time.Now().Before(stop); {
				p.Cut()
				time.Sleep(10 * time.Millisecond) // the fault's own pace
			}
		} else {
			p.Stall()
			time.Sleep(300 * time.Millisecond) // the fault's own pace
			p.Resume()
		}
		time.Sleep(300 * time.Millisecond) // Redis up, between faults
	}
	stopCallers()
	if len(foreign) > 0 {
		t.Errorf("%d of %d calls got the other service's value, first: %s", len(foreign), calls.Load(), foreign[0])
	}
	if got := failed.Load(); got > 0 {
		t.Errorf("%d of %d calls failed, every key held fresh in memory", got, calls.Load())
	}
	if a, b := loads[0].Load(), loads[1].Load(); a+b > 0 {
		t.Errorf("%d and %d loads through %d flaps, every key held fresh in memory; want 0", a, b, flaps)
	}
}

// TestClusterMasterFrozenReserveEmptied: on a real 3-master cluster, a
// node holds keys of two masters in its tier when one master freezes
// (SIGSTOP) for 3 s, callers of every key calling throughout. The tier
// hands its copies to the reserve: no key is loaded, no call fails, and
// no call of the healthy master's keys waits for the frozen one. Once the
// master thaws, the tier comes back and the reserve gives up the keys the
// tier holds again; the one it never holds again (the probe of
// waitLocal, no longer called) is kept until tierReturnWait, no longer.
func TestClusterMasterFrozenReserveEmptied(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster, and 3 s of a frozen master")
	}
	const (
		perMaster = 6
		callers   = 8
		timeout   = time.Second // above a loaded machine's delays (see TestClusterMasterFrozenOthersServed)
		frozenFor = 3 * time.Second
	)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{NodeTimeout: time.Minute})
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Minute, LocalEntries: 1000,
		RedisTimeout: timeout, BreakerCooldown: 500 * time.Millisecond}
	n := newLocalNode(t, cl.Client(t), o)
	waitLocal(t, n)
	masters, byMaster := keysOnTwoMasters(t, cl, n.Group, perMaster)
	frozen, healthy := byMaster[0], byMaster[1]
	all := append(slices.Clone(frozen), healthy...)
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		return []byte("v"), nil
	}
	holdEvery(t, []*localNode{n}, len(all), func(i int) string { return all[i] }, load)
	loads.Store(0)

	var calls, failed atomic.Int64
	var mu sync.Mutex
	var slow []string
	stopCallers := callUntilStopped(t, callers, func(i, c int) {
		key := all[(i+c)%len(all)]
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := n.Get(ctx, key, load)
		cancel()
		calls.Add(1)
		if err != nil {
			failed.Add(1)
		}
		if took := time.Since(start); took >= timeout && slices.Contains(healthy, key) {
			mu.Lock()
			slow = append(slow, fmt.Sprintf("%s: %v", key, took))
			mu.Unlock()
		}
	})
	masters[0].Freeze(t)
	defer masters[0].Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the tier's copies in the reserve", func() bool {
		return n.reserve.Len() >= len(all)
	})
	time.Sleep(frozenFor) // the condition under test: a frozen master
	masters[0].Thaw(t)
	redistest.Eventually(t, 10*time.Second, "the tier back", n.loc.Serving)
	back := time.Now()
	var left int
	redistest.Eventually(t, tierReturnWait(o)+10*time.Second, "the reserve emptied", func() bool {
		left = n.reserve.Len()
		return left == 0
	})
	emptiedAfter := time.Since(back)
	stopCallers()
	if got := loads.Load(); got > 0 {
		t.Errorf("%d loads while a master froze, of %d keys held fresh; want 0", got, len(all))
	}
	if got := failed.Load(); got > 0 {
		t.Errorf("%d of %d calls failed while a master froze, every key held fresh", got, calls.Load())
	}
	if len(slow) > 0 {
		t.Errorf("%d calls of the healthy master's keys took %v or more, first %s", len(slow), timeout, slow[0])
	}
	if emptiedAfter > tierReturnWait(o)+2*o.BreakerCooldown {
		t.Errorf("the reserve emptied %v after the tier was back; want within tierReturnWait (%v)", emptiedAfter, tierReturnWait(o))
	}
}

// callUntilStopped starts callers goroutines, each calling call(i, c)
// for c = 0, 1, ... (10 M times at most) until stop is called. stop waits
// for them; it runs at the test's end too, so that a Fatal leaves no
// caller spinning into the tests after it.
func callUntilStopped(t *testing.T, callers int, call func(i, c int)) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stop)
	for i := range callers {
		wg.Go(func() {
			for c := 0; c < 10_000_000; c++ {
				select {
				case <-done:
					return
				default:
				}
				call(i, c)
			}
		})
	}
	return stop
}
