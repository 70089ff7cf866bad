package guard

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/lua"
)

// renewLease keeps the lease fence alive until the returned func is called;
// the func waits for the renewer to stop. The first renewal comes a third of
// the way into the read's short first lease and extends it to LockTTL; then
// every LockTTL/3. A load shorter than that costs no renewal.
//
// Close stops every watchdog still running once the background refreshes
// it waits for have ended, and none starts after that: a closed Group
// renews no lease.
func (g *Group) renewLease(nm names, fence int64) (stop func()) {
	g.mu.Lock()
	if g.watchdogsOff {
		g.mu.Unlock()
		return func() {}
	}
	g.wd.Add(1)
	g.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer g.wd.Done()
		defer close(done)
		t := time.NewTimer(max(g.firstLease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-g.closing:
				return
			case <-t.C:
			}
			t.Reset(max(g.opts.LockTTL/3, time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
			n, err := lua.GuardLease.Run(ctx, g.rdb, nm.keys[1:2], fence, ms(g.opts.LockTTL)).Int64()
			cancel()
			if err != nil {
				g.redisFailed("renew", err)
				continue
			}
			if n == 0 {
				return // lost (expired, invalidated): the fill will be judged by its fence
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}
