package guard

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestRedisDownDegrades: with Redis gone, callers are served through the
// process's singleflight (one loader call at a time per key), the breaker
// opens, and coordination resumes when Redis is back.
func TestRedisDownDegrades(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 100 * time.Millisecond })
	var opened, closed counter
	g := newGroup(t, rdb, Options{RedisTimeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond, Hooks: Hooks{
		Breaker: func(open bool) {
			if open {
				opened.add()
			} else {
				closed.add()
			}
		},
	}})
	key := redistest.Key(t)
	org := newOrigin(false)
	if _, err := g.Do(ctxT(t), key, org.load); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				r, err := g.Do(ctxT(t), key, org.load)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Status != Degraded {
					t.Errorf("status %v with Redis down, want degraded", r.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	if org.maxRun.Load() != 1 {
		t.Fatalf("%d loads of one key ran at once on one node, want 1", org.maxRun.Load())
	}
	if opened.n.Load() == 0 {
		t.Fatal("breaker never opened")
	}
	srv.Restart(t)
	redistest.Eventually(t, 10*time.Second, "a hit after Redis returned", func() bool {
		r, err := g.Do(ctxT(t), key, org.load)
		return err == nil && (r.Status == Hit || r.Status == Miss)
	})
	if closed.n.Load() == 0 {
		t.Fatal("breaker never closed")
	}
}
