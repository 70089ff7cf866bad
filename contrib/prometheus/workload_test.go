package stampedeprom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/contrib/metrics"
	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

// The workload of TestDashboardOnPrometheus: two nodes of one fleet (two
// Groups on one real redis-server, each with its own Metrics served on a
// loopback /metrics of its own, as two processes would) driven through
// every event the dashboard and the rules show, then Redis stopped.

const workNamespace = "dash:"

// probe records the events the workload waits for, from the hooks the
// metrics read. The workload polls it: it never sleeps to let things
// happen.
type probe struct {
	tier                                  atomic.Pointer[string] // the last LocalTier state
	localHits, busy, notified, coalesced  atomic.Int64
	refreshErrs, rejected, corrupt, opens atomic.Int64
	renewals                              atomic.Int64
}

func (p *probe) hooks() guard.Hooks {
	return guard.Hooks{
		LocalTier: func(on bool, why string) {
			if on {
				why = "on"
			}
			p.tier.Store(&why)
		},
		Hit: func(_ string, _ time.Duration, local bool) {
			if local {
				p.localHits.Add(1)
			}
		},
		Lease: func(_ string, won bool) {
			if !won {
				p.busy.Add(1)
			}
		},
		Woken: func(_ string, notified bool, _ time.Duration) {
			if notified {
				p.notified.Add(1)
			}
		},
		Coalesced:    func(string) { p.coalesced.Add(1) },
		RefreshError: func(string, error) { p.refreshErrs.Add(1) },
		FillRejected: func(string) { p.rejected.Add(1) },
		Corrupt:      func(string, error) { p.corrupt.Add(1) },
		Breaker: func(open bool) {
			if open {
				p.opens.Add(1)
			}
		},
	}
}

func (p *probe) tierState() string {
	if s := p.tier.Load(); s != nil {
		return *s
	}
	return ""
}

// node is one instance of the fleet.
type node struct {
	name   string
	g      *guard.Group
	rdb    *redis.Client
	m      *stampedeprom.Metrics
	p      *probe
	target string // host:port of its /metrics
}

