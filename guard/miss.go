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
		mo.res, err = g.resolveMiss(detached, c, x, &mo.marker, &mo.from)
		return mo, err
	})
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
		if f := mo.from; f.ok && mo.owner != c && !g.joinedCurrent(c.start, f.at, c.nm.entry, f.tk, &f.e) {
			// A value read before this call began, and a newer one was
			// returned since: this call reads for itself.
			return g.readPathOnce(ctx, c)
		}
		return g.claim(c.key, mo.res, mo.claimed), r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// waitState is where a miss flight's wait for another node's fill stands.
type waitState struct {
	start  time.Time
	poll   time.Duration // the fallback poll, doubling up to LockTTL
	holder time.Duration // the holder's remaining lease, when known
	force  bool          // read at once, trying the lease even if "fresh"
	// failing: the last read found a failing marker (Private): after
	// WaitTimeout no load outside the lease, whatever the policy.
	failing bool
	marker  *entry.Entry // where a pass marker found is handed to the callers
	// woke: the wait woke at least once; notified: its last wake-up was
	// the fill's notification (reported once, when the wait ends).
	woke, notified bool
	k              keep       // of the last read, for the in-process tier
	at             time.Time  // when the last read was sent
	from           *valueRead // set to the read whose value the wait returns
}

// resolveMiss is the body of a miss flight: wait for another node's fill
// (woken by its notification, or by a fallback poll for lost messages and
// expired leases), load under a lease a later read wins, or, after
// WaitTimeout, apply WaitTimeoutPolicy.
func (g *Group) resolveMiss(ctx context.Context, c *call, x int64, marker *entry.Entry, from *valueRead) (Result, error) {
	wake := make(chan struct{}, 1)
	defer g.hub.Register(c.nm.entry, wake)()
	// The first poll is short: a fill can land between the read and the
	// registration above. x == 0: the read judged the entry fresh yet it
	// did not decode (or it was an expired negative entry); read again at
	// once, trying the lease.
	w := waitState{start: time.Now(), poll: 50 * time.Millisecond,
		holder: time.Duration(-x) * time.Millisecond, force: x == 0, marker: marker, from: from}
	defer func() { g.wokenHook(c.key, w.woke, w.notified, w.start) }()
	deadline := w.start.Add(g.opts.WaitTimeout)
	for remaining := time.Until(deadline); remaining > 0; remaining = time.Until(deadline) {
		if !w.force {
			g.awaitFill(ctx, c.key, &w, wake, remaining)
		}
		w.k, w.at = g.keepOf(c.nm.entry), time.Now()
		rr, err := g.read(ctx, c.nm, w.force)
		w.force = false
		if err != nil {
			// Redis trouble while waiting: load on this node alone.
			return g.loadOnly(ctx, c.key, c.load, Degraded)
		}
		if res, err, done := g.afterWait(ctx, c, rr, &w); done {
			return res, err
		}
	}
	if w.failing {
		return Result{}, turnTimeout(c.key)
	}
	if c.co.waitPolicy == ReturnError {
		return Result{}, ErrWaitTimeout
	}
	// Fence 0: stored only if nothing newer landed and nothing was
	// invalidated meanwhile.
	return g.loadAndFill(ctx, c, 0, false, nil)
}

// awaitFill waits for the fill notification or the fallback poll.
func (g *Group) awaitFill(ctx context.Context, key string, w *waitState, wake <-chan struct{}, remaining time.Duration) {
	d := min(w.poll, remaining)
	if w.holder > 0 {
		d = min(d, w.holder)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	g.step(ctx, "wait")
	notified := false
	select {
	case <-wake:
		notified = true
	case <-t.C:
	}
	w.woke, w.notified = true, notified
	w.poll = min(w.poll*2, g.opts.LockTTL)
}

// afterWait acts on a read made after a wake-up: a value landed, this
// node won the lease, or the wait goes on (done false).
func (g *Group) afterWait(ctx context.Context, c *call, rr readReply, w *waitState) (res Result, err error, done bool) {
	e, st := g.classify(c.key, rr)
	w.failing = e.Failing
	switch {
	case st == passing:
		*w.marker = e
		return Result{}, errPassing, true
	case st == fresh:
		*w.from = valueRead{ok: true, e: e, tk: w.k.tk, at: w.at}
		res, err = g.served(c.key, e, rr.now, Shared, w.k)
		return res, err, true
	case st == stale:
		*w.from = valueRead{ok: true, e: e, tk: w.k.tk, at: w.at}
		res, err = g.served(c.key, e, rr.now, Stale, w.k)
		return res, err, true
	case st == oversized:
		res, err = g.loadOversize(ctx, c.key, c.load, e, rr.now)
		return res, err, true
	case rr.x > 0:
		g.leaseHook(c.key, true)
		res, err = g.loadAndFill(ctx, c, rr.x, false, kept(e))
		return res, err, true
	case rr.x < 0:
		w.holder = time.Duration(-rr.x) * time.Millisecond
	default:
		w.force = true // undecodable yet "fresh" to the script
	}
	return Result{}, nil, false
}
