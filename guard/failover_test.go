package guard_test

// The guard on a master with replicas behind Sentinel, across failovers:
// what docs/failover.md states, checked on real processes.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Settings of the failover tests: a node gives up on a dead master fast and
// probes again soon, as a service behind Sentinel would be configured.
const (
	foRedisTimeout    = 250 * time.Millisecond
	foBreakerCooldown = 200 * time.Millisecond
	// foBound is the generous bound the tests assert on the time from a
	// replica's promotion to every node coordinating through it again; the
	// figures measured are logged (and in docs/failover.md).
	foBound = 5 * time.Second
)

// foClient makes a node's failover client fail fast, as the chaos suite's
// nodes do: go-redis's own retries would multiply RedisTimeout.
func foClient(o *redis.FailoverOptions) {
	o.MaxRetries = -1
	o.DialTimeout = foRedisTimeout
	o.PoolSize = 16
}

func foUniversal(o *redis.UniversalOptions) {
	o.MaxRetries = -1
	o.DialTimeout = foRedisTimeout
	o.PoolSize = 16
}

func foGroup(t *testing.T, rdb redis.UniversalClient, o guard.Options) *guard.Group {
	t.Helper()
	o.RedisTimeout = foRedisTimeout
	o.BreakerCooldown = foBreakerCooldown
	if o.LoadTimeout == 0 {
		o.LoadTimeout = time.Minute
	}
	g, err := guard.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// fleetOrigin is the loader of every node: it counts the loads of each key
// and how many run at once across the fleet, from a moment on.
type fleetOrigin struct {
	mu       sync.Mutex
	calls    map[string]int
	running  map[string]int
	watching bool // count overlaps from now on
	overlaps []string
}

func newFleetOrigin() *fleetOrigin {
	return &fleetOrigin{calls: map[string]int{}, running: map[string]int{}}
}

func (o *fleetOrigin) load(node, key string) guard.LoadFunc {
	return func(ctx context.Context) ([]byte, error) {
		o.mu.Lock()
		o.calls[key]++
		n := o.calls[key]
		o.running[key]++
		if o.running[key] > 1 && o.watching && len(o.overlaps) < 20 {
			o.overlaps = append(o.overlaps, fmt.Sprintf("%d loads of %s at once (latest on %s)", o.running[key], key, node))
		}
		o.mu.Unlock()
		defer func() {
			o.mu.Lock()
			o.running[key]--
			o.mu.Unlock()
		}()
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte(key + "#" + strconv.Itoa(n)), nil
	}
}

func (o *fleetOrigin) watch() {
	o.mu.Lock()
	o.watching = true
	o.mu.Unlock()
}

func (o *fleetOrigin) result() (calls map[string]int, overlaps []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := make(map[string]int, len(o.calls))
	for k, v := range o.calls {
		c[k] = v
	}
	return c, append([]string(nil), o.overlaps...)
}

// coordination records the answers of calls while it is on, to find, per
// node, the first answer that went through Redis (any status but
// Degraded) of a call started after a moment.
type coordination struct {
	mu      sync.Mutex
	on      bool
	answers []answer
}

type answer struct {
	node       string
	start, end time.Time
	coord      bool
}

func (c *coordination) record(node string, start time.Time, r guard.Result, err error) {
	end := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.answers = append(c.answers, answer{node, start, end, err == nil && r.Status != guard.Degraded})
	}
}

func (c *coordination) setOn(on bool) {
	c.mu.Lock()
	c.on = on
	if on {
		c.answers = c.answers[:0]
	}
	c.mu.Unlock()
}

// worst returns how long after since the last of n nodes gave its first
// coordinated answer to a call started after since, and whether all did.
func (c *coordination) worst(n int, since time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := map[string]time.Time{}
	for _, a := range c.answers {
		if a.coord && !a.start.Before(since) {
			if f, ok := first[a.node]; !ok || a.end.Before(f) {
				first[a.node] = a.end
			}
		}
	}
	if len(first) < n {
		return 0, false
	}
	var w time.Duration
	for _, at := range first {
		w = max(w, at.Sub(since))
	}
	return w, true
}

