package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/notify"
)

// LoadFunc loads the value of a key from the origin. It returns ErrNotFound
// (possibly wrapped) when the key has no value.
type LoadFunc func(ctx context.Context) ([]byte, error)

// Status says where a value came from.
type Status uint8

const (
	// Hit: a fresh value, from Redis or from the in-process tier.
	Hit Status = iota + 1
	// Stale: a value past its fresh time, served while one node refreshes it
	// (or while refreshes fail and back off).
	Stale
	// Miss: there was no usable value and this caller's flight loaded it.
	Miss
	// Shared: the value was loaded by someone else: another caller of this
	// process (singleflight) or another node (woken by its fill).
	Shared
	// Degraded: Redis was unavailable; the value was loaded through this
	// process's singleflight alone.
	Degraded
)

func (s Status) String() string {
	switch s {
	case Hit:
		return "hit"
	case Stale:
		return "stale"
	case Miss:
		return "miss"
	case Shared:
		return "shared"
	case Degraded:
		return "degraded"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Result is a value with where it came from and how old it is.
type Result struct {
	// Value is shared with the other callers that got the same value (and
	// with the in-process tier): read it, never modify it.
	Value  []byte
	Status Status
	// Age is the time since the value was loaded, judged on the Redis clock
	// (0 for a value this call loaded).
	Age time.Duration
}

// Group guards the keys of one namespace. It is safe for concurrent use.
// Close it to stop its background work.
type Group struct {
	rdb  redis.UniversalClient
	opts Options
	hub  *notify.Hub
	sf   singleflight.Group
	br   breaker
	loc  *expirable.LRU[string, localEntry] // nil when the local tier is off

	firstLease time.Duration // lease taken by a read, before the watchdog extends it
	clk        redisClock    // estimate of the Redis clock, for the fast hit path
	hints      hints         // key → fresh-until seen lately, for the fast hit path

	// Constant script arguments, boxed once.
	leaseArg, chanArg, waitArg, keepArg any

	mu sync.Mutex // guards closed against bg.Add

	fmu     sync.Mutex
	flights map[string]*flight // read flights with callers waiting

	lmu   sync.Mutex
	loads map[string]*runningLoad // the load of each key running in this process

	batchReads batchReads // reads of batches in flight (batch_share.go)

	// testJoined, set by tests, runs when a caller has joined the read
	// flight of key (as its leader or a follower): the seam tests use to
	// know a herd is inside one flight.
	testJoined func(key string)

	bg        sync.WaitGroup // background refreshes
	closed    atomic.Bool
	closeOnce sync.Once
}

type localEntry struct {
	value      []byte
	freshUntil time.Time
	written    time.Time
}

// New returns a Group that keeps its entries in rdb (a *redis.Client, a
// *redis.ClusterClient or any UniversalClient). It returns an error for a nil
// client, invalid options, or a *redis.Client or *redis.ClusterClient made
// without ContextTimeoutEnabled: go-redis then ignores context deadlines on
// the socket, so RedisTimeout could not bound a call to a stalled Redis (it
// would wait out ReadTimeout, 3s by default, on every retry).
func New(rdb redis.UniversalClient, opts Options) (*Group, error) {
	if rdb == nil {
		return nil, errors.New("guard: nil Redis client")
	}
	if !contextTimeouts(rdb) {
		return nil, errors.New("guard: the Redis client needs ContextTimeoutEnabled: true, or RedisTimeout cannot bound its calls")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{
		rdb: rdb, opts: o,
		hub:     notify.New(rdb, notify.NewChannel(o.Namespace+"fill:")),
		clk:     redisClock{base: time.Now()},
		flights: map[string]*flight{},
		hints:   newHints(),
		br:      breaker{threshold: o.BreakerFailures, cooldown: o.BreakerCooldown, hook: o.Hooks.Breaker},
	}
	g.firstLease = min(o.LockTTL, leaseGrace)
	g.leaseArg = ms(g.firstLease)
	g.chanArg = g.hub.Channel()
	// Saturate: a huge WaitTimeout (math.MaxInt64, "wait forever") must not
	// overflow into a negative wait, which the read script rejects on every
	// call, leaving the Group degraded for good.
	wait := o.WaitTimeout + o.LockTTL
	if wait < 0 {
		wait = math.MaxInt64
	}
	g.waitArg = ms(wait)
	g.keepArg = ms(fenceRetention)
	if o.LocalEntries > 0 {
		g.loc = expirable.NewLRU[string, localEntry](o.LocalEntries, nil, o.LocalTTL)
	}
	// Subscribe the fill channel now, so the first waiter finds it ready.
	// A failure here (Redis down) is retried by the hub's dispatcher.
	g.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.WaitTimeout)
		defer cancel()
		if err := g.hub.Ready(ctx); err != nil {
			if rerr := redis.Error(nil); errors.As(err, &rerr) {
				// Refused (NOPERM): waiters fall back to polling; say why.
				if h := o.Hooks.RedisError; h != nil {
					h("subscribe", err)
				}
			}
		}
	})
	return g, nil
}

