package guard

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/internal/tierhit"
)

func init() {
	tierhit.Hit = func(g any, ctx context.Context, key string) ([]byte, bool, time.Duration, time.Duration, bool) {
		res, ok := g.(*Group).tierHit(ctx, key)
		return res.Value, res.Status == Stale, res.Age, res.Fresh, ok
	}
}

// tierHit is Do's answer from the in-process tier, for a load Do would
// not call (see package internal/tierhit): ok is false where Do would
// go further than the tier, or fail.
func (g *Group) tierHit(ctx context.Context, key string) (Result, bool) {
	if g.check(ctx, key, noLoad) != nil || g.opts.EarlyRefreshBeta > 0 {
		return Result{}, false
	}
	it, now, ok := g.loc.Get(key)
	if !ok {
		return Result{}, false
	}
	g.hot.tierHit(key, now)
	return g.localResult(key, it, now), true
}

// Get returns the value of key, loading it with load when no usable value
// exists. See Do.
func (g *Group) Get(ctx context.Context, key string, load LoadFunc, opts ...CallOption) ([]byte, error) {
	r, err := g.Do(ctx, key, load, opts...)
	return r.Value, err
}

// Do returns the value of key with its Status and Age. A stale value is
// served at once while one node refreshes it; with none, one caller in the
// fleet loads and the others wait, each leaving on its own ctx.
func (g *Group) Do(ctx context.Context, key string, load LoadFunc, opts ...CallOption) (Result, error) {
	if err := g.check(ctx, key, load); err != nil {
		return Result{}, err
	}
	if len(opts) > 0 {
		// Checked before any answer: a bad option fails every call.
		if co := g.callOptions(opts); co.err != nil {
			return Result{}, co.err
		}
	}
	if it, now, ok := g.loc.Get(key); ok {
		g.hot.tierHit(key, now)
		if g.opts.EarlyRefreshBeta > 0 && !it.Stale {
			if rnow, known := g.clk.at(now); known && g.earlyRefreshDue(it.Entry, rnow) {
				g.refreshEarly(ctx, g.newCall(key, load, g.callOptions(opts)))
			}
		}
		return g.localResult(key, it, now), nil
	}
	g.hot.call(key)
	co := g.callOptions(opts)
	probe, ok := g.br.AllowKey(key)
	if !ok {
		return g.degraded(ctx, g.newCall(key, load, co))
	}
	// Settles a probe this call carries however the call ends (a breaker
	// with no background Probe hands one to a call): a caller that leaves
	// before Redis answered must not leave the breaker half-open for good.
	defer g.br.Release(probe)
	if e, ok := g.passHint(key); ok {
		g.missHook(key)
		return g.passLoad(ctx, g.newCall(key, load, co), e)
	}
	e, now, k, hit, err := g.fastHit(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		return Result{}, ctx.Err()
	case err != nil:
		return g.degraded(ctx, g.newCall(key, load, co))
	case hit:
		if g.earlyRefreshDue(e, now) {
			g.refreshEarly(ctx, g.newCall(key, load, co))
		}
		return g.served(key, e, now, Hit, k, true)
	}
	return g.readPath(ctx, g.newCall(key, load, co))
}

// call is one Do past the fast path: what every stage of its read → miss →
// load → fill flow needs. Its ctx travels beside it, first, as Go has it;
// the stages that outlive the caller run on context.WithoutCancel of it.
type call struct {
	key   string
	nm    names       // the Redis names of key
	load  LoadFunc    // runs at most once, whichever stages ask for it
	co    callOptions // the windows of the value it loads
	start time.Time   // bounds the turns it waits for (takeTurns)
	// reread: the call read Redis again after a failure (degraded)
	reread bool
	// backup: the call loads under the key's backup lease (nm names it
	// as the lease): its fill leaves the fence counter as it is
	backup bool
	// loaded: when the last load this call ran, or its miss flight
	// joined, ended (see lookup.at)
	loaded time.Time
	// missed: Hooks.Miss ran for this call (missOnce); its caller's
	// goroutine alone reads and sets it
	missed bool
}

func (g *Group) newCall(key string, load LoadFunc, co callOptions) *call {
	return &call{key: key, nm: g.names(key), load: loadOnce(load), co: co, start: time.Now()}
}

