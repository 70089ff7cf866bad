package chaos

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

var (
	soakDuration = flag.Duration("chaos.duration", 30*time.Second, "TestChaosSoak: how long the soak runs")
	soakSeed     = flag.Uint64("chaos.seed", 0, "TestChaosSoak: seed of the fault schedule (0: from the clock)")
)

// Shape of the soak: 4 nodes × 8 callers over 16 keys.
const (
	soakNodes   = 4
	soakCallers = 8
	soakKeys    = 16
	// settle is how long after the last sign of Redis trouble (a fault
	// cleared, a Redis error, a breaker change on any node) a call must
	// have started for its load to count as "Redis healthy": it covers the
	// breaker's cooldown and probe.
	settle = time.Second
)

type callStartKey struct{}

// health tells, from the faults injected and what the nodes' hooks saw,
// whether Redis was healthy for a call.
type health struct {
	mu     sync.Mutex
	active int       // faults in force
	last   time.Time // last sign of trouble
}

func (h *health) mark() {
	h.mu.Lock()
	h.last = time.Now()
	h.mu.Unlock()
}

func (h *health) begin() {
	h.mu.Lock()
	h.active++
	h.last = time.Now()
	h.mu.Unlock()
}

func (h *health) end() {
	h.mu.Lock()
	h.active--
	h.last = time.Now()
	h.mu.Unlock()
}

// healthySince reports whether no fault is in force and nothing went wrong
// from settle before callStart until now.
func (h *health) healthySince(callStart time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active == 0 && h.last.Before(callStart.Add(-settle))
}

// violations collects broken invariants.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.list) < 50 {
		v.list = append(v.list, fmt.Sprintf(format, args...))
	}
}

func (v *violations) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.list)
}

// TestChaosSoak: 4 nodes × 8 callers × 16 keys under randomised faults
// (a node's link slowed past RedisTimeout, blackholed, reset or cut; the
// server frozen or pausing its clients) for -chaos.duration, checking:
//
//   - every call returns a value, or an error the guard documents, within
//     callBound;
//   - per key, the version stored in Redis never decreases;
//   - while Redis is healthy, at most one load of a key runs in the fleet;
//   - at the end, goroutines and server connections are back to baseline.
func TestChaosSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs for -chaos.duration; skipped with -short")
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	srv := redistest.Start(t)
	// Direct, and named so that its own connections (its pool grows with
	// the monitor) are not counted among the nodes'.
	admin := srv.Client(t, func(o *redis.Options) { o.ClientName = adminName })
	if n, list := nodeConns(t, admin); n != 0 {
		t.Fatalf("%d connections before the nodes started:\n%s", n, list)
	}
	ignore := goleak.IgnoreCurrent()

	var h health
	var bad violations
	var nodes []*node
	for i := range soakNodes {
		opts := scenarioOptions()
		opts.Hooks = guard.Hooks{
			RedisError: func(string, error) { h.mark() },
			Breaker:    func(bool) { h.mark() },
		}
		nodes = append(nodes, newNode(t, fmt.Sprint("n", i), srv, opts))
	}

	// The fleet-wide one-load invariant, judged on healthy calls only.
	org := newOrigin(originLatency)
	var lmu sync.Mutex
	healthyLoads := map[string]int{}
	org.onStart = func(node, key string, _ int, ctx context.Context) func() {
		start, _ := ctx.Value(callStartKey{}).(time.Time)
		if start.IsZero() || !h.healthySince(start) {
			return func() {}
		}
		lmu.Lock()
		healthyLoads[key]++
		if n := healthyLoads[key]; n > 1 {
			bad.add("%d loads of %s at once in the fleet while Redis was healthy (latest on %s)", n, key, node)
		}
		lmu.Unlock()
		return func() {
			lmu.Lock()
			healthyLoads[key]--
			lmu.Unlock()
		}
	}

	keys := keysOf(t, soakKeys)
	c := newCalls()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		for i := range soakCallers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				soakCaller(n, org, keys, i, c, &bad, stop)
			}()
		}
	}
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		monitorVersions(admin, keys, &bad, stop, nil)
	}()

	injected := map[string]int{}
	deadline := time.Now().Add(*soakDuration)
	var worstRecovery time.Duration
	for time.Now().Before(deadline) {
		// A healthy gap, then one fault for a while.
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		if !time.Now().Before(deadline) {
			break
		}
		kind, clear := injectRandom(t, rng, srv, admin, nodes, &h)
		injected[kind]++
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		clear()
		h.end()
		// Every node coordinates through Redis again.
		back := time.Now()
		c.markRecovery(back)
		redistest.Eventually(t, 10*time.Second, "the nodes to coordinate again after "+kind, func() bool {
			_, ok := c.recovery(nodes)
			return ok
		})
		rec, _ := c.recovery(nodes)
		worstRecovery = max(worstRecovery, rec)
	}
	close(stop)
	wg.Wait()
	<-monDone

	for _, n := range nodes {
		n.close()
		n.proxy.Down(t) // closes the proxied connections to the server
	}
	var left string
	deadline = time.Now().Add(10 * time.Second)
	for n := 1; n > 0; {
		if n, left = nodeConns(t, admin); n > 0 && time.Now().After(deadline) {
			t.Fatalf("%d node connections still open on the server:\n%s", n, left)
		} else if n > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	goleak.VerifyNone(t, ignore,
		// Toxiproxy's accept loops end with their proxy at cleanup.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).server"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).freeBlocker"),
	)

	n, _, worst := c.summary()
	var kinds []string
	total := 0
	for k, v := range injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(kinds)
	t.Logf("soak %v: %d calls (%d stale, %d degraded), %d origin loads, %d faults (%s), violations %d, worst call %v, worst recovery %v",
		*soakDuration, n, c.status(guard.Stale), c.status(guard.Degraded), org.totalCalls(), total,
		strings.Join(kinds, ", "), bad.count(), worst.Round(time.Millisecond), worstRecovery.Round(time.Millisecond))
	for _, v := range bad.list {
		t.Error(v)
	}
}

