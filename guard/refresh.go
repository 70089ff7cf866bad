package guard

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// refreshAsync reloads the stale entry prev in the background under the
// lease the caller's read won. It is detached from the caller and bounded
// by LoadTimeout; Close waits for it.
func (g *Group) refreshAsync(ctx context.Context, c *call, fence int64, prev entry.Entry) {
	detached := context.WithoutCancel(ctx)
	g.goBackground(func() {
		g.step(detached, "refresh")
		_, _ = g.loadAndFill(detached, c, fence, true, &prev)
	})
}

// refreshEarly tries the lease of a fresh key and, if won, refreshes it in
// the background.
func (g *Group) refreshEarly(ctx context.Context, c *call) {
	detached := context.WithoutCancel(ctx)
	g.goBackground(func() {
		rr, err := g.read(detached, c.nm, true)
		if err != nil || rr.x <= 0 {
			return
		}
		g.leaseHook(c.key, true)
		var prev *entry.Entry
		if e, err := entry.Decode(rr.raw); rr.present && err == nil && !e.Negative && !e.ErrMark && !e.Oversize {
			prev = &e
		}
		_, _ = g.loadAndFill(detached, c, rr.x, true, prev)
	})
}

// earlyRefreshDue reports whether a fresh hit on e should start an early
// refresh: the XFetch draw, when EarlyRefreshBeta is on.
func (g *Group) earlyRefreshDue(e entry.Entry, now int64) bool {
	return g.opts.EarlyRefreshBeta > 0 && !e.Negative && !e.ErrMark && g.earlyRefresh(e, now)
}

// earlyRefresh is the XFetch draw: true with probability
// exp(-remaining / (beta * load duration)).
func (g *Group) earlyRefresh(e entry.Entry, now int64) bool {
	delta := float64(e.LoadDur) / float64(time.Millisecond)
	if delta <= 0 {
		return false
	}
	remaining := float64(e.FreshUntil - now)
	return -delta*g.opts.EarlyRefreshBeta*math.Log(1-rand.Float64()) >= remaining
}
