package guard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"

	"github.com/stampede-go/stampede/guard/internal/commit"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/stampede-go/stampede/guard/internal/breaker"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/internal/notify"
)

// Group guards the keys of one namespace. It is safe for concurrent use.
// Close it to stop its background work.
type Group struct {
	rdb  redis.UniversalClient
	opts Options
	hub  *notify.Hub
	sf   singleflight.Group
	br   breaker.Breaker
	late lateness   // how late this process runs its goroutines (redisTimeout)
	loc  *tier.Tier // the in-process tier; nil when off
	// reserve holds what this node serves while it cannot coordinate
	// (degrade.go)
	reserve *tier.Reserve
	// liveClear calls clearReserve when what it waits for is due (Redis
	// settled, the tier on for a cooldown); nil when none is armed.
	liveMu    sync.Mutex
	liveClear *time.Timer
	liveAt    atomic.Int64 // tier.Nanotime the tier last came back; 0: never
	handedAt  atomic.Int64 // tier.Nanotime the tier last handed copies over; 0: never
	reach     *reach       // whether Redis accepts connections, past the client's pool
	over      overStore    // this node's copies of values over MaxValueBytes

	hot *hotTracker // the hot keys (hotkeys.go); nil when off

	firstLease time.Duration // lease taken by a read, before the watchdog extends it
	clk        redisClock    // estimate of the Redis clock, for the fast hit path
	hints      hints         // key → fresh-until seen lately, for the fast hit path
	// The fast path's GETs, the read and the fill scripts, batched when
	// they overlap: a queue per master on a cluster.
	hits         *commit.Shards[*commit.Hits]
	readQ, fillQ *commit.Shards[*commit.Scripts]
	// masters are the breakers of a cluster's masters (masters.go); nil
	// on any other client.
	masters *commit.Shards[*breaker.Breaker]

	// Constant script arguments, boxed once.
	leaseArg, chanArg, waitArg, keepArg, capArg, tagLifeArg any

	mu sync.Mutex // guards closed against bg.Add

	fmu     sync.Mutex
	flights map[string]*flight // read flights with callers waiting

	lmu   sync.Mutex
	loads map[string]*runningLoad // the load of each key running in this process

	batchReads batchReads // reads of batches in flight

	// testJoined, set by tests, runs when a caller has joined the read
	// flight of key (as its leader or a follower): the seam tests use to
	// know a herd is inside one flight.
	testJoined func(key string)
	// testStep, set by tests, runs when a call reaches a named step of the
	// read, miss, wait and fill paths, with the ctx the step runs on (the
	// caller's, or the flight's detached copy of it, which keeps its
	// values): the seam the cancellation sweep uses to cancel a caller at
	// each step.
	testStep func(ctx context.Context, step string)

	bg           sync.WaitGroup // background refreshes
	wd           sync.WaitGroup // lease watchdogs
	watchdogsOff bool           // set by Close under mu: no watchdog starts
	closing      chan struct{}  // closed by Close to stop the watchdogs left
	done         chan struct{}  // closed when Close begins
	probeSeq     atomic.Uint64  // probeKey's last number
	closed       atomic.Bool
	unreadyOut   atomic.Bool // Hooks.Unready told, Hooks.Ready not yet (tellReady)
	inv          invRetry    // invalidations waiting for Redis
	closeOnce    sync.Once
}

