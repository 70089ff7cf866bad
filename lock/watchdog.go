package lock

import (
	"context"
	"errors"
	"time"
)

// watchdog renews the lease every ttl/3 until Release, loss or the
// Client's Close. ctx is cancelled by Release and Close, so neither waits
// for a renewal stuck on a slow Redis.
func (l *Lock) watchdog(ctx context.Context) {
	defer close(l.wdDone)
	defer l.c.unwatch(l)
	for {
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		interval := max(ttl/3, time.Millisecond)
		t := time.NewTimer(interval)
		select {
		case <-l.wdStop:
			t.Stop()
			return
		case <-l.lost:
			t.Stop()
			return
		case <-t.C:
		}
		rctx, rcancel := context.WithTimeout(ctx, interval)
		err := l.refresh(rctx, ttl)
		rcancel()
		if ctx.Err() != nil {
			return // stopped by Release or Close mid-renewal
		}
		if h := l.c.opts.Hooks.Renewed; h != nil {
			h(l.key, err)
		}
		if errors.Is(err, ErrNotHeld) {
			return
		}
	}
}

func (l *Lock) stopWatchdog() {
	if l.wdStop == nil {
		return
	}
	l.wdOnce.Do(func() {
		close(l.wdStop)
		l.wdCancel()
		<-l.wdDone
	})
}
