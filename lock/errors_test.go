package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestStalledRedisIsNotBusy: a Redis that does not answer in time is a
// failure, not a busy lock. The caller's deadline bounds the call, and the
// error says why (context.DeadlineExceeded) without ErrNotObtained, so a
// caller that skips work when the lock is busy does not skip it silently
// when Redis is stalled.
func TestStalledRedisIsNotBusy(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := New(rdb, Options{CleanupTimeout: 200 * time.Millisecond})
	defer c.Close() // waits for the background releases; runs before the leak check
	srv.Freeze(t)
	for _, tc := range []struct {
		name   string
		obtain func(ctx context.Context) error
	}{
		{"token lock", func(ctx context.Context) error {
			_, err := c.Obtain(ctx, "k", time.Minute)
			return err
		}},
		{"token lock, waiting", func(ctx context.Context) error {
			_, err := c.Obtain(ctx, "k", time.Minute, WaitFor(time.Minute))
			return err
		}},
		{"reentrant", func(ctx context.Context) error {
			_, err := c.ObtainReentrant(ctx, "k", "job", time.Minute)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tc.obtain(ctx)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v with a 300ms deadline", took)
			}
			if err == nil || errors.Is(err, ErrNotObtained) {
				t.Fatalf("got %v, want a failure that is not ErrNotObtained", err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want errors.Is context.DeadlineExceeded", err)
			}
			if !strings.HasPrefix(err.Error(), "lock: ") {
				t.Errorf("error %q does not say it is the lock's", err)
			}
		})
	}
	srv.Thaw(t)
}

// TestGrantTooLateIsNotBusy: a lock that Redis grants only after its lease
// could be of any use (Redis paused past the ttl) is an error, not a busy
// lock, and is given back.
func TestGrantTooLateIsNotBusy(t *testing.T) {
	srv := redistest.Start(t)
	rdb, admin := srv.Client(t), srv.Client(t)
	c := newTestClient(t, rdb, Options{})
	ctx := ctxT(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		obtain func() error
	}{
		{"token lock", func() error { _, err := c.Obtain(ctx, "k1", 50*time.Millisecond); return err }},
		{"reentrant", func() error { _, err := c.ObtainReentrant(ctx, "k2", "job", 50*time.Millisecond); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The pause holds every command for 200ms, the lease is 50ms.
			if err := admin.Do(ctx, "CLIENT", "PAUSE", 200, "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			err := tc.obtain()
			if err == nil || errors.Is(err, ErrNotObtained) {
				t.Fatalf("got %v, want a failure that is not ErrNotObtained", err)
			}
		})
	}
}

// TestTTLBelowMinimumRefused: a lease too short to leave any validity after
// the drift allowance is refused when called, never answered with
// ErrNotObtained by a free lock.
func TestTTLBelowMinimumRefused(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	c := newTestClient(t, rdb, Options{})
	red := NewRedlock([]redis.UniversalClient{rdb, rdb, rdb}, Options{})
	t.Cleanup(func() { _ = red.Close() })
	ctx := ctxT(t)
	held, err := c.Obtain(ctx, redistest.Key(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 9 * time.Millisecond} {
		key := redistest.Key(t) // free
		for name, call := range map[string]func() error{
			"Obtain":          func() error { _, err := c.Obtain(ctx, key, ttl); return err },
			"Obtain, waiting": func() error { _, err := c.Obtain(ctx, key, ttl, WaitFor(time.Second)); return err },
			"ObtainReentrant": func() error { _, err := c.ObtainReentrant(ctx, key, "job", ttl); return err },
			"Redlock Obtain":  func() error { _, err := red.Obtain(ctx, key, ttl); return err },
			"Refresh":         func() error { return held.Refresh(ctx, ttl) },
		} {
			err := call()
			if err == nil || errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "below MinTTL") {
				t.Errorf("%s with ttl %v: got %v, want a refusal naming MinTTL", name, ttl, err)
			}
		}
		if n, err := rdb.Exists(ctx, c.names(key).lock).Result(); err != nil || n != 0 {
			t.Fatalf("a refused call stored the lock (%v)", err)
		}
	}
	if ttl, err := held.TTL(ctx); err != nil || ttl < 50*time.Second {
		t.Fatalf("held lock's TTL after refused Refresh calls: %v, %v", ttl, err)
	}
	// The minimum itself is obtainable on a free lock.
	l, err := c.Obtain(ctx, redistest.Key(t), 10*time.Millisecond)
	if err != nil {
		t.Fatalf("Obtain with the minimum ttl: %v", err)
	}
	_ = l.Release(ctx)
}

// TestRedlockFailuresAreNotBusy: Redlock reports a lock busy only when a
// majority of masters say so; a quorum missed because masters failed is an
// error.
func TestRedlockFailuresAreNotBusy(t *testing.T) {
	servers := redistest.StartMasters(t, 3)
	a := NewRedlock(redlockClients(t, servers), Options{})
	b := NewRedlock(redlockClients(t, servers), Options{})
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, key := ctxT(t), redistest.Key(t)
	l, err := a.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	servers[2].Kill(t)
	// Two of three masters say busy, one failed: busy.
	if _, err := b.Obtain(ctx, key, time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("majority busy, minority failed: got %v, want ErrNotObtained", err)
	}
	if _, err := b.Obtain(ctx, key, time.Minute, WaitFor(100*time.Millisecond)); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("majority busy, minority failed, waiting: got %v, want ErrNotObtained", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	servers[1].Kill(t)
	// One master grants, two failed: no quorum, and nobody holds the lock.
	for _, opts := range [][]ObtainOption{nil, {WaitFor(100 * time.Millisecond)}} {
		_, err := b.Obtain(ctx, key, time.Minute, opts...)
		if err == nil || errors.Is(err, ErrNotObtained) {
			t.Fatalf("two of three masters down (%d options): got %v, want a failure that is not ErrNotObtained", len(opts), err)
		}
		if !strings.Contains(err.Error(), "2 of 3 masters failed") {
			t.Errorf("error %q does not say how many masters failed", err)
		}
	}
}
