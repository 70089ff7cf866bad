package tier

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

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

// invalidateChannel is where Redis sends the reports of a tracking
// connection that redirects to a subscribed RESP2 connection.
const invalidateChannel = "__redis__:invalidate"

// healthEvery is how long a report connection may stay silent before it
// is probed (SUBSCRIBE again, whose confirmation is the answer); a probe
// unanswered within healthEvery more counts as a lost connection.
const healthEvery = 500 * time.Millisecond

// reconcileEvery is how often a cluster's masters are compared with the
// connections listening to them.
const reconcileEvery = time.Second

// maxTrackBackoff bounds the wait before a lost or refused report
// connection is tried again.
const maxTrackBackoff = 2 * time.Second

// coherence keeps one report connection per master for a tier.
type coherence struct {
	tier   *Tier
	ns     string
	prefix string                     // ns + "{": how every entry name starts
	hook   func(op string, err error) // Hooks.RedisError
	state  func(on bool, why string)  // Hooks.LocalTier

	single *redis.Options       // a *redis.Client's options (standalone, Sentinel)
	cc     *redis.ClusterClient // or a cluster's

	mu       sync.Mutex
	trackers map[string]*tracker // by master address ("" for single)
	// all holds the trackers too, for the fence (fenced) to read without
	// mu; replaced, never changed, by update.
	all     atomic.Pointer[[]*tracker]
	down    int  // trackers not confirmed yet
	pending bool // a cluster's masters not reconciled since a new node
	live    bool
	why     string // why the tier is off (tierConnecting...), for state
	shown   string // what state was last told: "on", or a why
	closed  bool

	wg   sync.WaitGroup
	kick chan struct{} // asks the reconciler to run now
	quit chan struct{}
}

// tracker is one report connection.
type tracker struct {
	addr string
	rdb  *redis.Client
	quit chan struct{}
	up   bool // confirmed; guarded by coherence.mu
	// fc watches the connection dialled last, for the fence (tierfence.go);
	// nil before the first.
	fc atomic.Pointer[fenceConn]

	mu sync.Mutex
	ps *redis.PubSub // the current subscription, closed by stop
}

// newCoherence returns the coherence of tier for rdb, started, or nil
// when rdb is a client it cannot follow (a *redis.Ring, a cluster client
// that reads from replicas): the tier then stays off.
func newCoherence(rdb redis.UniversalClient, tier *Tier, o Config) *coherence {
	c := &coherence{tier: tier, ns: o.Namespace, prefix: o.Namespace + "{", hook: o.OnRedisError,
		state: o.OnState, why: WhyConnecting,
		trackers: map[string]*tracker{}, kick: make(chan struct{}, 1), quit: make(chan struct{})}
	tier.fence = c.fenced
	switch r := rdb.(type) {
	case *redis.Client:
		c.single = r.Options()
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
		w := weak.Make(c)
		r.OnNewNode(func(*redis.Client) {
			// Called as go-redis meets a node, before any command is sent
			// to it: a value it serves is not kept until this Group
			// listens to the masters of the new map.
			if c := w.Value(); c != nil {
				c.newNode()
			}
		})
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
	t := &tracker{addr: addr, quit: make(chan struct{})}
	t.rdb = redis.NewClient(trackerOptions(o, c.ns, t))
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
		c.tier.SetLive(live)
	}
	c.tell()
}

// Why the tier is off, as Hooks.LocalTier tells it.
const (
	WhyDisabled    = "disabled"    // Options.LocalEntries is Disabled
	WhyUnsupported = "unsupported" // a client whose changes cannot be followed
	WhyConnecting  = "connecting"  // a report connection not confirmed yet
	WhyLost        = "lost"        // a report connection lost or silent
	WhyRefused     = "refused"     // Redis refused tracking (ACL, version)
	WhyClosed      = "closed"      // the Group is closed
)

// setWhy records why the tier is off from now on, mu held.
func (c *coherence) setWhy(why string) {
	c.why = why
	c.tell()
}

