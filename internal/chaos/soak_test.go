package chaos

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
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
	soakDuration = flag.Duration("chaos.duration", 20*time.Second, "TestChaosSoak: how long each topology's soak runs")
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

// Shares of the soak's misbehaving callers and loaders.
const (
	impatientShare = 0.30  // calls whose caller leaves at a random moment
	panicShare     = 0.01  // loads that panic
	goexitShare    = 0.005 // loads that call runtime.Goexit
)

// soakEnv is what a soak runs on: a topology, its nodes, and the faults it
// can inject.
type soakEnv struct {
	nodes []*node
	// admin reads the entries and leases straight from the servers.
	admin redis.UniversalClient
	// inject injects one random fault and returns its name and how to
	// clear it.
	inject func(rng *rand.Rand) (string, func())
	// conns, when set, returns how many node connections the servers hold
	// (checked to drop to 0 at the end).
	conns func() (int, string)
	// closeLinks closes what carries the nodes' traffic, after the nodes.
	closeLinks func()
	leakOK     []goleak.Option
	// epoch, when set, marks failover windows for the version monitor
	// (see versionMonitor.epoch).
	epoch func() int64
	// figures, when set, adds the topology's own figures to the summary.
	figures func() string
}

// TestChaosSoak: 4 nodes × 8 callers × 16 keys under randomised faults for
// -chaos.duration, on a standalone server (a node's link slowed past
// RedisTimeout, blackholed, reset or cut; the server frozen or pausing its
// clients), on a 3-master cluster (a master frozen or pausing its
// clients) and on a master with two replicas behind three Sentinels (the
// master killed, failed over, frozen or pausing its clients: see
// soakSentinel). A share of the callers leave at random moments, and some
// loads panic or call runtime.Goexit. It checks:
//
//   - every call returns a value, or an error the guard documents, within
//     callBound;
//   - per key, the version stored in Redis never decreases (on Sentinel,
//     except in a failover window: fills the promoted replica had not
//     received are lost, and counted);
//   - while Redis is healthy, at most one load of a key runs in the fleet;
//   - after each fault ends, every node coordinates through Redis again
//     (answers other than Degraded) within BreakerCooldown + 1s;
//   - after Close, no lease is renewed: every lease lapses within LockTTL;
//   - at the end, goroutines and server connections are back to baseline.
func TestChaosSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs for -chaos.duration; skipped with -short")
	}
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		// Direct, and named so that its own connections (its pool grows with
		// the monitor) are not counted among the nodes'.
		admin := srv.Client(t, func(o *redis.Options) { o.ClientName = adminName })
		if n, list := nodeConns(t, admin); n != 0 {
			t.Fatalf("%d connections before the nodes started:\n%s", n, list)
		}
		env := &soakEnv{admin: admin,
			conns: func() (int, string) { return nodeConns(t, admin) },
			leakOK: []goleak.Option{
				// Toxiproxy's accept loops end with their proxy at cleanup.
				goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).server"),
				goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).freeBlocker"),
				// A toxic's pipe of a link Toxiproxy tore down mid-fault
				// can outlive it; it is the proxy's, not a node's.
				goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
			},
		}
		env.inject = func(rng *rand.Rand) (string, func()) { return injectRandom(t, rng, srv, admin, env.nodes) }
		env.closeLinks = func() {
			for _, n := range env.nodes {
				n.proxy.Down(t) // closes the proxied connections to the server
			}
		}
		soak(t, env, func(i int, opts guard.Options) *node { return newNode(t, fmt.Sprint("n", i), srv, opts) })
	})
	t.Run("cluster", func(t *testing.T) {
		// Redis's own default node timeout (15s): a master frozen for a
		// second or two is a slow node, as in production, not a failed
		// one that takes the whole cluster down (CLUSTERDOWN) until the
		// FAIL flag clears, two node timeouts after it is back.
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
		admin := cl.Client(t)
		env := &soakEnv{admin: admin,
			leakOK: []goleak.Option{
				// go-redis starts these per cluster node a client meets and
				// ends them when the client closes.
				goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
			},
		}
		env.inject = func(rng *rand.Rand) (string, func()) {
			m := cl.Masters[rng.IntN(len(cl.Masters))]
			if rng.IntN(2) == 0 {
				m.Freeze(t)
				return "master frozen", func() { m.Thaw(t) }
			}
			direct := m.Client(t)
			ms := 300 + rng.IntN(1200)
			if err := direct.Do(ctxT(t, 5*time.Second), "CLIENT", "PAUSE", fmt.Sprint(ms), "ALL").Err(); err != nil {
				t.Errorf("CLIENT PAUSE: %v", err)
			}
			return "master pauses clients", func() {
				redistest.Eventually(t, 10*time.Second, "the pause to end", func() bool {
					return direct.Ping(ctxT(t, time.Second)).Err() == nil
				})
				_ = direct.Close()
			}
		}
		env.closeLinks = func() {}
		soak(t, env, func(i int, opts guard.Options) *node {
			rdb := cl.Client(t, func(o *redis.ClusterOptions) {
				o.MaxRetries = -1
				o.DialTimeout = redisTimeout
				o.ContextTimeoutEnabled = true
				o.PoolSize = 16
			})
			return &node{name: fmt.Sprint("n", i), rdb: rdb, g: newGroup(t, rdb, opts)}
		})
	})
	t.Run("sentinel", soakSentinel)
}

