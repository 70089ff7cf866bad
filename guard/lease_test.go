package guard

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestWatchdogKeepsLongLoadLeased: a load that runs for several lease
// lengths keeps its lease (renewed every LockTTL/3), so another node waits
// instead of loading too.
func TestWatchdogKeepsLongLoadLeased(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const ttl = 600 * time.Millisecond // renewed every 200ms: slack for a loaded machine
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
