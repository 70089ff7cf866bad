package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// loadAndFill calls the call's load under the lease fence (renewed by a
// watchdog while the load runs) and stores the outcome in one round trip
// that also releases the lease and wakes the waiters. refresh is true when
// a stale value exists and keeps being served if the load fails. prev is
// the entry the load replaces (Previous), or nil.
func (g *Group) loadAndFill(ctx context.Context, c *call, fence int64, refresh bool, prev *entry.Entry) (Result, error) {
	o, slot := g.loadLeased(ctx, c.key, c.nm, c.load, fence, prev)
	fenced := fillUnknown
	defer func() { slot.settle(fenced) }() // however this ends: the joiners wait
	c.loaded = o.end
	v, err := o.v, o.err
	f := g.fillFor(c.co, fence, o, refresh)
	if c.backup {
		f.backup = "b"
	}
	g.step(ctx, "fill")
	fenced = g.store(ctx, c.key, c.nm, f)
	if fenced == fillRejected {
		// A change (an Invalidate, a newer fill) beat this fill: it may
		// have returned before a call that joined this load began, so no
		// such call takes the value; each reads again (joinedFits,
		// runningLoad.settle). A fill whose outcome is unknown (Redis
		// failed) is taken: reading again would cost the origin a load
		// per node at each failing fill, and Redis failing is no sign of
		// a change.
		c.loaded = fencedOut
	}
	slot.settle(fenced)
	g.step(ctx, "filled")
	if f.keepLease > 0 {
		// Reported once the lease is held for the back-off, so whoever
		// watches the hook sees the state it describes.
		if h := g.opts.Hooks.RefreshError; h != nil {
			h(c.key, err)
		}
	}
	if err != nil {
		return Result{Status: Miss}, err
	}
	return Result{Value: v, Status: Miss, Fresh: f.freshWindow(), Oversize: len(v) > g.opts.MaxValueBytes}, nil
}

// loadLeased calls load while a watchdog keeps the lease fence alive
// (fence 0: no lease). The watchdog stops however the load ends. It
// returns the load's slot, which the caller settles once the fill
// answered.
func (g *Group) loadLeased(ctx context.Context, key string, nm names, load LoadFunc, fence int64, prev *entry.Entry) (outcome, *runningLoad) {
	defer g.watchLeases([]heldLease{{nm, fence}}, time.Now())()
	o, _, slot := g.callLoaderSlot(ctx, key, load, noJoin, prev, nil, true)
	return o, slot
}

// loadOnce returns load made to run at most once: later calls get the
// first call's outcome. It is what makes "at most one loader call per Do
// per node" a property of the guard rather than of every path's care.
func loadOnce(load LoadFunc) LoadFunc {
	var (
		once sync.Once
		v    []byte
		err  error = errLoadAbandoned // kept if the first call never returns
	)
	return func(ctx context.Context) ([]byte, error) {
		once.Do(func() { v, err = load(ctx) })
		return v, err
	}
}

func isNoStore(err error) bool {
	var ns *noStoreError
	return errors.As(err, &ns)
}

func (g *Group) jittered(d time.Duration) time.Duration {
	if g.opts.Jitter == 0 {
		return d
	}
	return d - time.Duration(rand.Float64()*g.opts.Jitter*float64(d))
}

// fencedOut is the end a load whose fill a change beat (fillRejected) is
// given for its joiners (call.loaded), and that of a batch slot answered
// from Redis, not loaded: before any call began, so none takes its value.
// A fill of unknown outcome is still shared.
var fencedOut = time.Unix(0, 1)

// outcome is how one loader call ended.
type outcome struct {
	v   []byte
	err error
	d   time.Duration // how long the load took
	win *Windows      // the windows the loader set (SetWindows), or nil
	// reval: the loader answered Revalidated; v is the new value, built
	// here, and only the head goes to Redis.
	reval *revalidation
	end   time.Time // when the loader returned, before any hook or fill
}

// begun returns when o's load began, or start (when the call that asks
// began, which is earlier) if o does not tell (no end, or fencedOut): a
// value is kept in the reserve only if no invalidation dropped its key
// since (PutSince). A zero start counts every invalidation remembered.
func (o outcome) begun(start time.Time) time.Time {
	if o.end.IsZero() || o.end.Equal(fencedOut) {
		return start
	}
	return o.end.Add(-o.d)
}