// New returns a Group on rdb, which must be made with
// ContextTimeoutEnabled.
func New(rdb redis.UniversalClient, opts Options) (*Group, error) {
	if isNil(rdb) {
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
		rdb: rdb, opts: o, late: &processLate,
		hub:     notify.New(rdb, notify.NewChannel(o.Namespace+"fill:")),
		flights: map[string]*flight{},
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		inv:     invRetry{stop: make(chan struct{})},
		hints:   newHints(),
		over:    newOverStore(),
		reserve: newReserve(o),
		reach:   newReach(rdb, o.RedisTimeout),
		hot:     newHotTracker(o),
	}
	batching := o.MaxHitBatch > 1
	g.hits = commit.NewShards(rdb, batching, func(*redis.Client) *commit.Hits { return commit.NewHits(rdb, o.MaxHitBatch, g.redisTimeout) })
	g.readQ = commit.NewShards(rdb, batching, func(*redis.Client) *commit.Scripts {
		return commit.NewScripts(rdb, lua.GuardRead, o.MaxHitBatch, g.redisTimeout)
	})
	g.fillQ = commit.NewShards(rdb, batching, func(*redis.Client) *commit.Scripts {
		return commit.NewScripts(rdb, lua.GuardFill, o.MaxHitBatch, g.redisTimeout)
	})
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
	g.keepArg = ms(o.hold())
	g.capArg = o.MaxTagKeys
	// A tag's invalidation when its member set is gone: the entries it
	// named (of the Group's windows) may be there still.
	g.tagLifeArg = ms(max(satAdd(o.FreshFor, o.StaleFor), time.Millisecond))
	// The reserve serves while this node's calls to Redis fail, and no
	// longer: it is emptied once calls succeeded again for a cooldown
	// and the tier, if it lost its report connection, came back and
	// stayed on for one, or stayed away for tierReturnWait with Redis
	// answering (clearReserve).
	g.br = breaker.Breaker{Threshold: o.BreakerFailures, Cooldown: o.BreakerCooldown,
		Hook: func(open bool) {
			if open {
				g.probeWhileOpen(&g.br, g.probeKey)
			}
			if h := o.Hooks.Breaker; h != nil {
				h(open)
			}
		},
		Recovered: g.clearReserve, Starved: g.starved, Probe: g.probe,
		// The reserve is emptied once Redis answered for a cooldown, not
		// at its first answer: a Redis that flaps (connections reset,
		// or a server that freezes, every few hundred ms) emptied it at
		// each short return, and the next failure sent every key to a
		// load per node (TestFlappingRedisKeepsReserve).
		Settle: o.BreakerCooldown}
	g.masters = g.masterBreakers(rdb, o)
	switch rdb.(type) {
	case *redis.ClusterClient, *redis.Ring:
		// Several servers. With one master down, the others answer
		// between its failures: opening the breaker then sent every
		// key, not only that master's, to a load per node, and emptying
		// the reserve on each answer sent that master's keys to a load
		// per call. The breaker opens when no server answered for
		// RedisTimeout plus the longer of RedisTimeout and
		// BreakerCooldown (a master's keys served from the tier send
		// nothing to answer): callers that serve keys of every master
		// may all be waiting on a frozen one at once, and its first wave
		// of timeouts, which opens that master's own breaker, must not
		// open this one before they reach the others again
		// (TestClusterFrozenMasterMixedCallers). The reserve is emptied
		// once no call failed for a cooldown.
		g.br.Silence, g.br.Settle = o.RedisTimeout+max(o.RedisTimeout, o.BreakerCooldown), o.BreakerCooldown
	}
	g.loc = tier.New(rdb, tier.Config{Namespace: o.Namespace, Entries: o.LocalEntries, Bytes: o.LocalBytes,
		TTL: o.LocalTTL, Lag: o.LocalLag, Timeout: o.RedisTimeout, PerKey: o.LocalTracking == TrackHeld, OnRedisError: o.Hooks.RedisError, OnState: o.Hooks.LocalTier,
		Reserve: g.reserve, RedisNow: g.clk.now, OnLive: func(loc *tier.Tier) {
			g.settleReserve(loc)
			// The report connections reach Redis again: an open breaker
			// probes at the next call rather than at the end of its
			// cooldown.
			g.br.ProbeNow()
		}, OnHanded: func(loc *tier.Tier) {
			// The tier's copies are the reserve's now. No failure the
			// breaker counts may follow (a report connection lost alone,
			// calls that succeed or time out in a starved process), so
			// no recovery of it would look at them again: a timer does.
			g.handedAt.Store(tier.Nanotime())
			g.clearLater(o.BreakerCooldown, loc)
		}})
	if g.hot != nil {
		go g.hotLoop(g.hot)
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
			reported := g.unready(err) // Hooks.Unready
			if !reported {
				return
			}
			g.unreadyOut.Store(true)
			if rerr := redis.Error(nil); errors.As(err, &rerr) {
				if g.closed.Load() {
					g.tellReady() // Close may have looked before the Store
				}
				return
			}
			// Redis down at start: the hub subscribes once it answers
			// (or Close ends the wait, closing the hub).
			if g.hub.Ready(context.Background()) == nil || g.closed.Load() {
				g.tellReady()
			}
		}
	})
	return g, nil
}

// settleReserve records that the tier loc came back on (New may not have
// returned it yet: g.loc is not read), and has the reserve
// emptied once it stayed on for BreakerCooldown (clearReserve). At once, a
// path that flapped (every connection reset every few ms) emptied it at
// each short return, while the tier's own copies were just flushed: the
// next failure sent every key to a load per node. Meanwhile the reserve
// serves only calls that Redis failed, and every change reported since
// the tier came back drops its copy there too.
func (g *Group) settleReserve(loc *tier.Tier) {
	first := g.liveAt.Swap(tier.Nanotime()) == 0
	if g.reserve.Holding() {
		if !first {
			// Back after an outage (not the tier's first start, which
			// calls failing before it began must not add a probe to).
			g.nudge(&g.br, g.probeKey)
		}
		g.clearLater(g.opts.BreakerCooldown, loc)
	}
}

// clearLater calls clearReserveWith(loc) after d, in place of a call it
// had armed.
func (g *Group) clearLater(d time.Duration, loc *tier.Tier) {
	g.liveMu.Lock()
	defer g.liveMu.Unlock()
	if g.closed.Load() {
		return
	}
	if g.liveClear != nil {
		g.liveClear.Stop()
	}
	var tm *time.Timer
	tm = time.AfterFunc(d, func() {
		g.liveMu.Lock()
		if g.liveClear == tm { // not one armed since, as this one fired
			g.liveClear = nil
		}
		g.liveMu.Unlock()
		if !g.closed.Load() {
			g.clearReserveWith(loc)
		}
	})
	g.liveClear = tm
}

