package guard

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/stampede-go/stampede/guard/internal/breaker"
	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/lua"
)

// The fill: what a load's outcome stores (fillFor), and the one round trip
// that stores it, settles the lease and wakes the waiters (guard_fill.lua).

// fillMode is how guard_fill.lua writes: its ARGV[7].
type fillMode string

const (
	fillWrite     fillMode = "w" // write, subject to the fence
	fillIfMissing fillMode = "m" // write where no value is stored (a marker never replaces one)
	fillKeepTail  fillMode = "k" // a revalidation: the new head, then the stored tail
	fillIfSame    fillMode = "c" // write if the stored entry is still the one read
	fillNone      fillMode = "-" // write nothing: settle the lease, wake the waiters
)

// fillFlag is what an entry holds: guard_fill.lua's ARGV[6], the entry's
// flags (see package entry).
type fillFlag string

const (
	flagValue      fillFlag = ""  // a value
	flagNegative   fillFlag = "n" // the loader said not found
	flagError      fillFlag = "e" // a cold key's load failed: the error text
	flagRevalidate fillFlag = "r" // a value never served stale, kept to revalidate
	flagFailing    fillFlag = "f" // no value: loads fail for their own callers
	flagPass       fillFlag = "p" // no value: each call runs its own load
	flagOversize   fillFlag = "o" // no value: each node keeps its own copy
)

// fillFor decides what a load's outcome stores.
func (g *Group) fillFor(co callOptions, fence int64, o outcome, refresh bool) fillSpec {
	v, err := o.v, o.err
	f := fillSpec{fence: fence, loadDur: o.d, mode: fillWrite, since: o.begun(time.Time{})} // a batch sets its start
	switch {
	case err == nil && o.win != nil:
		// The loader said how long this value lives: exactly that long.
		f.value, f.fresh, f.stale = v, o.win.Fresh, o.win.Stale
		if o.win.MustRevalidate {
			f.flags = flagRevalidate
		}
		if f.fresh == 0 {
			f.fresh = g.jittered(co.freshFor)
		}
		switch f.stale {
		case 0:
			f.stale = co.staleFor
		case Disabled:
			f.stale = 0
		}
		switch f.fresh {
		case Disabled:
			f.mode = fillNone // served to the callers of this flight, not stored
		case Expired:
			f.fresh = 0
			if f.stale == 0 {
				f.mode = fillNone // neither served stale nor kept: useless
			}
		}
	case err == nil:
		f.value, f.fresh, f.stale = v, g.jittered(co.freshFor), co.staleFor
	case privateOf(err) != nil:
		f.private(g, privateOf(err), co, refresh)
	case isNoStore(err):
		f.mode = fillNone // the lease is released; nothing is stored or backed off
	case errors.Is(err, ErrNotFound) && g.opts.NegativeFor > 0:
		f.fresh, f.flags = g.opts.NegativeFor, flagNegative
	case errors.Is(err, ErrNotFound):
		f.mode = fillNone
	case refresh:
		// Stale-if-error: keep the stale value, and hold the lease for the
		// back-off so no node retries at once.
		f.mode, f.keepLease = fillNone, g.opts.ErrorBackoff
	default:
		// A cold key: an error marker (never over a value) makes every node
		// back off instead of calling the failing loader again.
		f.mode, f.fresh, f.flags, f.value = fillIfMissing, g.opts.ErrorBackoff, flagError, causeText(err)
	}
	if err == nil && len(v) > g.opts.MaxValueBytes && f.mode == fillWrite {
		f.overMarker(v)
	}
	if o.reval != nil && f.mode == fillWrite && f.flags != flagOversize {
		// Only the new head travels; the script keeps the stored tail.
		f.mode, f.value, f.trim, f.expect = fillKeepTail, o.reval.head, o.reval.trim, o.reval.expect
	}
	return f
}