// contextTimeouts reports whether rdb applies context deadlines to socket
// I/O, for the client types that say.
func contextTimeouts(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// leaseGrace caps the lease a read takes. A read whose caller timed out may
// still run on a stalled Redis when it resumes and win a lease nobody will
// use; such a lease is free again within leaseGrace. A load that runs
// longer has its lease extended to LockTTL by the watchdog.
var leaseGrace = time.Second // a var for tests

// fenceRetention is how long a key's fence counter and invalidation marker
// are kept after last use.
const fenceRetention = 24 * time.Hour

// Close stops the Group: it waits for background refreshes (each bounded by
// LoadTimeout) and closes the fill subscription. Calls after Close return
// ErrClosed. It does not close the Redis client.
func (g *Group) Close() error {
	var err error
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed.Store(true)
		g.mu.Unlock()
		err = g.hub.Close()
		g.bg.Wait()
	})
	return err
}

// goBackground runs f in a goroutine Close waits for; after Close it does
// nothing.
func (g *Group) goBackground(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		f()
	}()
}

// Get returns the value of key, loading it with load when no usable value
// exists. See Do.
func (g *Group) Get(ctx context.Context, key string, load LoadFunc, opts ...CallOption) ([]byte, error) {
	r, err := g.Do(ctx, key, load, opts...)
	return r.Value, err
}

// Do returns the value of key with its Status and Age.
//
// A fresh value costs one Redis round trip (none from the in-process tier).
// A stale value is returned at once; if this caller's read won the key's
// refresh lease, the value is reloaded in the background. With no usable
// value, one caller in the fleet loads it (singleflight in this process, a
// Redis lease across processes) and the others wait for its fill, each
// leaving on its own ctx. Errors of load reach the callers of its flight;
// ErrNotFound is cached for NegativeFor. When Redis fails, Do loads through
// this process's singleflight alone.
func (g *Group) Do(ctx context.Context, key string, load LoadFunc, opts ...CallOption) (Result, error) {
	if err := g.check(ctx, key, load); err != nil {
		return Result{}, err
	}
	co := g.callOptions(opts)
	if co.err != nil {
		return Result{}, co.err
	}
	if g.loc != nil {
		if le, ok := g.loc.Get(key); ok && time.Now().Before(le.freshUntil) {
			age := time.Since(le.written)
			if h := g.opts.Hooks.Hit; h != nil {
				h(key, age, true)
			}
			return Result{Value: le.value, Status: Hit, Age: age}, nil
		}
	}
	if !g.br.allow() {
		return g.degraded(ctx, key, load, co)
	}
	if e, now, ok, err := g.fastHit(ctx, key); err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return g.degraded(ctx, key, load, co)
	} else if ok {
		if g.opts.EarlyRefreshBeta > 0 && !e.negative && !e.errMark && g.earlyRefresh(e, now) {
			g.refreshEarly(ctx, key, g.names(key), load, co) // detaches ctx itself
		}
		return g.served(key, e, now, Hit)
	}
	lk, err := g.lookup(ctx, key, load, co)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return g.degraded(ctx, key, load, co)
	}
	switch lk.st {
	case fresh:
		return g.served(key, lk.e, lk.now, Hit)
	case stale:
		return g.served(key, lk.e, lk.now, Stale)
	case loaded:
		if h := g.opts.Hooks.Miss; h != nil && !lk.missSeen {
			h(key)
		}
		res := lk.res
		if res.Status == Miss && !lk.claimed.CompareAndSwap(false, true) {
			res.Status = Shared
			if h := g.opts.Hooks.Coalesced; h != nil {
				h(key)
			}
		}
		return res, lk.err
	}
	if h := g.opts.Hooks.Miss; h != nil {
		h(key)
	}
	return g.missFlight(ctx, key, g.names(key), load, co, lk.x)
}

