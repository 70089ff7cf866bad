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