// fillSpec is what loadAndFill stores.
type fillSpec struct {
	fence        int64
	value        []byte
	fresh, stale time.Duration
	loadDur      time.Duration
	flags        fillFlag
	mode         fillMode
	keepLease    time.Duration
	trim         int    // mode "k": stored payload bytes value replaces
	expect       string // mode "k": "fence,written" of the entry revalidated
	keep         []byte // flags "o": the value kept in process once the marker is stored
	backup       string // "b": the fill of a backup load (guard_fill.lua's ARGV[14])
	// since: when the load began (outcome.begun), for the reserve, which
	// keeps the value if Redis does not take it (keepUnfilled)
	since time.Time
}

// overMarker turns the fill of value v, too large for Redis, into an
// oversize marker with v's windows (see Options.MaxValueBytes). A value never served
// stale (flags "r") gets a marker without a stale window: a marker cannot
// be revalidated.
func (f *fillSpec) overMarker(v []byte) {
	if f.flags == flagRevalidate {
		f.stale = 0
	}
	f.flags, f.value, f.keep = flagOversize, nil, v
	if satAdd(f.fresh, f.stale) <= 0 {
		f.mode = fillNone // neither fresh nor stale: nothing to mark
	}
}

// freshWindow is how long a stored value is fresh, for Result.Fresh.
func (f fillSpec) freshWindow() time.Duration {
	if f.mode == fillNone {
		return 0
	}
	return f.fresh
}

// store runs guard_fill.lua: store (subject to the fence), settle the lease,
// wake the waiters. Failures are reported through hooks; the callers have
// their value either way.
func (g *Group) store(ctx context.Context, key string, nm names, f fillSpec) fillVerdict {
	fresh := f.fresh
	if f.mode == fillNone {
		fresh = time.Millisecond // windows are not used, but must be valid
	}
	// Whatever the outcome (a timeout may have run the script): a read
	// sent before it returns may carry the value it replaced, which is
	// kept no more in the in-process tier (nor in the reserve: before a
	// failed fill's own value is kept there).
	changed := func() {
		if f.mode != fillNone {
			g.loc.Changed(nm.entry)
		}
	}
	sent := g.clk.local()
	var reply []any
	err := g.toMaster(context.WithoutCancel(ctx), nm.user, nm.keys[0], func() (err error) {
		keys, beside := nm.keys, ""
		if f.backup == "" && f.fence != 0 {
			// A holder's fill: judged beside a backup load that runs.
			keys, beside = append(slices.Clip(nm.keys), nm.backupLease()), "B"
		}
		reply, err = g.fillQ.For(ctx, nm.keys[0]).Call(context.WithoutCancel(ctx), lua.Call{Keys: keys, Args: []any{f.fence, f.value, ms(fresh), ms(f.stale),
			f.loadDur.Microseconds(), string(f.flags), string(f.mode), ms(f.keepLease), nm.entry, g.keepArg, f.trim, f.expect,
			g.capArg, f.backup, beside}})
		return err
	})
	if err != nil {
		g.redisFailed("fill", err)
		g.fillRefused(err, nm, f.fence)
		changed()
		g.keepUnfilled(key, nm, f)
		if f.mode == fillNone {
			return fillLanded
		}
		return fillUnknown
	}
	defer changed()
	g.br.Success()
	return g.filled(key, nm, f, reply, sent)
}

// fillVerdict is what became of a fill: it landed (or wrote nothing, by
// design), a newer value or an Invalidate beat it, or its outcome is
// unknown (Redis failed, or did not answer in time).
type fillVerdict int

const (
	fillLanded fillVerdict = iota
	fillRejected
	fillUnknown
)

// fillRefused acts on a fill Redis refused to this user (an ACL without a
// command the fill script runs, while the reads pass): the fill can never
// land, so the waiters of the other nodes would wait out WaitTimeout at
// every expiry, and the reads' successes keep the breaker from counting
// the refusals in a row. The breaker opens at once, so that this node
// serves Degraded (one load per key per FreshFor, no wait), as for any
// refusal; the leases the fill would have settled are given back, best
// effort, so that the waiters need not wait them out.
func (g *Group) fillRefused(err error, nm names, fence int64) {
	if !breaker.Refused(err) {
		return
	}
	g.br.Trip()
	if fence > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), g.redisTimeout())
		defer cancel()
		g.releaseLeases(ctx, []heldLease{{nm, fence}})
	}
}