// takes reports whether a call that began at start may take o, a load it
// joined: only if it began before the load ended. A load that ended
// before may be older than a change returned before the call began, so
// the call reads for itself (TestJoinedMissLoadNotOlder,
// TestJoinedLoadHooksNotOlder). A zero end (an abandoned slot) fits.
func (o *outcome) takes(start time.Time) bool {
	return o.end.IsZero() || !start.After(o.end)
}

// revalidation is a Revalidated answer checked against its previous entry.
type revalidation struct {
	head   []byte
	trim   int
	expect string // "fence,written" of the entry revalidated
}

// runningLoad is a load of one key in progress in this process; done is
// closed once o is set.
type runningLoad struct {
	done chan struct{}
	o    outcome
	// settled, for a load whose value is filled to Redis, is closed once
	// the fill answered, with fenced set before: whether a change beat
	// the fill (fillRejected) or its outcome is unknown (fillUnknown). A
	// call that began after such a change returned must not take the
	// value, and a joiner cannot tell when it began against the change:
	// the joiners of a rejected load read again (those that keep the
	// value, joinSettled, also when the outcome is unknown). nil: nothing
	// to wait.
	settled chan struct{}
	fenced  fillVerdict
	once    sync.Once
}

// settle records the verdict of r's fill and releases the joiners that
// wait for it; the first call decides. A nil r is a no-op.
func (r *runningLoad) settle(v fillVerdict) {
	if r == nil || r.settled == nil {
		return
	}
	r.once.Do(func() {
		r.fenced = v
		close(r.settled)
	})
}

// verdict returns the verdict of r's fill, once done is closed: waiting
// for it up to d, fillUnknown past that; fillLanded at once when r's
// value is not filled (settled nil).
func (r *runningLoad) verdict(d time.Duration) fillVerdict {
	if r.settled == nil {
		return fillLanded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.settled:
		return r.fenced
	case <-t.C:
		return fillUnknown
	}
}

// settledVerdict returns the verdict of r's fill if it answered already,
// else fillLanded: for a caller that joins a load only for its value (Redis
// unavailable), which does not wait for a fill that is failing, and takes
// the value unless a change is known to have beaten it.
func (r *runningLoad) settledVerdict() fillVerdict {
	if r.settled == nil {
		return fillLanded
	}
	select {
	case <-r.settled:
		return r.fenced
	default:
		return fillLanded
	}
}

// joinMode is how callLoaderSlot treats a load of the key already running
// in this process.
type joinMode int

const (
	// noJoin: wait for it to end, then load anew: the value will be
	// stored under a lease just won, and one whose load began before the
	// lease was taken could be older than a fill that landed meanwhile.
	noJoin joinMode = iota
	// joinValue: take its outcome, unless its fill is known to have been
	// beaten by a change (Redis unavailable: a fill failing is no reason
	// to wait, nor to load again).
	joinValue
	// joinSettled: take its outcome once its fill answered, unless it was
	// beaten or its outcome is unknown (a value kept for a marker read in
	// Redis: it must not be older than what the marker stands for).
	joinSettled
)

// callLoader runs load detached from every caller, bounded by LoadTimeout,
// turning a panic into *PanicError. At most one load of a key runs in this
// process at a time, whichever path asked for it (a miss, a background
// refresh, Redis being unavailable). With join set, the caller only needs a
// value and takes the result of a load of key already running (joinValue).
// Without it, the result will be stored under a lease just won: the caller
// waits for a running load to end and then loads anew (noJoin).
//
// own is false when the outcome is that of a load another caller started.
func (g *Group) callLoader(ctx context.Context, key string, load LoadFunc, join bool, prev *entry.Entry) (o outcome, own bool) {
	return g.callLoaderKeep(ctx, key, load, join, prev, nil)
}

// callLoaderKeep is callLoader; keep, when set, is given an own load's
// outcome before the key's slot is released, so that what it keeps (in
// the reserve) is there for whoever finds the key no longer loading.
func (g *Group) callLoaderKeep(ctx context.Context, key string, load LoadFunc, join bool, prev *entry.Entry, keep func(outcome)) (o outcome, own bool) {
	mode := noJoin
	if join {
		mode = joinValue
	}
	o, own, _ = g.callLoaderSlot(ctx, key, load, mode, prev, keep, false)
	return o, own
}