// tell reports the tier's state to Hooks.LocalTier when it changed, mu
// held (so the reports come in the order of the changes).
func (c *coherence) tell() {
	now := "on"
	if !c.live {
		now = c.why
	}
	if now == c.shown {
		return
	}
	c.shown = now
	if c.state != nil {
		c.state(c.live, c.why)
	}
}

// fenced reports whether every report that reached this host has been
// applied (tierfence.go): the tier serves only then. (Letting concurrent hits
// share a check that began after them saved nothing measurable on two
// cores and cost every hit two atomic writes, so each hit checks.)
func (c *coherence) fenced() bool {
	all := c.all.Load()
	if all == nil {
		return false
	}
	for _, t := range *all {
		if fc := t.fc.Load(); fc == nil || !fc.Quiet() {
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

// run keeps t's report connection, until t is stopped.
func (c *coherence) run(t *tracker) {
	defer c.wg.Done()
	var ts trackState
	ts.backoff = time.Millisecond
	for {
		err := c.listen(t, &ts)
		select {
		case <-t.quit:
			return
		default:
		}
		if isFlush(err) {
			// FLUSHALL or FLUSHDB: every copy goes (the tier stops until
			// the connection go-redis makes anew is confirmed). An event
			// of the data, not a fault: nothing is reported.
			c.setDown(t, WhyConnecting)
			continue
		}
		c.setDown(t, whyLost(err))
		if c.cc != nil {
			// A master lost may have failed over: look at the map again.
			c.cc.ReloadState(context.Background())
			c.poke()
		}
		if !ts.reported && c.hook != nil {
			// Once per outage: a refusal (ACL, a server without
			// tracking) would otherwise be reported at every retry.
			c.hook("track", err)
		}
		ts.reported = true
		wait := time.NewTimer(ts.backoff)
		select {
		case <-t.quit:
			wait.Stop()
			return
		case <-wait.C:
		}
		ts.backoff = min(ts.backoff*2, maxTrackBackoff)
	}
}

// trackState is what a tracker's connections pass on to the next.
type trackState struct {
	backoff  time.Duration // before the next attempt
	reported bool          // this outage was reported
}

// isFlush reports whether err is how go-redis reads Redis's report of a
// flush: an invalidation message whose payload is null (RESP2), which it
// does not parse.
func isFlush(err error) bool {
	return err != nil && strings.HasSuffix(err.Error(), "unsupported pubsub message payload: <nil>")
}

// whyLost tells a refusal (Redis answered with an error: an ACL without
// CLIENT TRACKING, a server without it) from a lost connection.
func whyLost(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return WhyRefused
	}
	return WhyLost
}

// errSilent is how a report connection that stopped answering is lost.
var errSilent = errors.New("guard: report connection silent")

// listen subscribes t's connection and applies its reports until it is
// lost (the error) or t is stopped.
func (c *coherence) listen(t *tracker, ts *trackState) error {
	ctx := context.Background()
	ps := t.rdb.Subscribe(ctx, invalidateChannel)
	defer ps.Close()
	if !t.setPubSub(ps) {
		return nil
	}
	probed := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthEvery)
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout() && !probed:
			// Silence: probe with a SUBSCRIBE that changes nothing (a
			// PING would need one more command in the user's ACL).
			if err := ps.Subscribe(ctx, invalidateChannel); err != nil {
				return err
			}
			probed = true
			continue
		case errors.As(err, &ne) && ne.Timeout():
			return errSilent
		default:
			// Lost, refused (the ACL, a server without tracking), or a
			// flush (FLUSHALL), whose report go-redis does not parse (see
			// isFlush). Each means the tier cannot know what changed.
			return err
		}
		probed = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				ts.backoff, ts.reported = time.Millisecond, false
				c.setUp(t, true)
			}
		case *redis.Message:
			for _, name := range m.PayloadSlice {
				c.changed(name)
			}
			if m.Payload != "" {
				c.changed(m.Payload)
			}
		}
	}
}

