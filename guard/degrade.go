package guard

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/guard/internal/tier"
)

// Serving without Redis. While the Group cannot coordinate through Redis
// (the breaker is open, or a call's Redis read failed), it degrades to a
// per-node cache, never below: a value this node holds in memory (the
// reserve: the tier's copies when Redis went away, taken as soon as a
// call finds Redis unreachable, and what it loaded since) is served within its windows, as Degraded while fresh and as
// Stale after, with no load; a stale one is refreshed in the background,
// once per node, backing off ErrorBackoff after a failure; only a key
// this node holds nothing of is loaded for its callers, one load of a key
// at a time in this process. A load that fails, or finds nothing, leaves
// a mark in the reserve, as it would leave an error marker or a negative
// entry in Redis: for ErrorBackoff (NegativeFor) the key's callers on this
// node get ErrBackoff (ErrNotFound) with no load. So the origin's load
// during an outage follows the number of keys and nodes, not the rate of
// calls, even while the origin fails too. The reserve is emptied when
// coordination has resumed for BreakerCooldown: Redis answered for one,
// and the tier, if it lost its report connection, is back and stayed on
// for one (so that the tier holds the node's copies before the reserve
// lets them go).

// degraded serves a caller while Redis is unavailable: from the reserve,
// else by one loader call per key in this process at a time, whose value
// the reserve keeps. A load's private answer reaches its own caller only;
// the others take turns.
func (g *Group) degraded(ctx context.Context, c *call) (Result, error) {
	if res, err, ok := g.fromReserve(ctx, c); ok {
		return res, err
	}
	if !c.reread && (!g.br.Failing() || g.loc.Serving()) && !g.masterOpen(ctx, c.nm.entry) {
		// Redis is up: it answered another call since this one failed (a
		// connection that died with the outage, say), or the tier's
		// report connections reach it. Read again, past the breaker,
		// rather than load what the fleet loads once. Once per call;
		// never while the key's master is known down (masters.go).
		c.reread = true
		return g.readPath(ctx, c)
	}
	return g.alone(ctx, c)
}