func soak(t *testing.T, env *soakEnv, newNode func(i int, opts guard.Options) *node) {
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -chaos.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ignore := goleak.IgnoreCurrent()

	var h health
	var bad violations
	for i := range soakNodes {
		opts := scenarioOptions()
		opts.Hooks = guard.Hooks{
			RedisError: func(string, error) { h.mark() },
			Breaker:    func(bool) { h.mark() },
		}
		env.nodes = append(env.nodes, newNode(i, opts))
	}
	nodes := env.nodes

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
	var panics, goexits atomic.Int64
	org.misbehave = func() {
		switch x := rand.Float64(); {
		case x < panicShare:
			panics.Add(1)
			panic("soak: loader panics")
		case x < panicShare+goexitShare:
			goexits.Add(1)
			runtime.Goexit()
		}
	}

	keys := keysOf(t, soakKeys)
	c := newCalls()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		for i := range soakCallers {
			crng := rand.New(rand.NewPCG(seed+uint64(i), uint64(len(n.name))))
			wg.Go(func() { soakCaller(n, org, keys, i, crng, c, &bad, stop) })
		}
	}
	mon := &versionMonitor{admin: env.admin, keys: keys, bad: &bad, epoch: env.epoch}
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		mon.run(stop)
	}()

	injected := map[string]int{}
	deadline := time.Now().Add(*soakDuration)
	var worstRecovery time.Duration
	var recoveries []time.Duration
	recoveryBound := breakerCooldown + time.Second
	for time.Now().Before(deadline) {
		// A healthy gap, then one fault for a while.
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		if !time.Now().Before(deadline) {
			break
		}
		h.begin()
		kind, clear := env.inject(rng)
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
		recoveries = append(recoveries, rec)
		if rec > recoveryBound {
			bad.add("the nodes coordinated again %v after %s ended; bound %v", rec, kind, recoveryBound)
		}
		worstRecovery = max(worstRecovery, rec)
	}
	close(stop)
	wg.Wait()
	<-monDone

	// Close the Groups, not yet their clients: a watchdog renewing a lease
	// after Close would show as a lease outliving LockTTL.
	for _, n := range nodes {
		_ = n.g.Close()
	}
	leases := make([]string, len(keys))
	for i, k := range keys {
		leases[i] = hashtag.Base("stampede:", k) + ":lease"
	}
	closed := time.Now()
	for {
		held := 0
		for _, l := range leases {
			if n, err := env.admin.Exists(ctxT(t, 5*time.Second), l).Result(); err != nil || n != 0 {
				held++
			}
		}
		if held == 0 {
			break
		}
		if time.Since(closed) > lockTTL+time.Second {
			bad.add("%d leases still held %v after Close (LockTTL %v): renewed after Close", held, time.Since(closed).Round(time.Millisecond), lockTTL)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, n := range nodes {
		n.close()
	}
	env.closeLinks()
	if env.conns != nil {
		var left string
		deadline = time.Now().Add(10 * time.Second)
		for n := 1; n > 0; {
			if n, left = env.conns(); n > 0 && time.Now().After(deadline) {
				t.Fatalf("%d node connections still open on the server:\n%s", n, left)
			} else if n > 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	goleak.VerifyNone(t, append(env.leakOK, ignore)...)

	n, _, worst := c.summary()
	var kinds []string
	total := 0
	for k, v := range injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(kinds)
	slices.Sort(recoveries)
	var p50 time.Duration
	if len(recoveries) > 0 {
		p50 = recoveries[len(recoveries)/2]
	}
	t.Logf("recovery after a fault: median %v, worst %v, over the bound %v: %d of %d",
		p50.Round(time.Millisecond), worstRecovery.Round(time.Millisecond), recoveryBound,
		len(recoveries)-sort.Search(len(recoveries), func(i int) bool { return recoveries[i] > recoveryBound }), len(recoveries))
	extra := ""
	if env.figures != nil {
		extra = ", " + env.figures()
	}
	if env.epoch != nil {
		extra += fmt.Sprintf(", stored versions gone back across a failover %d", mon.wentBack.Load())
	}
	t.Logf("soak %v: %d calls (%d stale, %d degraded, %d cancelled by their callers), %d origin loads (%d panicked, %d called Goexit), %d faults (%s)%s, violations %d, worst call %v, worst recovery %v",
		*soakDuration, n, c.status(guard.Stale), c.status(guard.Degraded), c.cancelled(), org.totalCalls(), panics.Load(), goexits.Load(), total,
		strings.Join(kinds, ", "), extra, bad.count(), worst.Round(time.Millisecond), worstRecovery.Round(time.Millisecond))
	for _, v := range bad.list {
		t.Error(v)
	}
}

// soakCaller calls Do in a loop, checking each answer. A share of its
// calls leave at a random moment: their ctx is cancelled after a random
// delay up to 3 origin latencies.
func soakCaller(n *node, org *origin, keys []string, i int, rng *rand.Rand, c *calls, bad *violations, stop <-chan struct{}) {
	for j := i; ; j++ {
		select {
		case <-stop:
			return
		default:
		}
		key := keys[j%len(keys)]
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callStartKey{}, start), 2*callBound)
		impatient := rng.Float64() < impatientShare
		if impatient {
			time.AfterFunc(time.Duration(rng.Int64N(int64(3*originLatency))), cancel)
		}
		r, err := n.g.Do(ctx, key, org.loader(n.name, key))
		cancel()
		took := time.Since(start)
		switch {
		case errors.Is(err, context.Canceled) && impatient:
			c.leave()
			continue
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
func injectRandom(t *testing.T, rng *rand.Rand, srv *redistest.Server, admin *redis.Client, nodes []*node) (string, func()) {
	n := nodes[rng.IntN(len(nodes))]
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

// versionMonitor checks the versions stored for keys.
type versionMonitor struct {
	admin redis.UniversalClient
	keys  []string
	bad   *violations
	// seen, when set, is told each version read.
	seen func(key string, v int64)
	// epoch, when set, counts the edges of failover windows: odd while a
	// fault that may fail the master over is in force. A version may go
	// back when read in such a window or across one (the fills the
	// promoted replica never received are lost: asynchronous replication),
	// which wentBack counts; between two reads of one even epoch it may
	// not.
	epoch    func() int64
	wentBack atomic.Int64
}

// run reads every key's entry straight from the server (not through a
// proxy) every 20ms and checks that its version never decreases, except
// as epoch allows, until stop is closed.
func (m *versionMonitor) run(stop <-chan struct{}) {
	names := make([]string, len(m.keys))
	for i, k := range m.keys {
		names[i] = hashtag.Base("stampede:", k)
	}
	high := make([]int64, len(m.keys))
	epochs := make([]int64, len(m.keys))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		// One GET per key, pipelined: a cluster splits the pipeline by node
		// (an MGET would cross slots).
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		cmds, _ := m.admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, n := range names {
				p.Get(ctx, n)
			}
			return nil
		})
		cancel()
		var epoch int64
		if m.epoch != nil {
			epoch = m.epoch()
		}
		for i, cmd := range cmds {
			s, err := cmd.(*redis.StringCmd).Result()
			if err != nil {
				continue // missing, or the server is frozen or paused
			}
			nl := strings.IndexByte(s, '\n')
			if nl < 0 || !strings.HasPrefix(s, "~1,") || strings.HasSuffix(s[:nl], ",n") || strings.HasSuffix(s[:nl], ",e") {
				continue // negative or error marker: no version
			}
			key := m.keys[i]
			ver, err := versionOf(key, bytes.Clone([]byte(s[nl+1:])))
			if err != nil {
				m.bad.add("stored entry of %s: %v", key, err)
				continue
			}
			switch {
			case ver >= high[i]:
				high[i] = ver
			case m.epoch != nil && (epoch != epochs[i] || epoch%2 == 1):
				m.wentBack.Add(1) // lost in a failover
				high[i] = ver
			default:
				m.bad.add("stored version of %s went back from %d to %d", key, high[i], ver)
			}
			epochs[i] = epoch
			if m.seen != nil {
				m.seen(key, ver)
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
			m := &versionMonitor{admin: admin, keys: []string{key}, bad: &bad,
				seen: func(_ string, v int64) { saw5.Store(saw5.Load() || v == 5) }}
			m.run(stop)
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
