package lock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func redlockClients(t *testing.T, servers []*redistest.Server) []redis.UniversalClient {
	t.Helper()
	var out []redis.UniversalClient
	for _, s := range servers {
		out = append(out, s.Client(t, func(o *redis.Options) {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
			o.MaxRetries = -1
		}))
	}
	return out
}

func TestRedlock(t *testing.T) {
	t.Parallel()
	servers := redistest.StartMasters(t, 3)
	a := NewRedlock(redlockClients(t, servers), Options{})
	b := NewRedlock(redlockClients(t, servers), Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, key := ctxT(t), redistest.Key(t)

	t.Run("exclusive", func(t *testing.T) {
		var d overlapDetector
		var wg sync.WaitGroup
		for _, c := range []*Client{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					l, err := c.Obtain(ctx, key, 5*time.Second, WaitFor(20*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					d.enter()
					if err := l.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if d.overlap.Load() != 0 || d.count.Load() != 40 {
			t.Fatalf("overlaps %d, count %d (want 0, 40)", d.overlap.Load(), d.count.Load())
		}
	})

	t.Run("holds on every master", func(t *testing.T) {
		key := redistest.Key(t) // uncontended: every master grants it
		l, err := a.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range servers {
			v, err := s.Client(t).Get(ctx, a.names(key).lock).Result()
			if err != nil || v != l.Token() {
				t.Errorf("master %d holds %q, %v; want the token", i, v, err)
			}
		}
		if _, err := b.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("second client: got %v, want ErrNotObtained", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for i, s := range servers {
			if n, _ := s.Client(t).Exists(ctx, a.names(key).lock).Result(); n != 0 {
				t.Errorf("master %d still holds the lock after Release", i)
			}
		}
	})

	t.Run("fence", func(t *testing.T) {
		key := redistest.Key(t)
		var prev int64
		for i, c := range []*Client{a, b, a} {
			l, err := c.Obtain(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			f, err := l.FenceContext(ctx)
			if err != nil || f <= prev {
				t.Fatalf("hold %d: fence %d, %v; want > %d", i, f, err, prev)
			}
			prev = f
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Lost on a majority: no number.
		l, err := a.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range servers[:2] {
			if err := s.Client(t).Del(ctx, a.names(key).lock).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if f, err := l.FenceContext(ctx); f != 0 || !errors.Is(err, ErrNotHeld) {
			t.Fatalf("fence of a lock lost on 2 of 3 masters: %d, %v; want 0, ErrNotHeld", f, err)
		}
	})

	t.Run("one master down", func(t *testing.T) {
		key := redistest.Key(t)
		servers[2].Kill(t)
		l, err := a.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("obtain with 2 of 3 masters: %v", err)
		}
		if _, err := b.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("second client with 2 of 3 masters: got %v, want ErrNotObtained", err)
		}
		if err := l.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("refresh with 2 of 3 masters: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release with 2 of 3 masters: %v", err)
		}
	})

	t.Run("two masters down", func(t *testing.T) {
		key := redistest.Key(t)
		servers[1].Kill(t)
		start := time.Now()
		_, err := a.Obtain(ctx, key, time.Minute)
		if err == nil || errors.Is(err, ErrNotObtained) {
			t.Fatalf("obtain with 1 of 3 masters: got %v, want a failure (not ErrNotObtained: nobody holds the lock)", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("failing took %v", d)
		}
		// The one master that answered must not keep a partial lock.
		if n, _ := servers[0].Client(t).Exists(context.Background(), a.names(key).lock).Result(); n != 0 {
			redistest.Eventually(t, 5*time.Second, "partial lock given back", func() bool {
				n, _ := servers[0].Client(t).Exists(context.Background(), a.names(key).lock).Result()
				return n == 0
			})
		}
	})

	t.Run("masters back", func(t *testing.T) {
		servers[1].Restart(t)
		servers[2].Restart(t)
		l, err := a.Obtain(ctx, key, time.Minute, WaitFor(10*time.Second))
		if err != nil {
			t.Fatalf("obtain after masters returned: %v", err)
		}
		_ = l.Release(ctx)
	})
}

// TestRedlockWaitWithMasterDown: a Redlock Client whose first wait comes
// while one master of three is down (killed, or frozen: it never answers)
// needs no wake channel there: it subscribes on a quorum of masters, and
// obtains the lock once the holder releases it. It waited for every
// master's confirmation instead, up to the end of WaitFor, and returned
// ErrNotObtained though the lock was free.
func TestRedlockWaitWithMasterDown(t *testing.T) {
	for _, fault := range []string{"killed", "frozen"} {
		t.Run(fault, func(t *testing.T) {
			servers := redistest.StartMasters(t, 3)
			// redlockClients', dialling a killed master once per call
			// rather than five times 100ms apart.
			clients := func() []redis.UniversalClient {
				var out []redis.UniversalClient
				for _, s := range servers {
					out = append(out, s.Client(t, func(o *redis.Options) {
						o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
						o.MaxRetries, o.DialerRetries = -1, 1
					}))
				}
				return out
			}
			holder := NewRedlock(clients(), Options{})
			t.Cleanup(func() { holder.Close() })
			if fault == "killed" {
				servers[2].Kill(t)
			} else {
				servers[2].Freeze(t)
				t.Cleanup(func() { servers[2].Thaw(t) })
			}
			c := NewRedlock(clients(), Options{})
			t.Cleanup(func() { c.Close() })
			ctx, key := ctxT(t), redistest.Key(t)
			for round := range 2 { // the second wait: the subscription on the down master still unconfirmed
				h, err := holder.Obtain(ctx, key, 10*time.Second)
				if err != nil {
					t.Fatalf("holder with 2 of 3 masters: %v", err)
				}
				// Released once the waiter found the lock busy.
				testHookAfterFirstAttempt = func() {
					testHookAfterFirstAttempt = nil
					if err := h.Release(ctx); err != nil {
						t.Error(err)
					}
				}
				t.Cleanup(func() { testHookAfterFirstAttempt = nil })
				start := time.Now()
				l, err := c.Obtain(ctx, key, 10*time.Second, WaitFor(2*time.Second))
				if err != nil {
					t.Fatalf("wait %d: %v after %v; the lock was free", round+1, err, time.Since(start).Round(time.Millisecond))
				}
				t.Logf("wait %d: obtained after %v", round+1, time.Since(start).Round(time.Millisecond))
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestRedlockReentrantHoldsShareFence: every hold of one reentrant owner
// reports the same fencing number on a Redlock too, also a hold taken
// while the master that minted the largest number (the one the first hold
// reports) is down: each master minted its own, and a later hold read the
// largest of the others, a lower number.
func TestRedlockReentrantHoldsShareFence(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	c := NewRedlock(redlockClients(t, servers), Options{})
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t)
	for i := range 3 {
		key := redistest.Key(t)
		l1, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f1, err := l1.FenceContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Down: a master that holds the reported number (the one that minted it).
		top := -1
		for m, s := range servers {
			v, err := s.Client(t).HGet(ctx, c.names(key).lock, "").Int64()
			if err != nil {
				t.Fatal(err)
			}
			if v > f1 {
				t.Fatalf("key %d: master %d keeps %d, above the %d reported", i, m, v, f1)
			}
			if v == f1 && top < 0 {
				top = m
			}
		}
		if top < 0 {
			t.Fatalf("key %d: no master keeps the reported number %d", i, f1)
		}
		servers[top].Freeze(t)
		l2, err := c.ObtainReentrant(ctx, key, "job", time.Minute)
		var f2 int64
		if err == nil {
			f2, err = l2.FenceContext(ctx)
		}
		servers[top].Thaw(t)
		if err != nil {
			t.Fatalf("key %d: second hold with 2 of 3 masters: %v", i, err)
		}
		if f2 != f1 {
			t.Errorf("key %d: second hold's fence %d, first hold's %d", i, f2, f1)
		}
		_ = l2.Release(ctx)
		_ = l1.Release(ctx)
	}
}

// TestRedlockReentrantAfterMissedRelease: a reentrant owner whose Release
// missed one master (the Release's quorum held without it), which so keeps
// the owner's hold and number, takes the lock anew on its next
// hold: one hold (Holds), and a number larger than every number minted
// before, also when another owner held the lock in between with a larger
// one. Before, the hold took the number and the count of the master the
// Release missed: the owner's old number, lower than the other owner's,
// and two holds.
func TestRedlockReentrantAfterMissedRelease(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	a := NewRedlock(redlockClients(t, servers), Options{})
	b := NewRedlock(redlockClients(t, servers), Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx := ctxT(t)
	for _, between := range []bool{true, false} {
		key := redistest.Key(t)
		l1, err := a.ObtainReentrant(ctx, key, "O", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		f1, err := l1.FenceContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Master 2 misses the release: it keeps the hash as it was (a
		// release is answered by a quorum, so a master that did not
		// answer in time may not have run it).
		m2, name := servers[2].Client(t), a.names(key).lock
		hold, err := m2.HGetAll(ctx, name).Result()
		if err != nil || len(hold) == 0 {
			t.Fatalf("master 2 holds %v (%v)", hold, err)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m2.HSet(ctx, name, hold).Err(); err != nil {
			t.Fatal(err)
		}
		if err := m2.PExpire(ctx, name, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		last := f1
		if between {
			p, err := b.ObtainReentrant(ctx, key, "P", time.Minute)
			if err != nil {
				t.Fatalf("another owner: %v", err)
			}
			if last, err = p.FenceContext(ctx); err != nil || last <= f1 {
				t.Fatalf("another owner's number %d (%v), after %d", last, err, f1)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		l2, err := a.ObtainReentrant(ctx, key, "O", time.Minute)
		if err != nil {
			t.Fatalf("the owner again: %v", err)
		}
		f2, err := l2.FenceContext(ctx)
		if err != nil || f2 <= last || l2.Holds() != 1 {
			t.Errorf("another owner between %v: the owner's new hold has number %d (%v) after %d, and %d holds; want a larger number, 1 hold", between, f2, err, last, l2.Holds())
		}
		_ = l2.Release(ctx)
	}
}
