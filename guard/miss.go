package guard

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// missOutcome is a miss flight's answer; exactly one of its callers claims
// a Miss (the others get Shared).
type missOutcome struct {
	res     Result
	claimed *atomic.Bool
	owner   *call       // whose load it was (see mine)
	marker  entry.Entry // with errPassing: the pass marker read
	from    valueRead   // when res is a value a read found: that read
	loaded  time.Time   // when res is a load's: when that load ended
}

// valueRead is the read that found a value a flight hands its callers.
type valueRead struct {
	ok bool
	e  entry.Entry
	tk tier.Ticket
	at time.Time // when it was sent
}

// missFlight joins the miss flight of the call's key (one per process);
// each caller leaves on its own ctx. x is the read's lease outcome.
func (g *Group) missFlight(ctx context.Context, c *call, x int64) (Result, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.sf.DoChan("m"+c.key, func() (any, error) {
		mo := missOutcome{claimed: new(atomic.Bool), owner: c}
		var err error
		c.loaded = time.Time{}
		mo.res, err = g.resolveMiss(detached, c, x, &mo.marker, &mo.from)
		mo.loaded = c.loaded
		return mo, err
	})
	g.step(ctx, "miss flight") // joined it, as its leader or a follower
	select {
	case r := <-ch:
		mo, _ := r.Val.(missOutcome)
		if r.Err == errPassing {
			g.hintPass(c.key, c.nm.entry, mo.marker)
			return g.passLoad(ctx, c, mo.marker)
		}
		if err := mine(c, mo.owner, r.Err); err != r.Err {
			return Result{}, err
		}
		if r.Err == ErrWaitTimeout && mo.owner != c && time.Since(c.start) < g.opts.WaitTimeout {
			// It joined a wait that began before it: its own wait is
			// WaitTimeout too, so it waits again (takeTurns bounds it).
			return Result{}, errTurn
		}
		if mo.owner != c && !mo.fits(g, c) {
			// A value read or loaded before this call began, and a newer
			// one may have been returned since: this call reads for
			// itself.
			return g.readPathOnce(ctx, c)
		}
		return g.claim(c.key, mo.res, mo.claimed, mo.owner != c, r.Err), r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// fits reports whether mo, the outcome of another call's miss flight, may
// answer c: as joinedFits says of a read flight's.
func (mo *missOutcome) fits(g *Group, c *call) bool {
	if f := mo.from; f.ok {
		return g.joinedCurrent(c.start, f.at, c.nm.entry, f.tk, &f.e)
	}
	return mo.loaded.IsZero() || !c.start.After(mo.loaded)
}

// missWait is the driver of a single key's wait for another node's fill
// (see waitFor): its reads, and what they found.
type missWait struct {
	g   *Group
	ctx context.Context // the flight's, detached from its callers
	c   *call
	// failing: the last read found a failing marker (Private): after
	// WaitTimeout no load outside the lease, whatever the policy.
	failing bool
	marker  *entry.Entry // where a pass marker found is handed to the callers
	from    *valueRead   // set to the read whose value the wait returns
	// backedUp: BackupLoad was applied once; the next late is
	// ErrWaitTimeout.
	backedUp bool
	res      Result
	err      error
}

// resolveMiss is the body of a miss flight: wait for another node's fill
// (woken by its notification, or by a fallback poll for lost messages and
// expired leases), load under a lease a later read wins, or, after
// WaitTimeout, apply WaitTimeoutPolicy. x is the read's lease outcome:
// < 0, another node holds the lease (-x ms left); 0, the read judged the
// entry fresh yet it did not decode (or it was an expired negative
// entry): read again at once, trying the lease.
func (g *Group) resolveMiss(ctx context.Context, c *call, x int64, marker *entry.Entry, from *valueRead) (Result, error) {
	d := &missWait{g: g, ctx: ctx, c: c, marker: marker, from: from}
	w := &waiter{key: c.key, name: c.nm.entry, holder: time.Duration(-x) * time.Millisecond, force: x == 0}
	g.waitFor(ctx, []*waiter{w}, d)
	return d.res, d.err
}

// reread reads the key again after a wake-up and acts on what it finds.
func (d *missWait) reread(ws []*waiter, resolve func(*waiter), _ bool) {
	w, g, c := ws[0], d.g, d.c
	k := g.keepOf(c.nm.entry)
	rr, err := g.read(d.ctx, c.nm, w.force)
	w.force, w.now = false, false
	if err != nil {
		// Redis trouble while waiting: serve on this node alone.
		d.res, d.err = g.alone(d.ctx, c)
		resolve(w)
		return
	}
	e, st := g.classify(c.key, rr)
	d.failing = e.Failing
	switch {
	case rr.capped && st != fresh && st != stale:
		d.res, d.err = g.cappedLoad(d.ctx, c)
	case st == passing:
		*d.marker, d.err = e, errPassing
	case st == fresh || st == stale:
		if rr.x > 0 {
			// The read won the lease over a value (a forced read, or a
			// stale one): refresh it as a read's flight does, or, fresh,
			// give it back rather than leave it held with no load.
			if st == stale {
				// On a call of its own: the refresh runs on after this
				// wait, which goes on using c.
				g.leaseHook(c.key, true)
				rc := *c
				g.refreshAsync(d.ctx, &rc, rr.x, e)
			} else {
				g.releaseLeases(d.ctx, []heldLease{{c.nm, rr.x}})
			}
		}
		*d.from = valueRead{ok: true, e: e, tk: k.tk, at: k.sent}
		status := Shared
		if st == stale {
			status = Stale
		}
		d.res, d.err = g.served(c.key, e, rr.now, status, k, false)
	case st == oversized:
		d.res, d.err = g.loadOversize(d.ctx, c.key, c.load, e, rr.now)
	case rr.x > 0:
		g.leaseHook(c.key, true)
		d.res, d.err = g.loadAndFill(d.ctx, c, rr.x, false, kept(e))
	case rr.x < 0:
		w.holder = time.Duration(-rr.x) * time.Millisecond
		return
	default:
		w.force = true // undecodable yet "fresh" to the script
		return
	}
	resolve(w)
}

// joined takes a load of this process the wait joined: a value, unless
// it was another caller's private answer, or ended before the call began.
func (d *missWait) joined(_ *waiter, o outcome) bool {
	if privateOf(o.err) != nil || !o.takes(d.c.start) {
		return false
	}
	d.res, d.err = Result{Value: o.v, Status: Shared}, o.err
	d.c.loaded = o.end
	return true
}

// closed ends the wait of a Group closing.
func (d *missWait) closed([]*waiter) { d.err = ErrClosed }

// late applies WaitTimeoutPolicy: no load outside the lease at a failing
// key; ErrWaitTimeout; a backup load (backup.go); or a load of this
// node's own, stored only if nothing newer landed and nothing was
// invalidated meanwhile (fence 0).
func (d *missWait) late([]*waiter) {
	switch {
	case d.failing:
		d.err = turnTimeout(d.c.key)
	case d.c.co.waitPolicy == BackupLoad && !d.backedUp:
		d.backedUp = true
		d.g.backup(d)
	case d.c.co.waitPolicy != LoadLocally:
		d.err = ErrWaitTimeout
	default:
		d.res, d.err = d.g.loadAndFill(d.ctx, d.c, 0, false, nil)
	}
}