// lookup is the outcome of one read of a key, shared by the callers of the
// process that asked for the key while it ran.
type lookup struct {
	e   entry
	st  state
	now int64 // Redis clock, ms
	x   int64 // the read's lease outcome (see readReply)

	// st == loaded: the read won the lease of a missing key and loaded it.
	res     Result
	err     error
	claimed *atomic.Bool // the first caller to look claims the Miss

	missSeen bool // this caller's Miss hook already ran
}

// flight is what the waiting callers of one read flight share besides its
// result: word that the flight found the key missing and is loading it, so
// each caller reports its miss while the load runs.
type flight struct {
	loading chan struct{}
	once    sync.Once
	callers int
}

func (f *flight) startLoading() { f.once.Do(func() { close(f.loading) }) }

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
// missing key's miss flight is started. Each caller leaves on its own ctx.
func (g *Group) lookup(ctx context.Context, key string, load LoadFunc, co callOptions) (lookup, error) {
	detached := context.WithoutCancel(ctx)
	var fl *flight // nil on the uncancellable path
	fn := func() (any, error) {
		// Do tried the fast hit path already: this flight runs the script.
		nm := g.names(key)
		rr, err := g.read(detached, nm, false)
		if err != nil {
			return lookup{}, err
		}
		e, st := g.classify(key, rr)
		switch {
		case st == fresh:
			g.hint(key, nm.entry, e.freshUntil)
			if g.opts.EarlyRefreshBeta > 0 && !e.negative && !e.errMark && g.earlyRefresh(e, rr.now) {
				g.refreshEarly(detached, key, nm, load, co)
			}
		case st == stale && rr.x > 0:
			g.leaseHook(key, true)
			g.refreshAsync(detached, key, nm, load, co, rr.x)
		case rr.x > 0:
			// Missing, and this read won the lease: load right here, so
			// every caller of this read shares the load, and the fleet gets
			// its fill even if every caller leaves.
			g.leaseHook(key, true)
			if fl != nil {
				fl.startLoading()
			}
			res, err := g.loadAndFill(detached, key, nm, load, co, rr.x, false)
			return lookup{st: loaded, res: res, err: err, claimed: new(atomic.Bool)}, nil
		case rr.x < 0:
			g.leaseHook(key, false)
		}
		return lookup{e: e, st: st, now: rr.now, x: rr.x}, nil
	}
	if ctx.Done() == nil {
		// Nothing can cancel this caller: no goroutine needed.
		v, err, _ := g.sf.Do("r"+key, fn)
		lk, _ := v.(lookup)
		return lk, err
	}
	fl = g.joinFlight(key)
	defer g.leaveFlight(key, fl)
	ch := g.sf.DoChan("r"+key, fn)
	if g.testJoined != nil {
		g.testJoined(key)
	}
	loading, missSeen := fl.loading, false
	for {
		select {
		case r := <-ch:
			lk, _ := r.Val.(lookup)
			lk.missSeen = missSeen
			return lk, r.Err
		case <-loading:
			if h := g.opts.Hooks.Miss; h != nil {
				h(key)
			}
			loading, missSeen = nil, true
		case <-ctx.Done():
			return lookup{}, ctx.Err()
		}
	}
}