// soakCaller calls Do in a loop, checking each answer.
func soakCaller(n *node, org *origin, keys []string, i int, c *calls, bad *violations, stop <-chan struct{}) {
	for j := i; ; j++ {
		select {
		case <-stop:
			return
		default:
		}
		key := keys[j%len(keys)]
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callStartKey{}, start), 2*callBound)
		r, err := n.g.Do(ctx, key, org.loader(n.name, key))
		cancel()
		took := time.Since(start)
		switch {
		case err != nil && !documented(err):
			bad.add("%s: call of %s failed with an undocumented error: %v", n.name, key, err)
		case err == nil:
			if _, verr := versionOf(key, r.Value); verr != nil {
				bad.add("%s: %v", n.name, verr)
			}
		}
		if took > callBound {
			bad.add("%s: call of %s took %v, bound %v", n.name, key, took, callBound)
		}
		c.record(n.name, start, r, err)
		time.Sleep(time.Millisecond)
	}
}

// injectRandom injects one fault and returns its name and how to clear it.
func injectRandom(t *testing.T, rng *rand.Rand, srv *redistest.Server, admin *redis.Client, nodes []*node, h *health) (string, func()) {
	n := nodes[rng.IntN(len(nodes))]
	h.begin()
	switch rng.IntN(6) {
	case 0:
		n.proxy.Latency(t, 3*redisTimeout, redisTimeout)
		return "latency", func() { n.proxy.Clear(t) }
	case 1:
		n.proxy.Blackhole(t)
		return "blackhole", func() { n.proxy.Clear(t) }
	case 2:
		n.proxy.ResetPeer(t, 0)
		return "reset", func() { n.proxy.Clear(t) }
	case 3:
		n.proxy.Down(t)
		return "link down", func() { n.proxy.Up(t) }
	case 4:
		srv.Freeze(t)
		return "server frozen", func() { srv.Thaw(t) }
	default:
		ms := 300 + rng.IntN(1200)
		if err := admin.Do(ctxT(t, 5*time.Second), "CLIENT", "PAUSE", fmt.Sprint(ms), "ALL").Err(); err != nil {
			t.Errorf("CLIENT PAUSE: %v", err)
		}
		return "client pause", func() {
			redistest.Eventually(t, 10*time.Second, "the pause to end", func() bool {
				return admin.Ping(ctxT(t, time.Second)).Err() == nil
			})
		}
	}
}