// changed applies the report that the key name changed.
func (c *coherence) changed(name string) {
	if IsEntryName(c.prefix, name) {
		c.tier.Changed(name)
		return
	}
	// A tag's invalidation (InvalidateTag, on any node): the copies of
	// its keys go, even those whose entries it could not name.
	if base, ok := strings.CutSuffix(name, ":tinv"); ok && strings.HasPrefix(base, c.prefix) && strings.IndexByte(base, '}') == len(base)-1 {
		c.tier.ChangedTag(base)
	}
}

// setDown marks t's connection lost, for why.
func (c *coherence) setDown(t *tracker, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trackers[t.addr] != t {
		return
	}
	c.why = why
	c.setUpLocked(t, false)
}

func (c *coherence) setUp(t *tracker, up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setUpLocked(t, up)
}

func (c *coherence) setUpLocked(t *tracker, up bool) {
	if c.trackers[t.addr] != t || t.up == up {
		c.tell()
		return
	}
	t.up = up
	if up {
		c.down--
	} else {
		c.down++
	}
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
		t.stop()
	}
	trackers := c.trackers
	c.trackers = map[string]*tracker{}
	c.update()
	c.mu.Unlock()
	close(c.quit)
	c.wg.Wait()
	for _, t := range trackers {
		_ = t.rdb.Close()
	}
}

// setPubSub records ps as t's subscription; false when t was stopped.
func (t *tracker) setPubSub(ps *redis.PubSub) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.quit:
		return false
	default:
	}
	t.ps = ps
	return true
}

// stop ends t's goroutine; it does not wait for it.
func (t *tracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.quit:
		return
	default:
	}
	close(t.quit)
	if t.ps != nil {
		_ = t.ps.Close() // unblocks its Receive
	}
}

// trackerOptions are the options of t's report connection to the node
// that o reaches: the same address, dialer (its connections watched for
// the fence), credentials and TLS, RESP2 (reports on a subscribed
// connection), one connection, and tracking turned on as it connects,
// again after every reconnect.
func trackerOptions(o *redis.Options, ns string, t *tracker) *redis.Options {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	return &redis.Options{
		Network: o.Network, Addr: o.Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cn, fc := watch(cn)
			t.fc.Store(fc)
			return cn, nil
		},
		Username: o.Username, Password: o.Password,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		TLSConfig:                    o.TLSConfig, DialTimeout: o.DialTimeout,
		ClientName: o.ClientName, DisableIdentity: o.DisableIdentity || o.DisableIndentity,
		IdentitySuffix: o.IdentitySuffix,
		Protocol:       2, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			id, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", ns).Err()
		},
	}
}

// IsEntryName reports whether the Redis key name is the entry of a key of
// the namespace whose names start with prefix, its Namespace and "{" (see
// names): "ns{e}" for a key without a hash tag of its own, "ns{t}/len:key"
// for one with; the other names of a key, and a tag's, continue after the
// '}' otherwise.
func IsEntryName(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return false
	}
	rest = rest[i+1:]
	if rest == "" {
		return true
	}
	rest, ok = strings.CutPrefix(rest, "/")
	if !ok {
		return false
	}
	n, key, ok := strings.Cut(rest, ":")
	if !ok {
		return false
	}
	l, err := strconv.Atoi(n)
	return err == nil && l == len(key)
}

// Watched returns how many report connections the tier keeps and how many
// of them the fence watches (tests: TLS and Unix sockets are not watched).
func (t *Tier) Watched() (conns, watched int) {
	if t == nil {
		return 0, 0
	}
	all := t.coh.all.Load()
	if all == nil {
		return 0, 0
	}
	for _, tr := range *all {
		conns++
		if fc := tr.fc.Load(); fc != nil && fc != unfenced {
			watched++
		}
	}
	return conns, watched
}