// readPath answers a call the fast path could not: one read of the key for
// all its callers in this process, then a fresh or stale answer, the
// load the read's flight ran, or the miss flight; again when the flight
// ended with another caller's private answer (see Private).
func (g *Group) readPath(ctx context.Context, c *call) (Result, error) {
	return g.takeTurns(ctx, c, func() (Result, error) { return g.readPathOnce(ctx, c) })
}

func (g *Group) readPathOnce(ctx context.Context, c *call) (Result, error) {
	lk, err := g.lookup(ctx, c)
	if err == nil && lk.owner != c && !g.joinedFits(c, &lk) {
		// This call joined a read sent, or a load ended, before it began,
		// and a newer value may have been returned since (to a call that
		// may have ended before this one began): it reads again. That
		// flight ended, so the one it joins now (or starts) was sent
		// after it began: the calls in the same case share one read,
		// not one each (as many reads as calls under TrackHeld, which
		// joins only reads sent within LocalLag).
		lk, err = g.lookup(ctx, c)
		if err == nil && lk.owner != c && !g.joinedFits(c, &lk) {
			lk, err = g.readOnce(context.WithoutCancel(ctx), c, nil)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return g.degraded(ctx, c)
	}
	switch lk.st {
	case fresh:
		return g.served(c.key, lk.e, lk.now, Hit, lk.k, !c.missed)
	case stale:
		return g.served(c.key, lk.e, lk.now, Stale, lk.k, !c.missed)
	case passing:
		g.hintPass(c.key, c.nm.entry, lk.e)
		g.missOnce(c)
		return g.passLoad(ctx, c, lk.e)
	case oversized:
		g.missOnce(c)
		return g.loadOversize(ctx, c.key, c.load, lk.e, lk.now)
	case capped:
		g.missOnce(c)
		return g.cappedLoad(ctx, c)
	case loaded:
		g.missOnce(c)
		if err := mine(c, lk.owner, lk.err); err != lk.err {
			return Result{}, err
		}
		return g.claim(c.key, lk.res, lk.claimed, lk.owner != c, lk.err), lk.err
	}
	g.missOnce(c)
	return g.missFlight(ctx, c, lk.x)
}

// claim gives the Miss of a flight's load to its first caller; the others
// shared it. A follower of a flight that ended otherwise without error (a
// fill of another node's it waited for: Shared already) shared it too:
// either way, each caller but one is Coalesced.
func (g *Group) claim(key string, res Result, claimed *atomic.Bool, follower bool, err error) Result {
	shared := follower && err == nil && res.Status != Miss
	if res.Status == Miss && !claimed.CompareAndSwap(false, true) {
		res.Status, shared = Shared, true
	}
	if h := g.opts.Hooks.Coalesced; h != nil && shared {
		h(key)
	}
	return res
}

// joinedFits reports whether lk, the outcome of another call's read
// flight, may answer c. A value read: unless the read was sent before c
// began and a newer value was returned since (joinedCurrent). A value
// loaded: only if c began before the load ended, so before its fill; a
// call that began later may follow a change that replaced that fill
// (every node read it, then Invalidate returned) while the flight's
// goroutine had not yet handed its value over.
func (g *Group) joinedFits(c *call, lk *lookup) bool {
	switch lk.st {
	case fresh, stale:
		return g.joinedCurrent(c.start, lk.at, c.nm.entry, lk.k.tk, &lk.e)
	case loaded:
		return !c.start.After(lk.at)
	}
	return true
}

// joinedCurrent reports whether the entry e of the entry named name, read
// at at with ticket tk by another call's read, may answer a call that
// began at start and joined that read: the read was sent after the call
// began, or no newer value was returned since it was sent
// (localTier.current).
//
// With TrackHeld, Redis reports only the changes of keys this node read
// tracked, so the tier cannot tell of the others: a read sent more than
// LocalLag before the call began may have missed a change that returned
// more than LocalLag before it, and the call reads for itself. A read
// sent within LocalLag saw every change returned before that.
func (g *Group) joinedCurrent(start, at time.Time, name string, tk tier.Ticket, e *entry.Entry) bool {
	if !start.After(at) {
		return true
	}
	if g.loc != nil && g.opts.LocalTracking == TrackHeld && start.Sub(at) > g.opts.LocalLag {
		return false
	}
	return g.loc.Current(name, tk, e)
}

// localHit serves key from the in-process tier when it holds a copy
// (localTier): a fresh value whose entry has not changed in Redis since.
func (g *Group) localHit(key string) (Result, bool) {
	it, now, ok := g.loc.Get(key)
	if !ok {
		return Result{}, false
	}
	return g.localResult(key, it, now), true
}

// localResult is the answer of a copy it, served at now (tier.Nanotime).
func (g *Group) localResult(key string, it *tier.Item, now int64) Result {
	age := time.Duration(now - it.Base)
	st := Hit
	if it.Stale {
		st = Stale
		if h := g.opts.Hooks.Stale; h != nil {
			h(key, age)
		}
	} else if h := g.opts.Hooks.Hit; h != nil {
		h(key, age, true)
	}
	var fresh time.Duration
	if rnow, known := g.clk.at(now); known {
		fresh = time.Duration(it.Entry.FreshUntil-rnow) * time.Millisecond
	}
	return Result{Value: it.Entry.Value, Status: st, Age: age, Fresh: fresh}
}

// staleLocal is how long the in-process tier serves a copy of a stale
// value before this node reads Redis again: the refresh that replaces it
// drops it sooner (its report), and a read of Redis is what tries the
// refresh lease again when the refresh failed or its node died.
const staleLocal = 250 * time.Millisecond

// keep says where a read's value may go in the in-process tier: the name
// of the key's entry and the ticket the read took before it was sent (see
// localTier). The zero keep keeps nothing.
type keep struct {
	name string
	tk   tier.Ticket
	sent time.Time // when the read was about to be sent, for the reserve
}

// keepOf returns the keep of a read of the entry named name about to be
// sent.
func (g *Group) keepOf(name string) keep {
	return keep{name: name, tk: g.loc.Ticket(name), sent: time.Now()}
}

// served turns a decoded entry into the caller's answer; a fresh value is
// offered to the in-process tier as k says, and any other entry leaves its
// mark there (localTier.seen). report: the answer is the call's lookup, for
// Hooks.Hit or Hooks.Stale (not when the call reported its miss already).
func (g *Group) served(key string, e entry.Entry, now int64, st Status, k keep, report bool) (Result, error) {
	age := time.Duration(max(now-e.Written, 0)) * time.Millisecond
	g.keepLocal(key, e, now, age, k, st == Stale)
	g.supersedeReserve(key, &e, now, age, k.sent)
	// A not-found or a failure remembered answers the call as a value
	// does: a lookup the hooks count.
	switch {
	case !report:
	case st == Stale:
		if h := g.opts.Hooks.Stale; h != nil {
			h(key, age)
		}
	default:
		if h := g.opts.Hooks.Hit; h != nil {
			h(key, age, false)
		}
	}
	switch {
	case e.Negative:
		return Result{Status: st, Age: age}, ErrNotFound
	case e.ErrMark:
		return Result{Status: st, Age: age}, &BackoffError{Key: key, Cause: string(e.Value)}
	}
	fresh := time.Duration(e.FreshUntil-now) * time.Millisecond
	return Result{Value: e.Value, Status: st, Age: age, Fresh: fresh, Oversize: e.Oversize}, nil
}

// keepLocal offers the fresh entry e of key, read at now (Redis ms), to
// the in-process tier; an entry it may not keep (stale, or not a value)
// leaves its mark.
func (g *Group) keepLocal(key string, e entry.Entry, now int64, age time.Duration, k keep, stale bool) {
	if g.loc == nil || k.name == "" {
		return
	}
	if e.Negative || e.ErrMark || e.Oversize || e.Marker() || (stale && e.MustRevalidate) {
		g.loc.Seen(key, k.name, &e)
		return
	}
	// now is when Redis read its clock, before its reply travelled: the
	// estimate, which never runs behind Redis's clock, may be later, and
	// a copy must not outlive its fresh-until (a stale one, its
	// stale-until).
	if est, known := g.clk.now(); known {
		now = max(now, est)
	}
	left := time.Duration(e.FreshUntil-now) * time.Millisecond
	if stale {
		left = min(time.Duration(e.StaleUntil-now)*time.Millisecond, staleLocal)
	}
	if left <= 0 {
		g.loc.Seen(key, k.name, &e)
		return
	}
	g.loc.Keep(key, k.name, k.tk, &e, left, age, stale)
}
