package tier

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coherence of the in-process tier: Redis server-assisted client tracking
// in broadcasting mode. On each master, one connection of the Group's own
// runs
//
//	CLIENT TRACKING ON REDIRECT <its own id> BCAST PREFIX <Namespace>
//	SUBSCRIBE __redis__:invalidate
//
// and Redis then sends it the name of every key under the Namespace that
// changes, whoever changed it and however: a fill, a revalidation, an
// Invalidate or InvalidateTag, a failing, pass or oversize marker, an
// expiry, an eviction, a DEL by hand (FLUSHALL and FLUSHDB flush the
// tier). The report leaves Redis in the same event-loop turn as the
// writer's reply, and never crosses the cluster bus: it comes from the
// master that holds the key. A report that reached this host stops the
// tier from serving until it is applied (the fence, tierfence.go). It costs each master one message per change
// and listening Group (Redis batches the names of one turn into one
// message), and nothing per hit; a GET, which changes nothing, is not
// reported. RESP2 with a redirect to itself works on every Redis from 6.0
// and needs no push support from the client.
//
// A report connection that is lost, or silent past healthEvery after a
// probe, flushes the tier, which serves nothing until it is back; so do
// resharding and failover on a cluster, where a master this Group does
// not listen to yet (a new node, a promoted replica) stops the tier until
// it does. The localTier doc says how late replies are kept out.

// reconcileEvery is how often a cluster's masters are compared with the
// connections listening to them.
const reconcileEvery = time.Second

// coherence keeps one report connection per master for a tier.
type coherence struct {
	tier   *Tier
	ns     string
	prefix string                     // ns + "{": how every entry name starts
	hook   func(op string, err error) // Hooks.RedisError
	lag    time.Duration              // Config.Lag
	rt     time.Duration              // Config.Timeout: bounds a tracked read
	perKey bool                       // Config.PerKey
	// reports counts the names reported changed (tests: what a change
	// costs a node that holds nothing of it).
	reports atomic.Int64
	state   func(on bool, why string) // Hooks.LocalTier

	single *redis.Options // a *redis.Client's options (standalone, Sentinel)
	data   *redis.Client  // that client, whose dials the tier follows (switch.go)
	// unfollow stops the tier being told of data's dials, or of the
	// nodes a cluster client meets (switchhook.go).
	unfollow func()
	// probing: a TIME on data is under way (probeData); bg ends it when
	// the Group closes.
	probing atomic.Bool
	bg      context.Context
	stopBg  context.CancelFunc
	cc      *redis.ClusterClient // or a cluster's

	mu       sync.Mutex
	trackers map[string]*tracker // by master address ("" for single)
	// all holds the trackers too, for the fence (fenced) to read without
	// mu; replaced, never changed, by update.
	all     atomic.Pointer[[]*tracker]
	down    int  // trackers not confirmed yet
	pending bool // a cluster's masters not reconciled since a new node
	live    bool
	flushed bool   // the tier stops for a flush (no copy to the reserve)
	why     string // why the tier is off (tierConnecting...), for state
	shown   string // what state was last told: "on", or a why
	closed  bool

	wg   sync.WaitGroup
	kick chan struct{} // asks the reconciler to run now
	quit chan struct{}
}

