package guard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newGroup(t *testing.T, rdb redis.UniversalClient, o Options) *Group {
	t.Helper()
	if o.RedisTimeout == 0 {
		// These tests are about the guard's logic, not Redis latency: a
		// loaded machine (-race, packages in parallel) must not turn an
		// answer into a degraded one. Tests of timeouts set their own.
		o.RedisTimeout = 5 * time.Second
	}
	if o.LocalEntries == 0 {
		// These tests count, hold and fail the Group's Redis calls: with
		// the in-process tier on (the default) a hit would make none. The
		// tier has tests of its own (local_test.go, coherence_test.go),
		// and the Groups made by New directly here keep it on.
		o.LocalEntries = Disabled
	}
	g, err := New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// origin is a loader that counts its calls and can be held until released.
type origin struct {
	calls   atomic.Int64
	running atomic.Int64
	maxRun  atomic.Int64
	gate    chan struct{} // nil: do not block
	value   func(n int64) ([]byte, error)
}

func newOrigin(blocking bool) *origin {
	o := &origin{value: func(n int64) ([]byte, error) { return []byte("v" + strconv.FormatInt(n, 10)), nil }}
	if blocking {
		o.gate = make(chan struct{})
	}
	return o
}

func (o *origin) load(ctx context.Context) ([]byte, error) {
	n := o.calls.Add(1)
	r := o.running.Add(1)
	defer o.running.Add(-1)
	for {
		m := o.maxRun.Load()
		if r <= m || o.maxRun.CompareAndSwap(m, r) {
			break
		}
	}
	if o.gate != nil {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return o.value(n)
}

// counter counts hook events.
type counter struct{ n atomic.Int64 }

func (c *counter) add() { c.n.Add(1) }

// putEntry writes an entry for key whose windows are relative to Redis's
// clock: fresh for freshMS (negative: already stale), stale until staleMS
// after now.
func putEntry(t *testing.T, rdb redis.UniversalClient, g *Group, key, value string, freshMS, staleMS int64, fence int64) {
	t.Helper()
	now, err := rdb.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := now.UnixMilli()
	e := entry.Entry{FreshUntil: n + freshMS, StaleUntil: n + staleMS, Written: n - 1000, Fence: fence, Value: []byte(value), LoadDur: 10 * time.Millisecond}
	if err := rdb.Set(ctxT(t), g.names(key).entry, entry.Encode(e), time.Duration(staleMS)*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
}

// noLeaks returns a check, to defer, that no goroutine started since is
// left. Goroutines that belong to a Redis client rather than to the Group
// (go-redis starts some per cluster node it meets, ending them when the
// client closes) and the test kit's process reapers are not the Group's.
func noLeaks(t *testing.T) func() {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
		goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Server).launch.func1"),
		// go-redis probes a pool whose dials failed once a second until
		// it dials or is closed: it ends within a second of the close.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// go-redis dials a pool's new connection on a goroutine of its
		// own, which outlives a caller that gave up (a cancelled context,
		// a closed client) by at most DialTimeout: seen in a CI run,
		// blocked in connect(2) to a Sentinel topology's node under load.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn.func2"),
	}
	return func() { goleak.VerifyNone(t, opts...) }
}

// baseline waits until g holds nothing for key any more (no read flight,
// no load slot, no waiter registration, no lease in Redis) and its breaker
// is closed, failing t after d.
func baseline(t *testing.T, g *Group, rdb redis.UniversalClient, key string, d time.Duration) {
	t.Helper()
	nm := g.names(key)
	var why string
	redistest.Eventually(t, d, "the Group back to its baseline", func() bool {
		g.fmu.Lock()
		flights := len(g.flights)
		g.fmu.Unlock()
		g.lmu.Lock()
		loads := len(g.loads)
		g.lmu.Unlock()
		lease, err := rdb.Exists(context.Background(), nm.keys[1]).Result()
		switch {
		case flights != 0:
			why = fmt.Sprintf("%d read flights", flights)
		case loads != 0:
			why = fmt.Sprintf("%d load slots", loads)
		case g.hub.Waiters(nm.entry) != 0:
			why = "a waiter registered"
		case g.br.Open():
			why = "the breaker open"
		case err != nil || lease != 0:
			why = fmt.Sprintf("the lease held (%v)", err)
		default:
			return true
		}
		return false
	})
	if t.Failed() {
		t.Logf("last state: %s", why)
	}
}

func nil2(context.Context) ([]byte, error) { return nil, errors.New("loader must not run") }

func nil2Loader(t *testing.T) LoadFunc {
	return func(context.Context) ([]byte, error) {
		return nil, errors.New("loader must not run")
	}
}

// wantWindows checks the fresh and stale windows of key's stored entry.
func wantWindows(t *testing.T, rdb redis.UniversalClient, g *Group, key string, fresh, stale time.Duration) {
	t.Helper()
	e := entryOf(t, rdb, g, key)
	gotFresh := time.Duration(e.FreshUntil-e.Written) * time.Millisecond
	gotStale := time.Duration(e.StaleUntil-e.FreshUntil) * time.Millisecond
	if gotFresh != fresh || gotStale != stale {
		t.Fatalf("stored windows fresh %v, stale %v; want %v, %v", gotFresh, gotStale, fresh, stale)
	}
}

// entryOf reads and decodes key's entry.
func entryOf(t *testing.T, rdb redis.UniversalClient, g *Group, key string) entry.Entry {
	t.Helper()
	raw, err := rdb.Get(ctxT(t), g.names(key).entry).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	e, err := entry.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