func (g *Group) check(ctx context.Context, key string, load LoadFunc) error {
	switch {
	case g == nil:
		// Fetch and Wrap'd funcs take the Group as an argument: a nil one
		// is an error for the call, not a nil-pointer panic.
		return errors.New("guard: nil Group")
	case ctx == nil:
		return errors.New("guard: nil context")
	case load == nil:
		return errors.New("guard: nil LoadFunc")
	case key == "":
		return errors.New("guard: empty key")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("guard: key of %d bytes exceeds MaxKeyBytes (%d)", len(key), MaxKeyBytes)
	case g.closed.Load():
		return ErrClosed
	}
	return ctx.Err()
}

func (g *Group) callOptions(opts []CallOption) callOptions {
	co := callOptions{freshFor: g.opts.FreshFor, staleFor: g.opts.StaleFor}
	if len(opts) > 0 {
		c := co // only a call with options pays for the escaping copy
		for _, o := range opts {
			o(&c)
		}
		co = c
	}
	if co.freshFor <= 0 {
		co.freshFor = g.opts.FreshFor
	}
	if co.staleFor < 0 || g.opts.NoStale {
		co.staleFor = 0
	}
	return co
}

// names are the Redis names of one key; they share one hash tag.
type names struct {
	entry string
	keys  []string // entry, lease, fence, waiters, inv
}

func (g *Group) names(key string) names {
	b := hashtag.Base(g.opts.Namespace, key)
	// One allocation for the five names: substrings of one string.
	all := b + b + ":lease" + b + ":fence" + b + ":w" + b + ":inv"
	n := len(b)
	lease, fence, w := n+n+6, n+n+6+n+6, n+n+6+n+6+n+2
	return names{entry: all[:n], keys: []string{all[:n], all[n:lease], all[lease:fence], all[fence:w], all[w:]}}
}

type state int

const (
	missing state = iota
	fresh
	stale
	loaded // by the read's own flight, which won the lease
)

// classify decodes a read. A corrupt entry is reported and treated as
// missing (the read script treats it so too).
func (g *Group) classify(key string, rr readReply) (entry, state) {
	if !rr.present {
		return entry{}, missing
	}
	e, err := decodeEntry(rr.raw)
	if err != nil {
		if h := g.opts.Hooks.Corrupt; h != nil {
			h(key, err)
		}
		return entry{}, missing
	}
	switch {
	case rr.now < e.freshUntil:
		return e, fresh
	case rr.now < e.staleUntil && !e.negative && !e.errMark:
		return e, stale
	}
	return entry{}, missing
}

// served turns a decoded entry into the caller's answer.
func (g *Group) served(key string, e entry, now int64, st Status) (Result, error) {
	age := time.Duration(max(now-e.written, 0)) * time.Millisecond
	switch {
	case e.negative:
		return Result{Status: st, Age: age}, ErrNotFound
	case e.errMark:
		return Result{Status: st, Age: age}, ErrBackoff
	}
	if st == Stale {
		if h := g.opts.Hooks.Stale; h != nil {
			h(key, age)
		}
	} else {
		if h := g.opts.Hooks.Hit; h != nil {
			h(key, age, false)
		}
		g.keepLocal(key, e, now)
	}
	return Result{Value: e.value, Status: st, Age: age}, nil
}

func (g *Group) keepLocal(key string, e entry, now int64) {
	if g.loc == nil || e.negative || e.errMark {
		return
	}
	left := time.Duration(e.freshUntil-now) * time.Millisecond
	if left <= 0 {
		return
	}
	written := time.Now().Add(-time.Duration(max(now-e.written, 0)) * time.Millisecond)
	g.loc.Add(key, localEntry{value: e.value, freshUntil: time.Now().Add(min(left, g.opts.LocalTTL)), written: written})
}