// newCoherence returns the coherence of tier for rdb, started, or nil
// when rdb is a client it cannot follow (a *redis.Ring, a cluster client
// that reads from replicas): the tier then stays off.
func newCoherence(rdb redis.UniversalClient, tier *Tier, o Config) *coherence {
	c := &coherence{tier: tier, ns: o.Namespace, prefix: o.Namespace + "{", hook: o.OnRedisError, lag: o.Lag, rt: o.Timeout, perKey: o.PerKey,
		state: o.OnState, why: WhyConnecting,
		trackers: map[string]*tracker{}, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	c.bg, c.stopBg = context.WithCancel(context.Background())
	tier.fence = c.fenced
	switch r := rdb.(type) {
	case *redis.Client:
		c.single, c.data = r.Options(), r
		c.unfollow = follow(r, c)
		c.mu.Lock()
		c.add("", c.single)
		c.mu.Unlock()
	case *redis.ClusterClient:
		if co := r.Options(); co.ReadOnly || co.RouteByLatency || co.RouteRandomly {
			// Reads may go to replicas, which lag the masters: a reply
			// from one, older than a report already applied, would be
			// kept until LocalTTL, and replicas are not listened to.
			return nil
		}
		c.cc = r
		c.pending = true
		// Called as go-redis meets a node, before any command is sent to
		// it: a value it serves is not kept until this Group listens to
		// the masters of the new map.
		c.unfollow = followNodes(r, c)
		c.wg.Add(1)
		go c.reconciler()
	default:
		return nil
	}
	c.mu.Lock()
	c.tell() // connecting, until every report connection is confirmed
	c.mu.Unlock()
	return c
}

// add starts a tracker for the master at addr with options o, mu held.
func (c *coherence) add(addr string, o *redis.Options) {
	t := &tracker{addr: addr, opts: o, resp3: ForceRESP3}
	if c.perKey {
		// Only the tracked reader reads it (track.go); a nil queue drops
		// every copy (track). Its buffer holds pointers the collector
		// scans each cycle: a broadcasting tier does not carry it.
		t.keeps = make(chan keepReq, 4*maxTrackBatch)
	}
	if t.raddr = o.Addr; ReportAddr != nil {
		t.raddr = ReportAddr(o.Addr)
	}
	t.life, t.end = context.WithCancel(context.Background())
	t.dialing, t.endDials = context.WithCancel(context.Background())
	t.rdb = redis.NewClient(trackerOptions(o, c.ns, c.perKey, t, true))
	t.owned = []*redis.Client{t.rdb}
	c.trackers[addr] = t
	c.down++
	c.update()
	c.wg.Add(1)
	go c.run(t)
}

// remove stops the tracker t, mu held.
func (c *coherence) remove(t *tracker) {
	delete(c.trackers, t.addr)
	if !t.up {
		c.down--
	}
	t.stop()
	c.update()
}

// update starts or stops the tier, mu held: it serves while every master
// has a confirmed tracker.
func (c *coherence) update() {
	all := slices.Collect(maps.Values(c.trackers))
	c.all.Store(&all)
	live := !c.closed && !c.pending && c.down == 0 && len(c.trackers) > 0
	if live != c.live {
		c.live = live
		// A flush's copies are gone from Redis; others serve on.
		c.tier.setLive(live, !c.flushed && !c.closed)
		c.flushed = false
	}
	c.tell()
}

// tell reports the tier's state to Hooks.LocalTier when it changed, mu
// held (so the reports come in the order of the changes).
func (c *coherence) tell() {
	// Refused counts as coming back: the tracker tries again, and an
	// error reply may pass (a server loading its data, an ACL put back).
	c.tier.setReturning(!c.live && !c.closed && (c.why == WhyLost || c.why == WhyConnecting || c.why == WhyRefused))
	now := "on"
	if !c.live {
		now = c.why
	}
	if now == c.shown {
		return
	}
	c.shown = now
	if c.state != nil {
		why := c.why
		if c.live {
			why = "" // as Hooks.LocalTier says: "" when on
		}
		c.state(c.live, why)
	}
}

// fenced reports whether every report that reached this host has been
// applied (tierfence.go): the tier serves only then. (Letting concurrent hits
// share a check that began after them saved nothing measurable on two
// cores and cost every hit two atomic writes, so each hit checks.)
func (c *coherence) fenced(now int64) bool {
	all := c.all.Load()
	if all == nil {
		return false
	}
	for _, t := range *all {
		fc := t.fc.Load()
		if fc == nil || t.moved.Load() || (fc.watched && t.bar.out()) || !fc.Quiet(now) || !t.bar.recent(now, c.lag) {
			return false
		}
	}
	return true
}

// newNode: go-redis met a node of the cluster; the tier stops until the
// masters are listened to again.
func (c *coherence) newNode() {
	c.mu.Lock()
	if !c.closed {
		c.pending = true
		c.why = WhyConnecting
		c.update()
	}
	c.mu.Unlock()
	c.poke()
}

func (c *coherence) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// reconciler keeps one tracker per master of the cluster.
func (c *coherence) reconciler() {
	defer c.wg.Done()
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	for {
		c.reconcile()
		select {
		case <-c.quit:
			return
		case <-c.kick:
		case <-tick.C:
		}
	}
}

func (c *coherence) reconcile() {
	ctx, cancel := context.WithTimeout(context.Background(), reconcileEvery)
	defer cancel()
	var mu sync.Mutex
	masters := map[string]*redis.Options{}
	err := c.cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		o := n.Options()
		mu.Lock()
		masters[o.Addr] = o
		mu.Unlock()
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || err != nil || len(masters) == 0 {
		return
	}
	for addr, t := range c.trackers {
		if masters[addr] == nil {
			c.remove(t)
		}
	}
	for addr, o := range masters {
		if c.trackers[addr] == nil {
			c.add(addr, o)
		}
	}
	c.pending = false
	c.update()
}

// Close stops every tracker and waits for them: the tier is off after.
func (c *coherence) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.closed = true
	c.why = WhyClosed
	for _, t := range c.trackers {
		t.stop() // and closes its clients
	}
	c.trackers = map[string]*tracker{}
	c.update()
	c.mu.Unlock()
	close(c.quit)
	c.stopBg()
	if c.unfollow != nil {
		c.unfollow()
	}
	c.wg.Wait()
}

// Reports returns how many names the report connections reported changed.
func (t *Tier) Reports() int64 {
	if t == nil {
		return 0
	}
	return t.coh.reports.Load()
}