// monitorVersions reads every key's entry straight from the server (not
// through a proxy) every 20ms and checks that its version never
// decreases. seen, when not nil, is told each version read.
func monitorVersions(admin *redis.Client, keys []string, bad *violations, stop <-chan struct{}, seen func(key string, v int64)) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = hashtag.Base("stampede:", k)
	}
	high := make([]int64, len(keys))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		vals, err := admin.MGet(ctx, names...).Result()
		cancel()
		if err != nil {
			continue // the server is frozen or paused
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue
			}
			nl := strings.IndexByte(s, '\n')
			if nl < 0 || !strings.HasPrefix(s, "~1,") || strings.HasSuffix(s[:nl], ",n") || strings.HasSuffix(s[:nl], ",e") {
				continue // negative or error marker: no version
			}
			ver, err := versionOf(keys[i], bytes.Clone([]byte(s[nl+1:])))
			if err != nil {
				bad.add("stored entry of %s: %v", keys[i], err)
				continue
			}
			if ver < high[i] {
				bad.add("stored version of %s went back from %d to %d", keys[i], high[i], ver)
			}
			high[i] = max(high[i], ver)
			if seen != nil {
				seen(keys[i], ver)
			}
		}
	}
}

// adminName names the soak's own connections to the server.
const adminName = "chaos-admin"

// nodeConns returns how many connections other than the admin's the server
// has, and their CLIENT LIST lines.
func nodeConns(t *testing.T, admin *redis.Client) (int, string) {
	t.Helper()
	s, err := admin.ClientList(ctxT(t, 5*time.Second)).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var others []string
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) != "" && !strings.Contains(line, " name="+adminName+" ") {
			others = append(others, line)
		}
	}
	return len(others), strings.Join(others, "")
}

// TestSoakCheckers: the soak's invariant checks catch what they look for,
// so a quiet soak means something.
func TestSoakCheckers(t *testing.T) {
	srv := redistest.Shared(t)
	admin := srv.Client(t)
	key := redistest.Key(t)
	entry := hashtag.Base("stampede:", key)

	t.Run("stored version goes back", func(t *testing.T) {
		var bad violations
		stop := make(chan struct{})
		done := make(chan struct{})
		var saw5 atomic.Bool
		go func() {
			defer close(done)
			monitorVersions(admin, []string{key}, &bad, stop, func(_ string, v int64) { saw5.Store(saw5.Load() || v == 5) })
		}()
		put := func(v int64) {
			raw := "~1,1,2,1,1,1,\n" + string(encodeValue(key, v, 0))
			if err := admin.Set(ctxT(t, 5*time.Second), entry, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		put(5)
		redistest.Eventually(t, 10*time.Second, "the monitor to see version 5", saw5.Load)
		put(3)
		redistest.Eventually(t, 10*time.Second, "the monitor to flag version 3", func() bool { return bad.count() > 0 })
		close(stop)
		<-done
	})

	t.Run("two healthy loads of a key", func(t *testing.T) {
		var h health
		h.mark() // trouble long ago, as far as calls starting after settle are concerned
		start := time.Now().Add(settle + time.Millisecond)
		if !h.healthySince(start) {
			t.Fatal("a call starting settle after the last trouble is not healthy")
		}
		h.begin()
		if h.healthySince(start) {
			t.Fatal("a call during a fault counts as healthy")
		}
		h.end()
		if h.healthySince(time.Now()) {
			t.Fatal("a call starting right after a fault counts as healthy")
		}
	})
}
