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
	var f fillSpec
	// Filled before the key's load slot is released, so that the calls
	// of this process that joined the load learn whether its fill landed.
	o := g.loadLeased(ctx, c.key, c.nm, c.load, fence, prev, func(o *outcome) {
		f = g.fillFor(c.co, fence, *o, refresh)
		if c.backup {
			f.backup = "b"
		}
		g.step(ctx, "fill")
		if g.store(ctx, c.key, c.nm, f) {
			// A change (an Invalidate, a newer fill) beat this fill: it
			// may have returned before a call that joined this load
			// began, so no joiner takes the value; each reads again
			// (outcome.takes, joinedFits).
			o.end = fencedOut
		}
		g.step(ctx, "filled")
	})
	c.loaded = o.end
	v, err := o.v, o.err
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
// (fence 0: no lease), then settle with its outcome (the fill, which may
// mark it fenced out) before the key's load slot is released. The
// watchdog stops however the load ends, before settle.
func (g *Group) loadLeased(ctx context.Context, key string, nm names, load LoadFunc, fence int64, prev *entry.Entry, settle func(*outcome)) outcome {
	stop, stopped := g.watchLeases([]heldLease{{nm, fence}}, time.Now()), false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	o, _ := g.callLoaderKeep(ctx, key, load, false, prev, func(o *outcome) {
		stop()
		stopped = true
		settle(o)
	})
	return o
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

// fencedOut is the end a load whose fill a change beat is given for its
// joiners (call.loaded): before any call began, so none takes its value.
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
}

// callLoader runs load detached from every caller, bounded by LoadTimeout,
// turning a panic into *PanicError. At most one load of a key runs in this
// process at a time, whichever path asked for it (a miss, a background
// refresh, Redis being unavailable). With join set, the caller only needs a
// value and takes the result of a load of key already running. Without it,
// the result will be stored under a lease just won: the caller waits for a
// running load to end and then loads anew, because a value whose load began
// before the lease was taken must not be stored under the lease's fence (it
// could be older than a fill that landed meanwhile).
//
// own is false when the outcome is that of a load another caller started.
func (g *Group) callLoader(ctx context.Context, key string, load LoadFunc, join bool, prev *entry.Entry) (o outcome, own bool) {
	return g.callLoaderKeep(ctx, key, load, join, prev, nil)
}

// callLoaderKeep is callLoader; keep, when set, is given an own load's
// outcome before the key's slot is released, so that what it keeps (in
// the reserve, in Redis) is there for whoever finds the key no longer
// loading, and what it marks on the outcome (fencedOut) reaches the
// load's joiners.
func (g *Group) callLoaderKeep(ctx context.Context, key string, load LoadFunc, join bool, prev *entry.Entry, keep func(*outcome)) (o outcome, own bool) {
	g.lmu.Lock()
	for {
		r := g.loads[key]
		if r == nil {
			break
		}
		g.lmu.Unlock()
		<-r.done // bounded by that load's LoadTimeout
		if join {
			return r.o, false
		}
		g.lmu.Lock()
	}
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	r := &runningLoad{done: make(chan struct{}), o: outcome{err: errLoadAbandoned}}
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
	if keep != nil {
		keep(&o)
	}
	r.o = o
	return o, true
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
