package lock_test

// Locks on a master with replicas behind Sentinel, across failovers: what
// asynchronous replication allows, and what fencing still protects (see
// docs/failover.md).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

// foClient makes a failover client fail fast on a dead master.
func foClient(o *redis.FailoverOptions) {
	o.MaxRetries = -1
	o.DialTimeout = 250 * time.Millisecond
	o.ReadTimeout = 250 * time.Millisecond
	o.WriteTimeout = 250 * time.Millisecond
}

func foLocks(t *testing.T, rdb redis.UniversalClient, opts lock.Options) *lock.Client {
	t.Helper()
	c := lock.New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func foCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// register is a resource that checks fences, as Kleppmann's fenced
// storage: it refuses a write whose fence is below the last it accepted.
type register struct {
	mu    sync.Mutex
	fence int64
	value string
}

func (r *register) write(fence int64, v string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence <= 0 || fence < r.fence {
		return false
	}
	r.fence, r.value = fence, v
	return true
}

func (r *register) read() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value
}

// obtainSoon retries Obtain while the client finds the new master.
func obtainSoon(t *testing.T, c *lock.Client, key string, ttl time.Duration, opts ...lock.ObtainOption) *lock.Lock {
	t.Helper()
	var l *lock.Lock
	var last error
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, last = c.Obtain(ctx, key, ttl, opts...)
		cancel()
		if last == nil {
			return l
		}
		if errors.Is(last, lock.ErrNotObtained) || time.Now().After(deadline) {
			t.Fatalf("Obtain(%s) after the failover: %v", key, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestFailoverTwoHolders shows what asynchronous replication allows: A
// obtains a lock on the master, which accepts it although no replica will
// ever receive it; the master dies, a replica is promoted, and B obtains
// the same lock there. Two clients hold it, and A has not been told: its
// lease has 30s to run. Fencing still protects a resource that checks
// fences: B's number is above A's (the counter's increment was lost with
// the lease, but fences are floored by the Redis clock), so once B has
// written, A's write is refused. A finds out at its next Refresh
// (ErrNotHeld, Lost closed); a handle with a watchdog finds out by itself.
func TestFailoverTwoHolders(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	var lostHook sync.Map
	cA := foLocks(t, st.FailoverClient(t, foClient), lock.Options{
		Hooks: lock.Hooks{Lost: func(key string) { lostHook.Store(key, time.Now()) }},
	})
	cB := foLocks(t, st.FailoverClient(t, foClient), lock.Options{})
	ctx := foCtx(t)
	key, keyW := redistest.Key(t, "held"), redistest.Key(t, "watchdog")
	var res register

	st.CutReplicas(t)
	lA, err := cA.Obtain(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatalf("A: Obtain on the master with its replicas cut: %v", err)
	}
	fA, err := lA.FenceContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wA, err := cA.Obtain(ctx, keyW, 3*time.Second, lock.AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	if !res.write(fA, "A, before the failover") {
		t.Fatal("the register refused A's first write")
	}

	killedAt := time.Now()
	_, promoted := st.KillMaster(t)
	promotedAt := time.Now()
	if n, err := promoted.Client(t).Exists(ctx, "stampede:lock:{"+key+"}").Result(); err != nil || n != 0 {
		t.Fatalf("the promoted replica has A's lock (EXISTS = %d, %v): nothing was lost", n, err)
	}

	lB := obtainSoon(t, cB, key, 30*time.Second)
	if isClosed(lA.Lost()) {
		t.Fatal("A's handle knew of the loss before B obtained: the demonstration needs A unaware")
	}
	t.Logf("two holders: A (fence %d, lease lost with the master, its handle unaware) and B (obtained %v after the master was killed, %v after the Sentinels settled)",
		fA, time.Since(killedAt).Round(time.Millisecond), time.Since(promotedAt).Round(time.Millisecond))

	fB, err := lB.FenceContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fB <= fA {
		t.Fatalf("B's fence %d is not above A's %d: fences went back across the failover", fB, fA)
	}
	if !res.write(fB, "B, after the failover") {
		t.Fatal("the register refused B's write")
	}
	if res.write(fA, "A, late") {
		t.Fatal("the register accepted A's write after B's: fencing failed")
	}
	if got := res.read(); got != "B, after the failover" {
		t.Fatalf("register holds %q", got)
	}

	// A finds out at its next refresh; its work should stop on Lost.
	if err := lA.Refresh(ctx, 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("A: Refresh after the failover = %v, want ErrNotHeld", err)
	}
	if !isClosed(lA.Lost()) {
		t.Fatal("A: Lost not closed after Refresh found the lock taken")
	}
	// The watchdog's handle finds out by itself, at a failed renewal or
	// when its lease (3s) runs out unrenewed, whichever comes first.
	select {
	case <-wA.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog's handle was not told of the loss within 10s")
	}
	if at, ok := lostHook.Load(keyW); ok {
		t.Logf("the watchdog's handle (3s lease) knew its lock lost %v after the master was killed", at.(time.Time).Sub(killedAt).Round(time.Millisecond))
	}
	if err := lB.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFailoverFenceClockBehind: fences minted on a promoted replica are
// floored by its clock. If its clock is behind the old master's by less
// than the time from the last fence minted on the old master to the first
// minted on the new one (at least down-after-milliseconds when the master
// dies), fences keep rising; if it is behind by more, a fence can go back
// below one minted before the failover (though never below one the replica
// received), and a resource that checks fences then accepts the old
// holder's late write over the new holder's. The clocks of the replicas
// are moved with libfaketime (redistest.WithClockOffset).
func TestFailoverFenceClockBehind(t *testing.T) {
	redistest.NeedClockOffset(t)
	for _, tc := range []struct {
		name     string
		behind   time.Duration
		goesBack bool
	}{
		{"behind less than the failover lasts", 500 * time.Millisecond, false},
		{"behind more than the failover lasts", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := redistest.StartSentinel(t, redistest.SentinelOptions{
				NodeOptions: func(i int) []redistest.Option {
					if i == 0 {
						return nil // the first master keeps the true time
					}
					return []redistest.Option{redistest.WithClockOffset(-tc.behind)}
				},
			})
			rdb := st.FailoverClient(t) // default timeouts: WAIT blocks up to its own timeout
			c := foLocks(t, st.FailoverClient(t, foClient), lock.Options{})
			ctx := foCtx(t)
			key := redistest.Key(t)

			// A fence the replicas receive, then one they never will.
			l1, err := c.Obtain(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			f1, _ := l1.FenceContext(ctx)
			if err := l1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := redistest.Replicated(ctx, rdb, redistest.Key(t, "wait"), 2, 5*time.Second); err != nil || n != 2 {
				t.Fatalf("WAIT 2 = %d, %v", n, err)
			}
			st.CutReplicas(t)
			lA, err := c.Obtain(ctx, key, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			fA, _ := lA.FenceContext(ctx)
			mintedA := time.Now()

			st.KillMaster(t)
			lB := obtainSoon(t, c, key, 30*time.Second)
			fB, err := lB.FenceContext(ctx)
			if err != nil {
				t.Fatal(err)
			}
			gap := time.Since(mintedA)
			t.Logf("replicas' clocks %v behind; %v from A's fence to B's; fences: replicated %d, A %d (lost), B %d (B - A = %v)",
				tc.behind, gap.Round(time.Millisecond), f1, fA, fB, time.Duration(fB-fA)*time.Microsecond)
			if fB <= f1 {
				t.Fatalf("B's fence %d is not above the replicated %d", fB, f1)
			}
			if back := fB < fA; back != tc.goesBack {
				t.Fatalf("B's fence below A's: %v, want %v (clock %v behind, %v between the mints)", back, tc.goesBack, tc.behind, gap)
			}
			// What a resource that checks fences sees when B writes first
			// and A's late write comes after.
			var res register
			if !res.write(fB, "B") {
				t.Fatal("register refused B's write")
			}
			acceptedA := res.write(fA, "A, late")
			if acceptedA != tc.goesBack {
				t.Fatalf("register accepted A's late write after B's: %v, want %v", acceptedA, tc.goesBack)
			}
			if acceptedA {
				t.Logf("as documented: with the new master's clock %v behind, the old holder's late write replaced the new holder's", tc.behind)
			}
		})
	}
}

// TestFailoverWaitAcknowledged: what an acquisition that waits for replicas
// (WAIT numreplicas timeout after the lock is taken) would buy. With the
// replicas cut off, WAIT reports no acknowledgement: such an acquisition
// would fail (and release) instead of handing out a lease a failover can
// lose. With both replicas acknowledging, the lease survives the master's
// death: no second holder after the failover. (With one of two
// acknowledging, it survives only if Sentinel promotes that one: it
// prefers the replica with the larger replication offset, unless that one
// is down or excluded.)
func TestFailoverWaitAcknowledged(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	rdb := st.FailoverClient(t) // default timeouts: WAIT blocks up to its own timeout
	cA := foLocks(t, st.FailoverClient(t, foClient), lock.Options{})
	cB := foLocks(t, st.FailoverClient(t, foClient), lock.Options{})
	ctx := foCtx(t)
	acked, cut := redistest.Key(t, "acked"), redistest.Key(t, "cut")

	lA, err := cA.Obtain(ctx, acked, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Replicated(ctx, rdb, redistest.Key(t, "wait"), 2, time.Second); err != nil || n != 2 {
		t.Fatalf("WAIT 2 after Obtain = %d, %v; want both replicas", n, err)
	}

	st.CutReplicas(t)
	lC, err := cA.Obtain(ctx, cut, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if n, err := redistest.Replicated(ctx, rdb, redistest.Key(t, "wait"), 1, 200*time.Millisecond); err != nil || n != 0 {
		t.Fatalf("WAIT 1 with the replicas cut = %d, %v; want 0", n, err)
	}
	t.Logf("with the replicas cut, WAIT 1 200 answered 0 after %v: an acquisition requiring it fails", time.Since(start).Round(time.Millisecond))
	_ = lC // the lease the acquisition would release; it is lost below anyway

	st.KillMaster(t)
	// The acknowledged lease survived; the other did not.
	lB := obtainSoon(t, cB, cut, 30*time.Second)
	_ = lB
	ctx1, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		_, err := cB.Obtain(ctx1, acked, 30*time.Second)
		if errors.Is(err, lock.ErrNotObtained) {
			break // held: the lease survived the failover
		}
		if err == nil {
			t.Fatal("B obtained the lock whose lease both replicas had acknowledged")
		}
		if ctx1.Err() != nil {
			t.Fatalf("Obtain of the acknowledged lock: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := lA.Refresh(ctx, 30*time.Second); err != nil {
		t.Fatalf("A: Refresh of the acknowledged lock after the failover: %v", err)
	}
}
