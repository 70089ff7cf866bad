package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// lookup is the outcome of one read of a key, shared by the callers of the
// process that asked for the key while it ran.
type lookup struct {
	e   entry.Entry
	st  state
	now int64     // Redis clock, ms
	x   int64     // the read's lease outcome (see readReply)
	k   keep      // where a fresh value may go in the in-process tier
	at  time.Time // when the read was sent, or (loaded) its load ended; see joinedFits

	// st == loaded: the read won the lease of a missing key and loaded it.
	res     Result
	err     error
	claimed *atomic.Bool // the first caller to look claims the Miss
	owner   *call        // whose read (and load) it was (see mine, joined)
}

type state int

const (
	missing state = iota
	fresh
	stale
	loaded    // by the read's own flight, which won the lease
	passing   // a pass marker (Pass): each caller runs its own load
	oversized // a fresh oversize marker this node holds no copy of
	capped    // missing, and its tag is full (MaxTagKeys): each caller loads
)

// flight is what the waiting callers of one read flight share besides its
// result: word that the flight found the key missing and is loading it, so
// each caller reports its miss while the load runs.
type flight struct {
	loading chan struct{}
	once    sync.Once
	callers int
}

func (f *flight) startLoading() {
	if f != nil {
		f.once.Do(func() { close(f.loading) })
	}
}

// joinFlight registers a caller of key's read flight; the caller must
// defer leaveFlight, which settles the registration however it leaves.
func (g *Group) joinFlight(key string) *flight {
	g.fmu.Lock()
	defer g.fmu.Unlock()
	f := g.flights[key]
	if f == nil {
		f = &flight{loading: make(chan struct{})}
		g.flights[key] = f
	}
	f.callers++
	return f
}

func (g *Group) leaveFlight(key string, f *flight) {
	g.fmu.Lock()
	defer g.fmu.Unlock()
	if f.callers--; f.callers == 0 && g.flights[key] == f {
		delete(g.flights, key)
	}
}

// lookup reads key once for all its concurrent callers in this process (so
// a herd of N callers costs one round trip, not N) and acts on the lease
// the read may have won: a stale key is refreshed in the background, a
// missing key is loaded by the flight itself. Each caller leaves on its own
// ctx.
func (g *Group) lookup(ctx context.Context, c *call) (lookup, error) {
	var fl *flight // nil on the uncancellable path
	fn := func() (any, error) { return g.readOnce(context.WithoutCancel(ctx), c, fl) }
	if ctx.Done() == nil {
		// Nothing can cancel this caller: no goroutine needed.
		v, err, _ := g.sf.Do("r"+c.key, fn)
		lk, _ := v.(lookup)
		return lk, err
	}
	fl = g.joinFlight(c.key)
	defer g.leaveFlight(c.key, fl)
	ch := g.sf.DoChan("r"+c.key, fn)
	if g.testJoined != nil {
		g.testJoined(c.key)
	}
	loading := fl.loading
	for {
		select {
		case r := <-ch:
			lk, _ := r.Val.(lookup)
			return lk, r.Err
		case <-loading:
			g.missOnce(c) // the call's Miss, once (call.missed)
			loading = nil
		case <-ctx.Done():
			return lookup{}, ctx.Err()
		}
	}
}

// readOnce is the body of a read flight: the read script (Do tried the
// fast hit path already), then what its lease outcome calls for.
func (g *Group) readOnce(ctx context.Context, c *call, fl *flight) (lookup, error) {
	g.step(ctx, "read")
	k := g.keepOf(c.nm.entry)
	at := time.Now()
	rr, err := g.read(ctx, c.nm, false)
	if err != nil {
		return lookup{}, err
	}
	e, st := g.classify(c.key, rr)
	if rr.capped && st != fresh && st != stale {
		// Its tag is full: no lease, so no refresh; a stale value is
		// still served.
		st = capped
	}
	switch {
	case st == fresh:
		g.hint(c.key, c.nm, e.FreshUntil)
		if g.earlyRefreshDue(e, rr.now) {
			g.refreshEarly(ctx, c)
		}
	case st == stale && rr.x > 0:
		g.leaseHook(c.key, true)
		g.refreshAsync(ctx, c, rr.x, e)
	case rr.x > 0:
		// Missing, and this read won the lease: load right here, so every
		// caller of this read shares the load, and the fleet gets its fill
		// even if every caller leaves.
		g.leaseHook(c.key, true)
		fl.startLoading()
		res, err := g.loadAndFill(ctx, c, rr.x, false, kept(e))
		return lookup{st: loaded, res: res, err: err, claimed: new(atomic.Bool), owner: c, at: c.loaded}, nil
	case rr.x < 0:
		g.leaseHook(c.key, false)
	}
	return lookup{e: e, st: st, now: rr.now, x: rr.x, k: k, at: at, owner: c}, nil
}

// classify decodes a read. A corrupt entry is reported and treated as
// missing (the read script treats it so too).
func (g *Group) classify(key string, rr readReply) (entry.Entry, state) {
	if !rr.present {
		return entry.Entry{}, missing
	}
	e, err := entry.Decode(rr.raw)
	if err != nil {
		if h := g.opts.Hooks.Corrupt; h != nil {
			h(key, err)
		}
		return entry.Entry{}, missing
	}
	if e.Oversize && !g.overValue(key, &e, rr.now) {
		// No copy of the value behind the marker: a fresh one is loaded
		// by this node alone; a stale one waits for its refresh.
		if rr.now < e.FreshUntil {
			return e, oversized
		}
		return entry.Entry{}, missing
	}
	switch {
	case e.Failing:
		// No value: its callers take turns (Private).
		return e, missing
	case e.Pass && rr.now < e.FreshUntil:
		return e, passing
	case e.Pass:
		return entry.Entry{}, missing
	case rr.now < e.FreshUntil:
		return e, fresh
	case rr.now < e.StaleUntil && e.MustRevalidate:
		// Never served stale: missing to its callers, kept for the load
		// that revalidates it (see kept).
		return e, missing
	case rr.now < e.StaleUntil && !e.Negative && !e.ErrMark:
		return e, stale
	}
	return entry.Entry{}, missing
}

// kept returns the entry classify found missing yet kept for revalidation,
// as the previous value of the load that replaces it, or nil.
func kept(e entry.Entry) *entry.Entry {
	if !e.MustRevalidate {
		return nil
	}
	return &e
}