// callLoaderSlot is callLoaderKeep with the join mode; with fills set, an
// own load's slot is returned for the caller to settle once its fill
// answered (runningLoad.settle: the joiners that wait for it are bounded
// by the fill's own timeout).
func (g *Group) callLoaderSlot(ctx context.Context, key string, load LoadFunc, mode joinMode, prev *entry.Entry, keep func(outcome), fills bool) (o outcome, own bool, slot *runningLoad) {
	g.lmu.Lock()
	for {
		r := g.loads[key]
		if r == nil {
			break
		}
		g.lmu.Unlock()
		g.step(ctx, "load slot joined")
		<-r.done // bounded by that load's LoadTimeout
		switch mode {
		case joinValue:
			if r.settledVerdict() != fillRejected {
				return r.o, false, nil
			}
		case joinSettled:
			if r.verdict(g.redisTimeout()) == fillLanded {
				return r.o, false, nil
			}
		}
		g.lmu.Lock()
	}
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	r := &runningLoad{done: make(chan struct{}), o: outcome{err: errLoadAbandoned}}
	if fills {
		r.settled = make(chan struct{})
	}
	g.loads[key] = r
	g.lmu.Unlock()
	defer func() {
		// The slot settles however this goroutine leaves (a panicking
		// Load hook included): joiners get r's outcome, never a zero one.
		g.lmu.Lock()
		delete(g.loads, key)
		g.lmu.Unlock()
		close(r.done)
		g.step(ctx, "load released")
	}()
	o = g.runLoader(ctx, key, load, prev)
	r.o = o
	if keep != nil {
		keep(o)
	}
	return o, true, r
}

// runLoader calls load once; see callLoader. load runs on a goroutine of
// its own, so whatever way it ends reaches the flight as an outcome: a
// value, an error, a panic (*PanicError) or runtime.Goexit (ErrGoexit),
// which would otherwise end the flight's goroutine with nobody told.
func (g *Group) runLoader(ctx context.Context, key string, load LoadFunc, prev *entry.Entry) outcome {
	ctx, cancel := context.WithTimeout(ctx, g.opts.LoadTimeout)
	defer cancel()
	slot := &windowsSlot{prev: prev}
	ctx = context.WithValue(ctx, windowsKey{}, slot)
	type result struct {
		v   []byte
		err error
	}
	start := time.Now()
	done := make(chan result, 1) // an abandoned loader still leaves its result
	go func() {
		var r result
		normal := false
		defer func() {
			if !normal {
				if p := recover(); p != nil {
					r = result{err: &PanicError{Value: p, Stack: debug.Stack()}}
				} else {
					r = result{err: ErrGoexit}
				}
			}
			done <- r
		}()
		r.v, r.err = load(ctx)
		normal = true
	}()
	r, ok := awaitLoader(g, ctx, done)
	// The load ends when the loader returns, not once the hooks below
	// are done: a call that begins meanwhile must not take its value
	// (see takes).
	end := time.Now()
	if !ok {
		r.err = ErrLoadTimeout
	}
	v, err := r.v, r.err
	d := end.Sub(start)
	if h := g.opts.Hooks.Load; h != nil {
		h(key, d, err)
	}
	g.hot.load(key)
	g.oversizeHook(key, v, err)
	o := outcome{v: v, err: err, d: d, win: slot.take(), end: end}
	var rv *revalidatedError
	if errors.As(err, &rv) {
		o.v, o.reval, o.err = revalidate(prev, rv)
	}
	return o
}

// revalidate builds the value of a Revalidated answer from the previous
// entry: head followed by the previous value less its first trim bytes.
func revalidate(prev *entry.Entry, rv *revalidatedError) ([]byte, *revalidation, error) {
	if prev == nil {
		return nil, nil, ErrNoPrevious
	}
	if rv.trim < 0 || rv.trim > len(prev.Value) {
		return nil, nil, fmt.Errorf("%w: trim %d of a %d-byte value", ErrNoPrevious, rv.trim, len(prev.Value))
	}
	tail := prev.Value[rv.trim:]
	v := make([]byte, 0, len(rv.head)+len(tail))
	v = append(append(v, rv.head...), tail...)
	return v, &revalidation{head: rv.head, trim: rv.trim,
		expect: strconv.FormatInt(prev.Fence, 10) + "," + strconv.FormatInt(prev.Written, 10)}, nil
}