// watchPromotion polls the replicas until one answers as a master and
// returns when that was first seen (zero if stop came first).
func watchPromotion(t *testing.T, replicas []*redistest.Server, stop <-chan struct{}) <-chan time.Time {
	clients := make([]*redis.Client, len(replicas))
	for i, r := range replicas {
		clients[i] = r.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.ReadTimeout = 200 * time.Millisecond })
	}
	done := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, c := range clients {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				info, err := c.Info(ctx, "replication").Result()
				cancel()
				if err == nil && strings.Contains(info, "role:master") {
					done <- time.Now()
					return
				}
			}
			select {
			case <-stop:
				done <- time.Time{}
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

// TestFailoverCoordinatesAgain: callers on three nodes keep calling Do on
// keys that go stale every 100ms while the master is killed and a replica
// promoted. Every node coordinates through the new master again within
// foBound of the promotion (the figures are logged), and from
// then on at most one load of a key runs in the fleet at a time; a cold
// key asked for by every caller at once is loaded once.
func TestFailoverCoordinatesAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(st *redistest.Sentinel) redis.UniversalClient
	}{
		{"NewFailoverClient", func(st *redistest.Sentinel) redis.UniversalClient { return st.FailoverClient(t, foClient) }},
		{"NewUniversalClient", func(st *redistest.Sentinel) redis.UniversalClient { return st.UniversalClient(t, foUniversal) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := redistest.StartSentinel(t, redistest.SentinelOptions{})
			const nodes, callers, keys = 3, 4, 8
			org := newFleetOrigin()
			var groups []*guard.Group
			for range nodes {
				groups = append(groups, foGroup(t, tc.client(st), guard.Options{
					FreshFor: 100 * time.Millisecond, StaleFor: time.Minute, LockTTL: 2 * time.Second,
				}))
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = redistest.Key(t, strconv.Itoa(i))
			}
			var coord coordination
			var calls, degraded atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for n, g := range groups {
				node := "n" + strconv.Itoa(n)
				for i := range callers {
					wg.Go(func() {
						for j := i; ; j++ {
							select {
							case <-stop:
								return
							default:
							}
							key := names[j%keys]
							start := time.Now()
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							r, err := g.Do(ctx, key, org.load(node, key))
							cancel()
							calls.Add(1)
							if err == nil && r.Status == guard.Degraded {
								degraded.Add(1)
							}
							if err != nil && !errors.Is(err, guard.ErrBackoff) {
								t.Errorf("%s: Do(%s): %v", node, key, err)
							}
							coord.record(node, start, r, err)
							time.Sleep(time.Millisecond)
						}
					})
				}
			}
			defer func() {
				close(stop)
				wg.Wait()
			}()
			// Coordinating before the failover, too.
			coord.setOn(true)
			since := time.Now()
			redistest.Eventually(t, 10*time.Second, "every node to coordinate before the failover", func() bool {
				_, ok := coord.worst(nodes, since)
				return ok
			})

			noPromotion := make(chan struct{})
			promotedAt := watchPromotion(t, st.Replicas(t), noPromotion)
			coord.setOn(true)
			killedAt := time.Now()
			st.KillMaster(t)
			knownAt := time.Now()
			close(noPromotion)
			promoted := <-promotedAt
			if promoted.IsZero() {
				t.Fatal("no replica was seen answering as a master")
			}
			// Calls started after the promotion: none can be served by a
			// flight that read the dead master.
			redistest.Eventually(t, foBound, "every node to coordinate through the new master", func() bool {
				_, ok := coord.worst(nodes, promoted)
				return ok
			})
			coord.setOn(false)
			back, _ := coord.worst(nodes, promoted)
			backAt := promoted.Add(back)
			t.Logf("master killed; replica promoted %v later; every node coordinating again %v after the kill, %v after the promotion (the Sentinels settled %v after the kill)",
				promoted.Sub(killedAt).Round(time.Millisecond), backAt.Sub(killedAt).Round(time.Millisecond),
				back.Round(time.Millisecond), knownAt.Sub(killedAt).Round(time.Millisecond))
			if back > foBound {
				t.Errorf("nodes coordinated again %v after the promotion; bound %v", back, foBound)
			}

			// From a second after every node is back: one load of a key at
			// a time across the fleet, for 2s of refreshes.
			time.Sleep(time.Second)
			org.watch()
			before, _ := org.result()
			time.Sleep(2 * time.Second)
			after, overlaps := org.result()
			loads := 0
			for k, n := range after {
				loads += n - before[k]
			}
			for _, o := range overlaps {
				t.Errorf("after the failover: %s", o)
			}
			t.Logf("after recovery: %d loads of %d keys in 2s (keys stale every 100ms), %d overlapping; %d calls in all, %d degraded",
				loads, keys, len(overlaps), calls.Load(), degraded.Load())
			if loads == 0 {
				t.Error("no refresh after the failover")
			}

			// A cold key, asked for by every caller of every node at once:
			// one load.
			cold := redistest.Key(t, "cold")
			coldOrg := newFleetOrigin()
			var herd sync.WaitGroup
			for n, g := range groups {
				for range 8 {
					herd.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if _, err := g.Do(ctx, cold, coldOrg.load("n"+strconv.Itoa(n), cold)); err != nil {
							t.Errorf("cold key: %v", err)
						}
					})
				}
			}
			herd.Wait()
			if c, _ := coldOrg.result(); c[cold] != 1 {
				t.Errorf("a cold key asked for by %d callers on %d nodes after the failover was loaded %d times, want 1", nodes*8, nodes, c[cold])
			}
		})
	}
}

// entryFence reads the fence of the entry stored for key (default
// namespace), or 0 when there is none.
func entryFence(t *testing.T, rdb redis.UniversalClient, key string) (int64, string) {
	t.Helper()
	raw, err := rdb.Get(context.Background(), hashtag.KeyBase("stampede:", key)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	head, payload, ok := strings.Cut(raw, "\n")
	f := strings.Split(head, ",")
	if !ok || len(f) < 7 {
		t.Fatalf("entry of %s: bad header %q", key, head)
	}
	fence, err := strconv.ParseInt(f[5], 10, 64)
	if err != nil {
		t.Fatalf("entry of %s: fence %q: %v", key, f[5], err)
	}
	return fence, payload
}

// intOf reads an integer string key, 0 when missing.
func intOf(t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), name).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", name, err)
	}
	return v
}

