package guard

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/lua"
)

// The refresh lease. A read that finds a key stale or missing tries the
// lease in the same script (guard_read.lua): the winner holds the key's
// lease name with its fence as the value, for firstLease at first; every
// other node waits for the winner's fill, or serves the stale value. While
// the load runs, a watchdog renews the lease to LockTTL; the fill's script
// releases it (or keeps it for ErrorBackoff after a failed refresh). One
// watchdog serves every path, a single key's load and a batch's alike.

// heldLease is a lease this node holds: the key's names and the fence the
// read minted.
type heldLease struct {
	nm    names
	fence int64
}

// watchLeases renews the leases ls until the returned func is called,
// which waits for the watchdog to stop: one goroutine, and one pipeline per
// renewal for all of them. Leases of fence 0 (none held) are skipped, and a
// lease found lost is not renewed again. The first renewal comes a third
// into the first lease counted from leased, when the read that won the
// leases was sent (a read and the start of its load may be far apart on a
// busy process); then every LockTTL/3. A load shorter than that costs no
// renewal.
//
// Close stops every watchdog still running once the background refreshes
// it waits for have ended, and none starts after that: a closed Group
// renews no lease, and gives back those its loads still hold.
func (g *Group) watchLeases(ls []heldLease, leased time.Time) (stop func()) {
	held := make([]heldLease, 0, len(ls))
	for _, l := range ls {
		if l.fence > 0 {
			held = append(held, l)
		}
	}
	g.mu.Lock()
	if len(held) == 0 || g.watchdogsOff {
		g.mu.Unlock()
		return func() {}
	}
	g.wd.Add(1)
	g.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer g.wd.Done()
		defer close(done)
		t := time.NewTimer(max(g.firstLease/3-time.Since(leased), time.Millisecond))
		defer t.Stop()
		for len(held) > 0 {
			select {
			case <-quit:
				return
			case <-g.closing:
				// This node will not renew them: the other nodes need
				// not wait them out (a fill that still lands is fenced).
				g.releaseLeases(context.Background(), held)
				return
			case <-t.C:
			}
			t.Reset(max(g.opts.LockTTL/3, time.Millisecond))
			held = g.renew(held)
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

// renew extends the leases held to LockTTL, in one pipeline, and returns
// those still held (a lease whose renewal failed is kept: Redis may have
// been slow, not the lease lost).
func (g *Group) renew(held []heldLease) []heldLease {
	calls := make([]lua.Call, len(held))
	for j, l := range held {
		calls[j] = lua.Call{Keys: l.nm.outliveLease(), Args: []any{l.fence, ms(g.opts.LockTTL)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.redisTimeout())
	_, cmds := g.pipeline(ctx, nil, lua.GuardLease, calls)
	cancel()
	kept := held[:0]
	var failed error
	for j, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			failed = err
		}
		if err != nil || n != 0 {
			kept = append(kept, held[j])
		}
	}
	if failed != nil {
		g.redisFailed("renew", failed)
	}
	return kept
}

// releaseLeases gives back the leases ls, whose fills failed, in one
// pipeline, so that the other nodes do not wait them out (the watchdog may
// have extended them to LockTTL); should a fill have run after all, its
// release finds the lease gone.
func (g *Group) releaseLeases(ctx context.Context, ls []heldLease) {
	if len(ls) == 0 {
		return
	}
	calls := make([]lua.Call, len(ls))
	for j, l := range ls {
		calls[j] = lua.Call{Keys: l.nm.keys[1:2], Args: []any{l.fence, 0}}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.redisTimeout())
	defer cancel()
	_, cmds := g.pipeline(rctx, nil, lua.GuardLease, calls)
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			g.redisFailed("release", err)
			return
		}
	}
}

// leaseHook reports a lease outcome to Hooks.Lease.
func (g *Group) leaseHook(key string, won bool) {
	if h := g.opts.Hooks.Lease; h != nil {
		h(key, won)
	}
}
