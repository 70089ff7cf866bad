package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Invalidations that did not land. An Invalidate or InvalidateTag that
// fails on Redis's side (unreachable, slower than RedisTimeout, or a tag
// whose keys kept being filled) returns its error, and is tried again in
// the background: one goroutine per Group, backing off from 50ms to 1s,
// until each lands or the Group is closed. So an invalidation made while
// Redis is down takes effect once it is back (the HTTP middleware's
// unsafe requests rely on it), instead of leaving the old value to be
// served until it expires.
type invRetry struct {
	mu      sync.Mutex
	pending map[invTarget]struct{}
	running bool
	stop    chan struct{} // closed by Close
}

// invTarget is a pending invalidation: of a key, or of a hash tag.
type invTarget struct {
	tag  bool
	name string
}

// maxPendingInvalidations bounds the invalidations waiting for Redis;
// one past it is not retried (its error was returned, and RedisError
// reports it).
const maxPendingInvalidations = 10_000

// retryLater queues t to be tried again in the background.
func (g *Group) retryLater(t invTarget) {
	r := &g.inv
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[invTarget]struct{}{}
	}
	if _, ok := r.pending[t]; !ok && len(r.pending) >= maxPendingInvalidations {
		if h := g.opts.Hooks.RedisError; h != nil {
			h("invalidate", fmt.Errorf("guard: %d invalidations already wait for Redis: %q is not retried", len(r.pending), t.name))
		}
		return
	}
	r.pending[t] = struct{}{}
	if !r.running {
		r.running = true
		g.goBackground(g.retryInvalidations)
	}
}

// retryInvalidations tries the pending invalidations again until none is
// left or the Group is closed.
func (g *Group) retryInvalidations() {
	r := &g.inv
	ctx := context.Background()
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		t := time.NewTimer(delay)
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		r.mu.Lock()
		batch := make([]invTarget, 0, len(r.pending))
		for it := range r.pending {
			batch = append(batch, it)
		}
		r.mu.Unlock()
		for _, it := range batch {
			var err error
			if it.tag {
				err = g.invalidateTag(ctx, it.name, true)
			} else {
				err = g.invalidate(ctx, g.names(it.name))
			}
			if err != nil && !errors.Is(err, ErrClosed) {
				break // Redis is still away: all wait for the next round
			}
			r.mu.Lock()
			delete(r.pending, it)
			r.mu.Unlock()
		}
		r.mu.Lock()
		if len(r.pending) == 0 || g.closed.Load() {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}