func newNode(t *testing.T, name string, srv *redistest.Server) *node {
	t.Helper()
	// No retries: once Redis is stopped, each call fails at once.
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	m, reg := newMetrics(t, stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
	n := &node{name: name, rdb: rdb, m: m, p: &probe{}}
	g, err := guard.New(rdb, guard.Options{
		Namespace:     workNamespace,
		RedisTimeout:  200 * time.Millisecond,
		MaxValueBytes: 1 << 10,
		// Once open, the breaker stays open for the rest of the test: no
		// probe to a stopped Redis changes what Prometheus sees last.
		BreakerCooldown: time.Hour,
		Hooks:           guard.MergeHooks(m.GuardHooks(), n.p.hooks()),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	n.g = g
	srvMetrics := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srvMetrics.Close)
	n.target = strings.TrimPrefix(srvMetrics.URL, "http://")
	return n
}

func value(v string) guard.LoadFunc {
	return func(context.Context) ([]byte, error) { return []byte(v), nil }
}

var errOrigin = errors.New("origin down")

func failing(context.Context) ([]byte, error) { return nil, errOrigin }

// eventually polls cond every 2ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

// runWorkload drives a and b (of one fleet, on srv) through hits (from
// Redis and from the in-process tier), misses, stale values, coalesced
// callers, loads of every result, leases won and busy, a waiter woken by
// a fill, a rejected fill, a failed refresh, a corrupt entry, an
// oversize value, a lock obtained, renewed, waited for and released;
// then stops Redis and makes both nodes load without it, breakers open.
func runWorkload(t *testing.T, srv *redistest.Server, a, b *node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	do := func(n *node, key string, load guard.LoadFunc, opts ...guard.CallOption) guard.Result {
		t.Helper()
		r, err := n.g.Do(ctx, key, load, opts...)
		if err != nil {
			t.Fatalf("%s: Do(%q): %v", n.name, key, err)
		}
		return r
	}

	eventually(t, "the in-process tier on, on both nodes", func() bool {
		return a.p.tierState() == "on" && b.p.tierState() == "on"
	})

	// A miss on a (lease won, load ok), then a hit from Redis on b, then
	// hits from b's in-process tier.
	if r := do(a, "user:1", value("one")); r.Status != guard.Miss {
		t.Fatalf("first Do: %v, want miss", r.Status)
	}
	if r := do(b, "user:1", value("one")); r.Status != guard.Hit {
		t.Fatalf("b's first Do: %v, want a hit", r.Status)
	}
	eventually(t, "a hit from b's in-process tier", func() bool {
		do(b, "user:1", value("one"))
		return b.p.localHits.Load() > 0
	})

	// Loads answering not found and failing.
	if _, err := a.g.Do(ctx, "user:404", func(context.Context) ([]byte, error) { return nil, guard.ErrNotFound }); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("not found: %v", err)
	}
	if _, err := a.g.Do(ctx, "user:500", failing); !errors.Is(err, errOrigin) {
		t.Fatalf("failing load: %v, want %v", err, errOrigin)
	}

	// A value fresh for 20ms, then served stale while its refresh fails.
	do(a, "user:2", value("two"), guard.WithFreshFor(20*time.Millisecond))
	eventually(t, "a failed refresh of a stale value", func() bool {
		do(a, "user:2", failing)
		return a.p.refreshErrs.Load() > 0
	})

	// Callers of a sharing one flight. A caller that comes after the load
	// ended gets a hit instead: then a new key is tried.
	for i := 0; a.p.coalesced.Load() == 0; i++ {
		if ctx.Err() != nil {
			t.Fatal("no coalesced call before the deadline")
		}
		key := fmt.Sprintf("hot:%d", i)
		const callers = 4
		var started sync.WaitGroup
		started.Add(callers)
		load := func(context.Context) ([]byte, error) {
			started.Wait() // every caller has called Do
			return []byte("hot"), nil
		}
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				started.Done()
				_, _ = a.g.Do(ctx, key, load)
			})
		}
		wg.Wait()
	}

	// a wins a lease and loads slowly; b finds the lease busy and waits,
	// woken by a's fill.
	loading, release := make(chan struct{}), make(chan struct{})
	done := make(chan guard.Result, 1)
	go func() {
		r, _ := a.g.Do(ctx, "user:3", func(context.Context) ([]byte, error) {
			close(loading)
			<-release
			return []byte("three"), nil
		})
		done <- r
	}()
	<-loading
	waited := make(chan guard.Result, 1)
	go func() {
		r, _ := b.g.Do(ctx, "user:3", value("three"))
		waited <- r
	}()
	eventually(t, "b finding the lease busy", func() bool { return b.p.busy.Load() > 0 })
	close(release)
	<-done
	if r := <-waited; r.Status != guard.Shared {
		t.Fatalf("b's wait: %v, want shared", r.Status)
	}
	if b.p.notified.Load() == 0 {
		t.Fatal("b was not woken by the fill's notification")
	}

	// An Invalidate lands during a's load: its fill is rejected.
	loading, release = make(chan struct{}), make(chan struct{})
	go func() {
		r, _ := a.g.Do(ctx, "user:4", func(context.Context) ([]byte, error) {
			close(loading)
			<-release
			return []byte("four"), nil
		})
		done <- r
	}()
	<-loading
	if err := b.g.Invalidate(ctx, "user:4"); err != nil {
		t.Fatal(err)
	}
	close(release)
	<-done
	eventually(t, "a's fill rejected", func() bool { return a.p.rejected.Load() > 0 })

	// Garbage under a key's entry name.
	if err := a.rdb.Set(ctx, hashtag.KeyBase(workNamespace, "user:5"), "not an entry", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the corrupt entry reported", func() bool {
		do(a, "user:5", value("five"))
		return a.corrupt()
	})

	// A value over MaxValueBytes.
	if r := do(a, "user:6", value(strings.Repeat("x", 2<<10))); !r.Oversize {
		t.Fatal("a 2 KiB value not reported oversize")
	}

	lockWorkload(ctx, t, a)

	// Redis goes away: both nodes' breakers open, their tiers go off, and
	// they load every key themselves, with no lease: far more loads than
	// leases won.
	srv.Stop(t)
	for _, n := range []*node{a, b} {
		eventually(t, n.name+"'s breaker open", func() bool {
			_, _ = n.g.Do(ctx, "down:probe", value("v"))
			return n.p.opens.Load() > 0
		})
		for i := range 30 {
			if r := do(n, fmt.Sprintf("down:%d", i), value("v")); r.Status != guard.Degraded {
				t.Fatalf("%s with Redis stopped: %v, want degraded", n.name, r.Status)
			}
		}
		eventually(t, n.name+"'s tier off", func() bool {
			s := n.p.tierState()
			return s == "lost" || s == "connecting"
		})
	}
}

func (n *node) corrupt() bool { return n.p.corrupt.Load() > 0 }

// lockWorkload obtains a lock with a watchdog on n's Redis, waits for a
// renewal, releases it to a second caller asking with WaitFor (queued
// behind the first or not, as the scheduler has it), and releases that.
func lockWorkload(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	hooks := n.m.LockHooks()
	renewed := hooks.Renewed
	hooks.Renewed = func(key string, err error) {
		renewed(key, err)
		if err == nil {
			n.p.renewals.Add(1)
		}
	}
	locks := lock.New(n.rdb, lock.Options{Hooks: hooks})
	t.Cleanup(func() { _ = locks.Close() })
	l, err := locks.Obtain(ctx, "report", 150*time.Millisecond, lock.AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a watchdog renewal", func() bool { return n.p.renewals.Load() > 0 })
	second := make(chan *lock.Lock, 1)
	go func() {
		l2, err := locks.Obtain(ctx, "report", time.Second, lock.WaitFor(10*time.Second))
		if err != nil {
			t.Error(err)
		}
		second <- l2
	}()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l2 := <-second; l2 != nil {
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