// keepUnfilled keeps the value of fill f, which Redis did not take (it
// failed or stopped answering meanwhile), in the reserve for its windows:
// the calls that Redis fails next are served it, degraded, as they are a
// value loaded while Redis was known down, rather than this node loading
// the key again in the same outage. Only a value is kept: a mark of a
// failure, of "not found" or of a pass is decided again.
func (g *Group) keepUnfilled(key string, nm names, f fillSpec) {
	if f.mode == fillNone || f.mode == fillKeepTail || f.value == nil || len(f.value) > g.opts.MaxValueBytes {
		return
	}
	stale := f.stale
	switch f.flags {
	case flagValue:
	case flagRevalidate:
		stale = 0 // never served stale
	default:
		return
	}
	g.keepReserve(key, nm.entry, f.value, time.Now(), f.fresh, stale, f.since)
}

// keepReserve keeps v, the value of key (its entry's name) whose load
// began at since, in the reserve from now: fresh for fresh, then stale for
// stale, unless an invalidation dropped key since (tier.Reserve.PutSince).
// It reports false, keeping nothing, when no window is left.
func (g *Group) keepReserve(key, name string, v []byte, now time.Time, fresh, stale time.Duration, since time.Time) bool {
	if satAdd(fresh, stale) <= 0 {
		return false
	}
	g.reserve.PutSince(tier.Kept{Key: key, Name: name, Value: v, FreshUntil: now.Add(fresh), StaleUntil: now.Add(satAdd(fresh, stale)), Base: now}, since)
	return true
}

// filled acts on a reply of guard_fill.lua for fill f of key, sent at
// local time sent: the clock sample, the hint of a value stored, the
// rejection or foreign values reported. It returns the fill's verdict.
func (g *Group) filled(key string, nm names, f fillSpec, reply []any, sent int64) (v fillVerdict) {
	if len(reply) != 4 {
		return fillUnknown
	}
	written, _ := reply[0].(int64)
	now, _ := reply[1].(int64)
	g.foreign(nm, reply[3])
	g.clk.observe(now, sent)
	switch {
	case f.mode != fillNone && written == 0:
		v = fillRejected
		if h := g.opts.Hooks.FillRejected; h != nil {
			h(key)
		}
	case written == 1 && f.flags == flagOversize:
		g.keepOversize(key, f.keep, now, now+ms(f.fresh)+ms(f.stale))
		g.hint(key, nm, now+ms(f.fresh))
	case written == 1 && (f.flags == flagValue || f.flags == flagRevalidate):
		g.hint(key, nm, now+ms(f.fresh))
	}
	return v
}

// private sets f for a load that answered Private or Pass (pe).
func (f *fillSpec) private(g *Group, pe *privateError, co callOptions, refresh bool) {
	switch {
	case refresh && pe.pass > 0:
		f.mode = fillNone // the stale value stays; the next caller refreshes
	case refresh:
		// Stale-if-error, as for any failure: the stale value keeps being
		// served and no node refreshes for the back-off.
		f.mode, f.keepLease = fillNone, g.opts.ErrorBackoff
	case pe.pass > 0 && g.passFor(pe, co) > 0:
		// Written where no value is stored (a marker never replaces one).
		f.mode, f.flags, f.fresh, f.stale = fillIfMissing, flagPass, g.passFor(pe, co), 0
	default:
		// Failing: the lease is released for the next caller's turn, and
		// the marker keeps every node to turns for WaitTimeout.
		f.mode, f.flags, f.fresh, f.stale = fillIfMissing, flagFailing, 0, g.opts.WaitTimeout
	}
}