// alone serves c from the reserve, or by a load of this node's own, which
// the reserve keeps; see degraded.
func (g *Group) alone(ctx context.Context, c *call) (Result, error) {
	if res, err, ok := g.fromReserve(ctx, c); ok {
		return res, err
	}
	// The tier may hold a copy it has not handed over yet: Redis frozen,
	// or the path to it stalled, is seen here first (tier.ToReserve).
	if g.loc.ToReserve(c.key) {
		if res, err, ok := g.fromReserve(ctx, c); ok {
			return res, err
		}
	}
	detached := context.WithoutCancel(ctx)
	return g.takeTurns(ctx, c, func() (Result, error) {
		ch := g.sf.DoChan("d"+c.key, func() (any, error) {
			// Again, in the flight: a flight that ended since this
			// caller looked may have left a value or a mark, and the
			// caller would otherwise start a load of its own.
			if res, err, ok := g.fromReserve(detached, c); ok {
				return degradedOutcome{res: res, owner: c}, err
			}
			o, own := g.callLoaderKeep(detached, c.key, c.load, true, nil, func(o outcome) {
				if !g.keepDegraded(c, o) {
					g.markDegraded(c.key, c.nm.entry, o.err, o.begun(c.start))
				}
			})
			switch {
			case own:
			case privateOf(o.err) != nil:
				return degradedOutcome{owner: c}, errTurn
			}
			return degradedOutcome{res: Result{Value: o.v, Status: Degraded}, owner: c}, o.err
		})
		select {
		case r := <-ch:
			d, _ := r.Val.(degradedOutcome)
			return d.res, mine(c, d.owner, r.Err)
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	})
}

// degradedOutcome is a degraded flight's answer and whose load it was.
type degradedOutcome struct {
	res   Result
	owner *call
}

// fromReserve answers c from the reserve: a value within its fresh window
// as Degraded, within its stale window as Stale, starting its refresh; a
// mark within its window with its error.
func (g *Group) fromReserve(ctx context.Context, c *call) (Result, error, bool) {
	k, ok := g.reserve.Get(c.key)
	if !ok {
		return Result{}, nil, false
	}
	now := time.Now()
	if k.Mark != tier.Value {
		if !now.Before(k.FreshUntil) {
			g.reserve.Expire(c.key, now)
			return Result{}, nil, false
		}
		return Result{Status: Degraded, Age: now.Sub(k.Base)}, markErr(c.key, k), true
	}
	res := Result{Value: k.Value, Status: Degraded, Age: now.Sub(k.Base), Fresh: k.FreshUntil.Sub(now)}
	switch {
	case now.Before(k.FreshUntil):
		if h := g.opts.Hooks.Hit; h != nil && !c.missed {
			h(c.key, res.Age, true)
		}
	case now.Before(k.StaleUntil):
		res.Status = Stale
		if h := g.opts.Hooks.Stale; h != nil && !c.missed {
			h(c.key, res.Age)
		}
		g.refreshReserve(ctx, c, now)
	default:
		// Only that value: another call may have kept a new one since.
		g.reserve.Expire(c.key, now)
		return Result{}, nil, false
	}
	return res, nil, true
}

// refreshFailedDegraded ends a refresh of key's stale value made without
// Redis that kept nothing (err: the load's error): a key gone at the
// origin is marked not found, so its stale value is served no longer (as
// a negative entry would replace it in Redis), and it reports true; any
// other end backs off ErrorBackoff, the stale value still served.
func (g *Group) refreshFailedDegraded(key, name string, err error, since time.Time) (gone bool) {
	if errors.Is(err, ErrNotFound) && g.opts.NegativeFor > 0 {
		g.markDegraded(key, name, err, since)
		return true
	}
	g.reserve.RefreshFailed(key, time.Now().Add(g.opts.ErrorBackoff))
	return false
}

// satAdd is a+b for non-negative windows, at most math.MaxInt64: a
// window of "forever" (math.MaxInt64, which Options accepts) plus another
// must not wrap to a negative one.
func satAdd(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// markErr is the error a mark k of key answers with.
func markErr(key string, k tier.Kept) error {
	if k.Mark == tier.NotFound {
		return ErrNotFound
	}
	return &BackoffError{Key: key, Cause: string(k.Value)}
}

// markDegraded leaves in the reserve the mark of key's load without Redis
// that failed with err (its entry is named name), begun at since: for NegativeFor a key
// not found, for ErrorBackoff a failure, as the fill would store in Redis
// (fillFor); nothing for a private answer, a load that stores nothing, or
// no error at all.
func (g *Group) markDegraded(key, name string, err error, since time.Time) {
	now := time.Now()
	k := tier.Kept{Key: key, Name: name, Base: now}
	switch {
	case err == nil, privateOf(err) != nil, isNoStore(err):
		return
	case errors.Is(err, ErrNotFound):
		if g.opts.NegativeFor <= 0 {
			return
		}
		k.Mark, k.FreshUntil = tier.NotFound, now.Add(g.opts.NegativeFor)
	default:
		k.Mark, k.FreshUntil, k.Value = tier.Failed, now.Add(g.opts.ErrorBackoff), causeText(err)
	}
	k.StaleUntil = k.FreshUntil
	g.reserve.PutSince(k, since)
}

// refreshReserve reloads c's stale value in the background, unless a
// refresh of it runs or backs off; the value it loads is kept, and a
// failure backs off ErrorBackoff.
func (g *Group) refreshReserve(ctx context.Context, c *call, now time.Time) {
	if !g.reserve.StartRefresh(c.key, now) {
		return
	}
	detached := context.WithoutCancel(ctx)
	g.goBackground(func() {
		if next, ok := g.refreshCoordinated(detached, c); ok {
			g.reserve.RefreshFailed(c.key, next)
			return
		}
		o, _ := g.callLoader(detached, c.key, c.load, true, nil)
		if !g.keepDegraded(c, o) && !g.refreshFailedDegraded(c.key, c.nm.entry, o.err, o.begun(c.start)) {
			if h := g.opts.Hooks.RefreshError; h != nil && o.err != nil {
				h(c.key, o.err)
			}
		}
	})
}

// coordinateRetry is how soon a reserve's refresh tries Redis again when
// Redis is known up but this client did not reach it.
const coordinateRetry = 100 * time.Millisecond

// refreshCoordinated tries a reserve's refresh through Redis first, as any
// refresh goes: Redis may be back (the breaker's probe closed it) while
// this node still serves its reserve, and then the fleet
// loads the key once, not once per node. It reads the key, trying its
// lease: a value stored meanwhile is kept; a lease won is loaded and
// filled; a lease held elsewhere is waited out (next: when to look
// again). ok is false when Redis cannot be asked: load on this node.
func (g *Group) refreshCoordinated(ctx context.Context, c *call) (next time.Time, ok bool) {
	probe, allowed := g.br.AllowKey(c.key)
	if !allowed {
		return time.Time{}, false
	}
	defer g.br.Release(probe)
	readAt := time.Now()
	rr, err := g.read(ctx, c.nm, false)
	if err != nil {
		if errors.Is(err, errMasterDown) {
			return time.Time{}, false // that master is down, not Redis: load here
		}
		if g.loc.Serving() || g.reach.redisUp() {
			// Redis is up (the tier's report connections reach it, or a
			// connection can be made): this client will reach it soon.
			// Wait for it rather than load here.
			return time.Now().Add(coordinateRetry), true
		}
		return time.Time{}, false
	}
	e, st := g.classify(c.key, rr)
	switch {
	case rr.x > 0:
		g.leaseHook(c.key, true)
		res, err := g.loadAndFill(ctx, c, rr.x, st == stale, kept(e))
		if err == nil {
			g.keepDegraded(c, outcome{v: res.Value})
		}
	case st == fresh || st == stale:
		left := time.Duration(e.FreshUntil-rr.now) * time.Millisecond
		g.reserve.PutSince(tier.Kept{Key: c.key, Name: c.nm.entry, Value: e.Value, FreshUntil: time.Now().Add(left),
			StaleUntil: time.Now().Add(time.Duration(e.StaleUntil-rr.now) * time.Millisecond),
			Base:       time.Now().Add(-time.Duration(max(rr.now-e.Written, 0)) * time.Millisecond)}, readAt)
	case rr.x < 0:
		g.leaseHook(c.key, false)
		return time.Now().Add(time.Duration(-rr.x) * time.Millisecond), true
	}
	return time.Now().Add(g.opts.ErrorBackoff), true
}

// keepDegraded keeps the value c's load returned without Redis in the
// reserve, with the windows it would have been stored with; false when
// there is nothing to keep (an error, or no window).
func (g *Group) keepDegraded(c *call, o outcome) bool {
	if o.err != nil {
		return false
	}
	fresh, stale := g.jittered(c.co.freshFor), c.co.staleFor
	if o.win != nil {
		fresh, stale = o.win.Fresh, o.win.Stale
		switch {
		case fresh == Disabled:
			return false
		case fresh == Expired:
			fresh = 0
		case fresh == 0:
			fresh = g.jittered(c.co.freshFor)
		}
		switch stale {
		case 0:
			stale = c.co.staleFor
		case Disabled:
			stale = 0
		}
		if o.win.MustRevalidate {
			stale = 0 // never served stale
		}
	}
	return g.keepReserve(c.key, c.nm.entry, o.v, time.Now(), fresh, stale, o.begun(c.start))
}

// supersedeReserve gives the reserve what this node just read of key from
// Redis (e, read at now, Redis ms, by a read sent at sent), in place of what it keeps of key, if
// anything (tier.Reserve.Supersede): kept through a return of Redis, an
// older value would be served again at the next failure, though this
// node served the newer one. A key Redis says has no value, or a failure
// remembered, drops what is kept.
func (g *Group) supersedeReserve(key string, e *entry.Entry, now int64, age time.Duration, sent time.Time) {
	if !g.reserve.Holding() {
		return
	}
	switch {
	case e.Negative || e.ErrMark:
		g.reserve.Remove(key)
	case e.Oversize || e.Marker():
		// Not a value this node holds whole, or none yet.
	default:
		t := time.Now()
		g.reserve.Supersede(key, e.Value, t.Add(time.Duration(e.FreshUntil-now)*time.Millisecond),
			t.Add(time.Duration(e.StaleUntil-now)*time.Millisecond), t.Add(-age), sent)
	}
}