// newReserve returns the reserve of a Group: bounded as the tier is, or as
// its default when the tier is off.
func newReserve(o Options) *tier.Reserve {
	entries, bytes := o.LocalEntries, o.LocalBytes
	if entries <= 0 {
		entries = defaultLocalEntries
	}
	return tier.NewReserve(entries, bytes)
}

// isNil reports whether rdb is nil or a nil pointer (a typed nil, such as
// a (*redis.Client)(nil), is not nil as an interface, and panics when
// used).
func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
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

// Close waits for background refreshes and stops the Group; later calls
// return ErrClosed, and so do calls waiting for another node's fill (they
// load nothing). Loads still running for their callers are not waited
// for: their leases are given back, so that another node may load those
// keys at once. It does not close the Redis client.
func (g *Group) Close() error {
	var err error
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed.Store(true)
		g.mu.Unlock()
		g.tellReady() // a Group still unready is counted so no more
		close(g.done)
		close(g.inv.stop)
		g.hot.close()
		err = g.hub.Close()
		g.loc.Close()
		g.bg.Wait()
		// A closed Group has no breaker: one left open is reported
		// closed (a gauge summed over Groups would stay up for good),
		// and its hot keys are none.
		if g.br.Shut() && g.opts.Hooks.Breaker != nil {
			g.opts.Hooks.Breaker(false)
		}
		if g.masters != nil {
			g.masters.Each(func(b *breaker.Breaker) { b.Shut() }) // their settle timers
		}
		g.liveMu.Lock()
		if g.liveClear != nil {
			g.liveClear.Stop()
			g.liveClear = nil
		}
		g.liveMu.Unlock()
		g.hot.clear(g.opts.Hooks.HotKeys)
		g.mu.Lock()
		g.watchdogsOff = true
		close(g.closing)
		g.mu.Unlock()
		g.wd.Wait()
		g.hits.Each((*commit.Hits).Wait)
		g.readQ.Each((*commit.Scripts).Wait)
		g.fillQ.Each((*commit.Scripts).Wait)
	})
	return err
}

// probeWhileOpen probes the open breaker b in the background, once each
// BreakerCooldown after its last failure (within a quarter of it), until
// it closes: so that a Group no call reaches (an
// idle instance) closes it, and says so (Hooks.Breaker), once Redis
// answers, not at its next call; and so that a cluster master's breaker
// closes once the master answers again (or a failover replaced it: the
// probe's key is read from whichever master serves it now), though no
// call reaches its keys, rather than keep the reserve from being
// emptied. key gives each probe's key ("": none known, no probe). One
// runs per breaker at a time; Close stops them.
func (g *Group) probeWhileOpen(b *breaker.Breaker, key func() string) {
	if !b.Probing.CompareAndSwap(false, true) {
		return
	}
	// A failed probe opens the breaker for a cooldown from its failure,
	// not from its start: ticks a quarter cooldown apart find the next
	// probe due that soon after, where ticks a cooldown apart came a
	// tick late, probing every second cooldown.
	tick := max(g.opts.BreakerCooldown/4, time.Millisecond)
	started := g.goBackground(func() {
		t := time.NewTimer(tick)
		defer t.Stop()
		for {
			select {
			case <-g.done:
				return
			case <-t.C:
			}
			if !b.Open() {
				// Closed; unless it opened again meanwhile, and its
				// hook found this loop still running.
				b.Probing.Store(false)
				if !b.Open() || !b.Probing.CompareAndSwap(false, true) {
					return
				}
			}
			// Starts the probe (the read script, in the background)
			// unless one is out or the cooldown is not over.
			if k := key(); k != "" {
				b.AllowKey(k)
			}
			t.Reset(tick)
		}
	})
	if !started {
		b.Probing.Store(false)
	}
}

// breakerProbeKey is the key whose entry the probes of the Group's breaker
// read (probeKey): no caller's, so nothing is loaded or held for it.
const breakerProbeKey = "~breaker-probe"

// probeKey returns the key of the next probe of the Group's breaker. On a
// cluster (or a Ring) the Group's breaker says no server answers, so a
// probe of one fixed key could stay failing while the server of its slot
// does, and the others answer: each probe takes the next of
// breakerProbeKey's numbered spellings, on a cluster the first whose
// master's breaker is not open.
func (g *Group) probeKey() string {
	if g.br.Silence == 0 {
		return breakerProbeKey // one server
	}
	// Bounded: the client's slot map may have to be loaded.
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
	defer cancel()
	n := g.probeSeq.Add(1)
	spelling := func(i uint64) string { return breakerProbeKey + ":" + strconv.FormatUint(n+i, 10) }
	for i := range uint64(16) {
		// A Ring has no breaker per server: the next spelling, whose
		// server may be another.
		if k := spelling(i); g.masters == nil || !g.masterOpen(ctx, g.names(k).entry) {
			return k
		}
	}
	return spelling(0)
}

// goBackground runs f in a goroutine Close waits for; after Close it does
// nothing.
func (g *Group) goBackground(f func()) (started bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return false
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		f()
	}()
	return true
}

// step runs the testStep seam.
func (g *Group) step(ctx context.Context, name string) {
	if g.testStep != nil {
		g.testStep(ctx, name)
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
