package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFreshnessOnRedisClock: entries are judged on the Redis server's clock.
// Redis here runs 26 years behind this process; a value filled a moment ago
// must still be fresh, although by this process's clock it expired long ago.
func TestFreshnessOnRedisClock(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	mr.SetTime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	g := newGroup(t, rdb, Options{FreshFor: time.Minute, Jitter: Disabled})
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
	for range 3 {
		if _, err := g.Do(ctxT(t), "k", load); err != nil {
			t.Fatal(err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1: freshness was judged on the wrong clock", loads.Load())
	}
	raw, err := rdb.Get(ctxT(t), g.names("k").entry).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.UnixMilli(e.freshUntil).UTC().Year(); got != 2000 {
		t.Fatalf("fresh-until in year %d, want the Redis clock's 2000", got)
	}
}

// TestWatchdogKeepsLongLoadLeased: a load that runs for several lease
// lengths keeps its lease (renewed every LockTTL/3), so another node waits
// instead of loading too.
func TestWatchdogKeepsLongLoadLeased(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const ttl = 150 * time.Millisecond
		a := newGroup(t, rdb, Options{LockTTL: ttl})
		b := newGroup(t, rdb, Options{LockTTL: ttl, WaitTimeout: time.Minute})
		key := redistest.Key(t)
		org := newOrigin(true)
		done := make(chan error, 2)
		go func() { _, err := a.Do(ctxT(t), key, org.load); done <- err }()
		redistest.Eventually(t, 10*time.Second, "the load to start", func() bool { return org.calls.Load() == 1 })
		go func() { _, err := b.Do(ctxT(t), key, org.load); done <- err }()
		// Watch the lease for 4 lease lengths: it must never lapse.
		start := time.Now()
		lease := a.names(key).keys[1]
		for time.Since(start) < 4*ttl {
			n, err := rdb.Exists(ctxT(t), lease).Result()
			if err != nil || n != 1 {
				t.Fatalf("lease lapsed after %v of a long load (%v)", time.Since(start), err)
			}
			time.Sleep(10 * time.Millisecond) // sampling rate of the check, not synchronisation
		}
		close(org.gate)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if org.calls.Load() != 1 {
			t.Fatalf("%d loads, want 1", org.calls.Load())
		}
	})
}

// TestPerCallTTLsAndJitter: WithFreshFor/WithStaleFor set the entry's
// windows; jitter only shortens the fresh window, within Jitter.
func TestPerCallTTLsAndJitter(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{Jitter: 0.5})
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i := range 20 {
		key := "k" + string(rune('a'+i))
		if _, err := g.Do(ctxT(t), key, load, WithFreshFor(10*time.Second), WithStaleFor(20*time.Second)); err != nil {
			t.Fatal(err)
		}
		raw, _ := rdb.Get(ctxT(t), g.names(key).entry).Bytes()
		e, err := decodeEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		fresh := e.freshUntil - e.written
		stale := e.staleUntil - e.freshUntil
		if fresh < 5000 || fresh > 10000 || stale != 20000 {
			t.Fatalf("windows fresh %dms stale %dms, want fresh in [5s, 10s] and stale 20s", fresh, stale)
		}
	}
	if j := (&Group{opts: Options{Jitter: 0}}).jittered(time.Second); j != time.Second {
		t.Fatalf("no jitter changed %v", j)
	}
}

func TestNamesShareOneTag(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	nm := g.names("a}b")
	want := []string{"ns:{a%7Db}", "ns:{a%7Db}:lease", "ns:{a%7Db}:fence", "ns:{a%7Db}:w", "ns:{a%7Db}:inv"}
	for i, w := range want {
		if nm.keys[i] != w {
			t.Fatalf("names %q, want %q", nm.keys, want)
		}
	}
	if nm.entry != want[0] {
		t.Fatalf("entry %q", nm.entry)
	}
}

// TestLeaseGrace: a read's lease is short until the load's watchdog extends
// it, so a lease whose caller is gone frees up quickly, while a long load
// keeps its lease.
func TestLeaseGrace(t *testing.T) {
	// Not parallel: changes a package variable.
	old := leaseGrace
	leaseGrace = 90 * time.Millisecond
	t.Cleanup(func() { leaseGrace = old })
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{LockTTL: 10 * time.Second})

	orphan := redistest.Key(t, "orphan")
	rr, err := g.read(ctxT(t), g.names(orphan), false)
	if err != nil || rr.x <= 0 {
		t.Fatalf("read did not win the lease: %+v %v", rr, err)
	}
	if pttl, err := rdb.PTTL(ctxT(t), g.names(orphan).keys[1]).Result(); err != nil || pttl > leaseGrace {
		t.Fatalf("a read's lease lives %v (%v), want at most %v", pttl, err, leaseGrace)
	}

	key := redistest.Key(t, "long")
	org := newOrigin(true)
	done := make(chan error, 1)
	go func() { _, err := g.Do(ctxT(t), key, org.load); done <- err }()
	redistest.Eventually(t, 10*time.Second, "the load to start", func() bool { return org.calls.Load() == 1 })
	lease := g.names(key).keys[1]
	redistest.Eventually(t, 10*time.Second, "the watchdog to extend the lease to LockTTL", func() bool {
		pttl, err := rdb.PTTL(ctxT(t), lease).Result()
		return err == nil && pttl > 5*time.Second
	})
	close(org.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestEntryTimesFromRedis: on a real server, an entry's times are Redis's
// TIME at the fill, bracketed by TIME read before and after.
func TestEntryTimesFromRedis(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		g := newGroup(t, rdb, Options{FreshFor: time.Minute, StaleFor: time.Hour, Jitter: Disabled})
		key := redistest.Key(t)
		before, err := rdb.Time(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
		after, err := rdb.Time(ctxT(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := rdb.Get(ctxT(t), g.names(key).entry).Bytes()
		e, err := decodeEntry(raw)
		if err != nil {
			t.Fatal(err)
		}
		if e.written < before.UnixMilli() || e.written > after.UnixMilli() {
			t.Fatalf("written %d outside the Redis clock's [%d, %d]", e.written, before.UnixMilli(), after.UnixMilli())
		}
		if e.freshUntil != e.written+60_000 || e.staleUntil != e.freshUntil+3_600_000 {
			t.Fatalf("windows %d/%d from written %d, want +1m and +1h", e.freshUntil, e.staleUntil, e.written)
		}
		pttl, err := rdb.PTTL(ctxT(t), g.names(key).entry).Result()
		if err != nil || pttl < 61*time.Minute-time.Second || pttl > 61*time.Minute {
			t.Fatalf("entry TTL %v (%v), want stale-until (61m)", pttl, err)
		}
	})
}