// TestFailoverFences: a failover that loses the fence counter's last
// increments (and a lease) does not send fences back, and the fill of the
// lease lost with it, which loaded before the failover, does not overwrite
// the newer fill made after it.
//
// Node A fills a key (replicated), then, with the replicas cut off,
// invalidates it and starts a refresh whose load is held: its lease and
// the counter's increments exist on the master only. The master is
// killed and a replica promoted; node B invalidates and refills the key
// on the new master. B's fences are above every fence minted before the
// failover (the counter lost its last increments: the Redis clock floors
// them), and when A's held load ends, its fill is rejected: B's value
// stays.
func TestFailoverFences(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	admin := st.FailoverClient(t)
	var rejectedA atomic.Int64
	gA := foGroup(t, st.FailoverClient(t, foClient), guard.Options{
		FreshFor: time.Minute, LockTTL: 3 * time.Second,
		Hooks: guard.Hooks{FillRejected: func(string) { rejectedA.Add(1) }},
	})
	gB := foGroup(t, st.FailoverClient(t, foClient), guard.Options{FreshFor: time.Minute, LockTTL: 3 * time.Second})
	ctx := t.Context()
	key := redistest.Key(t)
	base := hashtag.KeyBase("stampede:", key)
	value := func(v string) guard.LoadFunc {
		return func(context.Context) ([]byte, error) { return []byte(v), nil }
	}

	if _, err := gA.Do(ctx, key, value("v1")); err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Replicated(ctx, admin, redistest.Key(t, "wait"), 2, 5*time.Second); err != nil || n != 2 {
		t.Fatalf("WAIT 2 = %d, %v", n, err)
	}
	replicated := intOf(t, admin, base+":fence")

	st.CutReplicas(t)
	if err := gA.Invalidate(ctx, key); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		r, err := gA.Do(context.Background(), key, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("A, loaded before the failover"), nil
		})
		if err == nil && string(r.Value) != "A, loaded before the failover" {
			err = fmt.Errorf("A's caller got %q (%v)", r.Value, r.Status)
		}
		doneA <- err
	}()
	<-started
	leaseA, err := admin.Get(ctx, base+":lease").Int64()
	if err != nil {
		t.Fatalf("A's lease: %v", err)
	}
	lost := intOf(t, admin, base+":fence")
	if lost < leaseA || leaseA <= replicated {
		t.Fatalf("before the failover: counter %d, A's lease %d, replicated counter %d", lost, leaseA, replicated)
	}

	_, promoted := st.KillMaster(t)
	direct := promoted.Client(t)
	if got := intOf(t, direct, base+":fence"); got >= lost {
		t.Fatalf("the promoted replica's fence counter is %d, not behind the lost %d: nothing was lost", got, lost)
	}
	if n, _ := direct.Exists(ctx, base+":lease").Result(); n != 0 {
		t.Fatal("A's lease reached the promoted replica")
	}
	t.Logf("fence counter: %d minted before the failover, %d replicated (the promoted replica's)", lost, intOf(t, direct, base+":fence"))

	// B, after the failover: the entry v1 came back with the replica, so it
	// invalidates (minting) and loads anew.
	redistest.Eventually(t, 10*time.Second, "B to invalidate on the new master", func() bool {
		return gB.Invalidate(ctx, key) == nil
	})
	r, err := gB.Do(ctx, key, value("B, loaded after the failover"))
	if err != nil || r.Status != guard.Miss {
		t.Fatalf("B: Do = %v, %v; want a Miss it loaded", r.Status, err)
	}
	fenceB, payload := entryFence(t, admin, key)
	if payload != "B, loaded after the failover" {
		t.Fatalf("stored %q after B's fill", payload)
	}
	if fenceB <= lost {
		t.Fatalf("B's fence %d is not above %d, minted before the failover: fences went back", fenceB, lost)
	}
	t.Logf("B's fence %d is %v above the last fence minted before the failover (the Redis clock in µs floors it)",
		fenceB, time.Duration(fenceB-lost)*time.Microsecond)

	// A coordinates again (so its fill reaches Redis), then its held load
	// ends: the fill of a lease from before the failover is rejected.
	redistest.Eventually(t, 10*time.Second, "A to coordinate through the new master", func() bool {
		r, err := gA.Do(ctx, redistest.Key(t, "probe"), value("probe"))
		return err == nil && r.Status != guard.Degraded
	})
	close(release)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if _, payload := entryFence(t, admin, key); payload != "B, loaded after the failover" {
		t.Fatalf("stored %q after A's late fill: a fill fenced before the failover overwrote a newer one", payload)
	}
	if rejectedA.Load() == 0 {
		t.Error("A's fill was not reported rejected (Hooks.FillRejected)")
	}
}