// earlyRefresh is the XFetch draw: true with probability
// exp(-remaining / (beta * load duration)).
func (g *Group) earlyRefresh(e entry, now int64) bool {
	delta := float64(e.loadDur) / float64(time.Millisecond)
	if delta <= 0 {
		return false
	}
	remaining := float64(e.freshUntil - now)
	return -delta*g.opts.EarlyRefreshBeta*math.Log(1-rand.Float64()) >= remaining
}

func (g *Group) leaseHook(key string, won bool) {
	if h := g.opts.Hooks.Lease; h != nil {
		h(key, won)
	}
}

// missOutcome is a miss flight's answer; exactly one of its callers claims
// a Miss (the others get Shared).
type missOutcome struct {
	res     Result
	claimed *atomic.Bool
}

func (g *Group) missFn(ctx context.Context, key string, nm names, load LoadFunc, co callOptions, x int64) func() (any, error) {
	return func() (any, error) {
		res, err := g.resolveMiss(ctx, key, nm, load, co, x)
		return missOutcome{res: res, claimed: new(atomic.Bool)}, err
	}
}

// missFlight joins the miss flight of key (one per process); each caller
// leaves on its own ctx. x is the read's lease outcome.
func (g *Group) missFlight(ctx context.Context, key string, nm names, load LoadFunc, co callOptions, x int64) (Result, error) {
	var r singleflight.Result
	select {
	case r = <-g.sf.DoChan("m"+key, g.missFn(context.WithoutCancel(ctx), key, nm, load, co, x)):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	mo, _ := r.Val.(missOutcome)
	res := mo.res
	if res.Status == Miss && !mo.claimed.CompareAndSwap(false, true) {
		res.Status = Shared
		if h := g.opts.Hooks.Coalesced; h != nil {
			h(key)
		}
	}
	return res, r.Err
}

// resolveMiss is the body of a miss flight: load under a lease won by a
// caller of this process, or wait for another node's fill.
func (g *Group) resolveMiss(ctx context.Context, key string, nm names, load LoadFunc, co callOptions, x int64) (Result, error) {
	start := time.Now()
	deadline := start.Add(g.opts.WaitTimeout)
	wake := make(chan struct{}, 1)
	defer g.hub.Register(nm.entry, wake)()

	// Fallback polling for lost notifications and expired leases: short at
	// first (a fill can land between a read and the registration above),
	// doubling up to the holder's remaining lease.
	poll := 50 * time.Millisecond
	holder := time.Duration(-x) * time.Millisecond
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// x == 0: the read judged the entry fresh yet it did not decode (or it
	// was an expired negative entry); read again at once, trying the lease.
	force := x == 0
	for {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		if !force {
			wait := min(poll, remaining)
			if holder > 0 {
				wait = min(wait, holder)
			}
			timer.Reset(wait)
			notified := false
			select {
			case <-wake:
				notified = true
			case <-timer.C:
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			if h := g.opts.Hooks.Woken; h != nil {
				h(key, notified, time.Since(start))
			}
			poll = min(poll*2, g.opts.LockTTL)
		}
		rr, err := g.read(ctx, nm, force)
		force = false
		if err != nil {
			// Redis trouble while waiting: load on this node alone.
			return g.loadOnly(ctx, key, load, Degraded)
		}
		e, st := g.classify(key, rr)
		switch st {
		case fresh:
			r, err := g.served(key, e, rr.now, Shared)
			return r, err
		case stale:
			return g.served(key, e, rr.now, Stale)
		}
		switch {
		case rr.x > 0:
			g.leaseHook(key, true)
			return g.loadAndFill(ctx, key, nm, load, co, rr.x, false)
		case rr.x < 0:
			holder = time.Duration(-rr.x) * time.Millisecond
		default:
			force = true // undecodable yet "fresh" to the script
		}
	}
	if g.opts.WaitTimeoutPolicy == ReturnError {
		return Result{}, ErrWaitTimeout
	}
	// Fence 0: stored only if nothing newer landed and nothing was
	// invalidated meanwhile.
	return g.loadAndFill(ctx, key, nm, load, co, 0, false)
}

// refreshAsync reloads a stale key in the background under the lease the
// caller's read won. It is detached from the caller and bounded by
// LoadTimeout; Close waits for it.
func (g *Group) refreshAsync(ctx context.Context, key string, nm names, load LoadFunc, co callOptions, fence int64) {
	detached := context.WithoutCancel(ctx)
	g.goBackground(func() {
		_, _ = g.loadAndFill(detached, key, nm, load, co, fence, true)
	})

}

// refreshEarly tries the lease of a fresh key and, if won, refreshes it in
// the background.
func (g *Group) refreshEarly(ctx context.Context, key string, nm names, load LoadFunc, co callOptions) {
	detached := context.WithoutCancel(ctx)
	g.goBackground(func() {
		rr, err := g.read(detached, nm, true)
		if err != nil || rr.x <= 0 {
			return
		}
		g.leaseHook(key, true)
		_, _ = g.loadAndFill(detached, key, nm, load, co, rr.x, true)
	})
}

// loadAndFill calls load under the lease fence (renewed by a watchdog while
// the load runs) and stores the outcome in one round trip that also releases
// the lease and wakes the waiters. refresh is true when a stale value exists
// and keeps being served if the load fails.
func (g *Group) loadAndFill(ctx context.Context, key string, nm names, load LoadFunc, co callOptions, fence int64, refresh bool) (Result, error) {
	stop := func() {}
	if fence > 0 {
		stop = g.renewLease(nm, fence)
	}
	v, err, d := g.callLoader(ctx, key, load, false)
	stop()

	f := fillSpec{fence: fence, loadDur: d, mode: "w"}
	switch {
	case err == nil && len(v) > g.opts.MaxValueBytes:
		f.mode = "-" // served, not stored
	case err == nil:
		f.value, f.fresh, f.stale = v, g.jittered(co.freshFor), co.staleFor
	case isNoStore(err):
		f.mode = "-" // the lease is released; nothing is stored or backed off
	case errors.Is(err, ErrNotFound) && g.opts.NegativeFor > 0:
		f.fresh, f.flags = g.opts.NegativeFor, "n"
	case errors.Is(err, ErrNotFound):
		f.mode = "-"
	case refresh:
		// Stale-if-error: keep the stale value, and hold the lease for the
		// back-off so no node retries at once.
		f.mode, f.keepLease = "-", g.opts.ErrorBackoff
	default:
		// A cold key: an error marker (never over a value) makes every node
		// back off instead of calling the failing loader again.
		f.mode, f.fresh, f.flags = "m", g.opts.ErrorBackoff, "e"
	}
	g.store(ctx, key, nm, f)
	if f.keepLease > 0 {
		// Reported once the lease is held for the back-off, so whoever
		// watches the hook sees the state it describes.
		if h := g.opts.Hooks.RefreshError; h != nil {
			h(key, err)
		}
	}
	if err != nil {
		return Result{Status: Miss}, err
	}
	return Result{Value: v, Status: Miss}, nil
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

// runningLoad is a load of one key in progress in this process; done is
// closed once v, err and d are set.
type runningLoad struct {
	done chan struct{}
	v    []byte
	err  error
	d    time.Duration
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
func (g *Group) callLoader(ctx context.Context, key string, load LoadFunc, join bool) (v []byte, err error, d time.Duration) {
	g.lmu.Lock()
	for {
		r := g.loads[key]
		if r == nil {
			break
		}
		g.lmu.Unlock()
		<-r.done // bounded by that load's LoadTimeout
		if join {
			return r.v, r.err, r.d
		}
		g.lmu.Lock()
	}
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	r := &runningLoad{done: make(chan struct{})}
	g.loads[key] = r
	g.lmu.Unlock()
	defer func() {
		g.lmu.Lock()
		delete(g.loads, key)
		g.lmu.Unlock()
		close(r.done)
	}()
	r.v, r.err, r.d = g.runLoader(ctx, key, load)
	return r.v, r.err, r.d
}

// runLoader calls load once; see callLoader.
func (g *Group) runLoader(ctx context.Context, key string, load LoadFunc) (v []byte, err error, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.LoadTimeout)
	defer cancel()
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		v, err = load(ctx)
	}()
	d = time.Since(start)
	if h := g.opts.Hooks.Load; h != nil {
		h(key, d, err)
	}
	return v, err, d
}

// loadOnly loads without Redis, sharing a load of key already running in
// this process.
func (g *Group) loadOnly(ctx context.Context, key string, load LoadFunc, st Status) (Result, error) {
	v, err, _ := g.callLoader(ctx, key, load, true)
	return Result{Value: v, Status: st}, err
}

// degraded serves a caller while Redis is unavailable: one loader call per
// key in this process at a time, no Redis.
func (g *Group) degraded(ctx context.Context, key string, load LoadFunc, co callOptions) (Result, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.sf.DoChan("d"+key, func() (any, error) {
		return g.loadOnly(detached, key, load, Degraded)
	})
	select {
	case r := <-ch:
		res, _ := r.Val.(Result)
		return res, r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Invalidate deletes key's value everywhere: its Redis entry (and this
// process's local copy), any refresh in flight (its fill will be rejected)
// and wakes the waiters so they load anew.
func (g *Group) Invalidate(ctx context.Context, key string) error {
	if err := g.check(ctx, key, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		return err
	}
	if g.loc != nil {
		g.loc.Remove(key)
	}
	g.hints.c.Remove(key)
	nm := g.names(key)
	return g.invalidate(ctx, nm)
}

// Fetch is Do for values of any type: load's result is stored as JSON
// ([]byte and string are stored as they are). A nil g or load is an error,
// as for Do. A value JSON cannot encode is returned as an error to the
// callers of the flight and stores nothing (see NoStore): it is a bug of
// the caller, not an origin failure to back off from.
func Fetch[T any](ctx context.Context, g *Group, key string, load func(context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	if load == nil {
		// Checked here: the LoadFunc below wraps load, so Do cannot see it
		// is nil, and calling it would store a panic's error marker.
		return zero, errors.New("guard: nil load func")
	}
	raw, err := g.Get(ctx, key, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		b, err := marshal(v)
		if err != nil {
			return nil, NoStore(err)
		}
		return b, nil
	}, opts...)
	if err != nil {
		return zero, err
	}
	return unmarshal[T](raw)
}

// Wrap returns load guarded by g: calls with arguments that map to the same
// key share one load across the fleet. It panics if g, key or load is nil:
// those are programming errors, caught where the func is built rather than
// on every call.
func Wrap[A, T any](g *Group, key func(A) string, load func(context.Context, A) (T, error), opts ...CallOption) func(context.Context, A) (T, error) {
	switch {
	case g == nil:
		panic("guard: Wrap with a nil Group")
	case key == nil:
		panic("guard: Wrap with a nil key func")
	case load == nil:
		panic("guard: Wrap with a nil load func")
	}
	return func(ctx context.Context, a A) (T, error) {
		return Fetch(ctx, g, key(a), func(ctx context.Context) (T, error) { return load(ctx, a) }, opts...)
	}
}

func marshal(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		return []byte(x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("guard: encoding value: %w", err)
	}
	return b, nil
}

func unmarshal[T any](raw []byte) (T, error) {
	var v T
	switch p := any(&v).(type) {
	case *[]byte:
		*p = raw
		return v, nil
	case *string:
		*p = string(raw)
		return v, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("guard: decoding cached value: %w", err)
	}
	return v, nil
}

// ms converts d to whole milliseconds, rounding a positive sub-millisecond
// duration up to 1.
func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if m == 0 && d > 0 {
		m = 1
	}
	return m
}
