package tier

// A report connection: one per master, subscribed to the reports Redis
// sends of every change under the Namespace.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// invalidateChannel is where Redis sends the reports of a tracking
// connection that redirects to a subscribed RESP2 connection.
const invalidateChannel = "__redis__:invalidate"

// healthEvery is how long a report connection may stay silent before it
// is probed (SUBSCRIBE again, whose confirmation is the answer); a probe
// unanswered within healthEvery more counts as a lost connection.
const healthEvery = 500 * time.Millisecond

// MaxTrackBackoff bounds the wait before a lost or refused report
// connection is tried again.
const MaxTrackBackoff = 2 * time.Second

// tracker is one report connection.
type tracker struct {
	addr string
	rdb  *redis.Client
	up   bool // confirmed; guarded by coherence.mu
	// fc watches the connection dialled last, for the fence (fence.go);
	// nil before the first. dials counts the connections dialled: one
	// more within a listen means go-redis reconnected on its own, and
	// reports were lost.
	fc    atomic.Pointer[fenceConn]
	dials atomic.Int64
	bar   barriers // the barriers of the current connection
	// id is the report connection's client id, which the reader's
	// tracking redirects to; opts are the node's options, for the reader.
	id    atomic.Int64
	opts  *redis.Options
	keeps chan keepReq // copies waiting for their tracked read
	// queued is what the copies in keeps cost; the trackers' together
	// are bounded by half the tier's bytes (track).
	queued atomic.Int64
	// reader is the socket of the tracked reader's connection (TrackHeld),
	// watched by the barriers: nil when none, or once its loss was seen,
	// or when it cannot be asked (readerBlind). readerClient is that
	// reader, which the barriers ask instead then (checkReader).
	reader       atomic.Pointer[syscall.RawConn]
	readerBlind  atomic.Bool
	readerClient atomic.Pointer[redis.Client]
	// readerAt is when (nanotime) the reader's connection was last known
	// alive: its socket found established, or a reply on it to a command
	// sent then; 0: never. readerProbing: a CLIENT ID is out on it.
	readerAt      atomic.Int64
	readerProbing atomic.Bool
	resp3         bool // the report connection runs in RESP3 (resp3.go)
	// server is the address the report connection reached, when dialled
	// as the client dials (not through ReportAddr); client: the one the
	// client reached last; moved: the two differ (switch.go).
	server atomic.Pointer[string]
	client atomic.Pointer[string]
	moved  atomic.Bool
	raddr  string // where the report connection dials (ReportAddr)

	// life ends with stop: the context of the connection's commands. Its
	// dials are cancelled after, once stop closed their pools (dialing).
	life, dialing context.Context
	end, endDials context.CancelFunc

	mu sync.Mutex
	ps *redis.PubSub // the current subscription, closed by stop
	// owned are the clients of the report connection and of its reader,
	// which stop closes before it cancels their dials: a dial that fails
	// while its pool is open starts go-redis's probe of the pool, which
	// sleeps a second between dials and would outlive Close.
	owned []*redis.Client
}

// own records c as one of t's clients, for stop to close; false (and c
// closed) when t was stopped.
func (t *tracker) own(c *redis.Client) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.life.Err() != nil {
		_ = c.Close()
		return false
	}
	t.owned = append(t.owned, c)
	return true
}

// disown closes c, one of t's clients, and forgets it.
func (t *tracker) disown(c *redis.Client) {
	t.mu.Lock()
	t.owned = slices.DeleteFunc(t.owned, func(o *redis.Client) bool { return o == c })
	t.mu.Unlock()
	_ = c.Close()
}

// errTrackerStopped ends a dial that completed after the tracker stopped.
var errTrackerStopped = errors.New("guard: report connection stopped")

// run keeps t's report connection, until t is stopped.
func (c *coherence) run(t *tracker) {
	defer c.wg.Done()
	var ts trackState
	ts.backoff = time.Millisecond
	for {
		var err error
		if t.resp3 {
			err = c.listenRESP3(t, &ts)
		} else {
			err = c.listen(t, &ts)
		}
		if t.life.Err() != nil {
			return
		}
		if !t.resp3 && whyLost(err) == WhyRefused {
			// Refused in RESP2 (a REDIRECT some servers do not take, or
			// RESP2 tracking): the next attempt runs in RESP3.
			t.resp3 = true
		}
		if isFlush(err) {
			// FLUSHALL or FLUSHDB: every copy goes (the tier stops until
			// the connection go-redis makes anew is confirmed). An event
			// of the data, not a fault: nothing is reported.
			c.mu.Lock()
			c.flushed = true
			c.mu.Unlock()
			c.setDown(t, WhyConnecting)
			continue
		}
		c.setDown(t, whyLost(err))
		c.afterMove(err)
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
		case <-t.life.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		ts.backoff = min(ts.backoff*2, MaxTrackBackoff)
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
	ctx := t.life
	t.bar.reset()
	t.moved.Store(false)
	var ps *redis.PubSub
	_ = t.bar.send(func() error { ps = t.rdb.Subscribe(ctx, invalidateChannel); return nil })
	defer ps.Close()
	if !t.setPubSub(ps) {
		return nil
	}
	dials := t.dials.Load()
	done := make(chan struct{})
	defer close(done)
	c.goTracker(func() { c.sendBarriers(t, ps, done) })
	if c.perKey {
		reader := redis.NewClient(readerOptions(t.opts, t.id.Load(), c.readerDialed(t)))
		if !t.own(reader) {
			return nil
		}
		defer t.disown(reader)
		t.readerClient.Store(reader)
		defer t.readerClient.Store(nil)
		c.goTracker(func() { c.readTracked(t, reader, done) })
	}
	probed := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthEvery)
		if t.moved.Load() {
			return errMoved
		}
		if t.dials.Load() != dials {
			if rerr := redis.Error(nil); errors.As(err, &rerr) {
				return err // the new connection's refusal says more
			}
			return errRedialed
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout() && !probed:
			// Silence: probe with a SUBSCRIBE that changes nothing (a
			// PING would need one more command in the user's ACL).
			if err := t.bar.send(func() error { return ps.Subscribe(ctx, invalidateChannel) }); err != nil {
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
		c.apply(t, ts, msg)
	}
}

// apply acts on a message of t's report connection.
func (c *coherence) apply(t *tracker, ts *trackState, msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		if m.Kind == "subscribe" {
			t.bar.confirmed(c.readerProof(t))
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

// sendBarriers sends a barrier on ps while the tier is being hit, each
// when barriers.next says, one at a time, until done: a hit is served only
// while a barrier sent within Lag came back (see fence.go). An idle tier
// sends none; its next hit reads Redis, and the barriers start again.
func (c *coherence) sendBarriers(t *tracker, ps *redis.PubSub, done <-chan struct{}) {
	// How often a barrier still out, and an idle tier, are looked at again.
	recheck, idle := max(c.lag/20, time.Millisecond), max(c.lag/2, time.Millisecond)
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-done:
			return
		case <-timer.C:
		}
		now := nanotime()
		wait := t.bar.next(now, c.lag)
		switch {
		case now-c.tier.lastHit.Load() > int64(idleAfter):
			timer.Reset(idle)
			continue
		case t.bar.out():
			timer.Reset(recheck)
			continue
		case wait > 0:
			timer.Reset(wait)
			continue
		}
		if c.perKey {
			c.checkReader(t) // once per barrier, as the tier is used
		}
		c.probeData()
		if err := t.bar.send(func() error { return ps.Subscribe(t.life, invalidateChannel) }); err != nil {
			return // the connection is gone; listen sees it too
		}
		timer.Reset(recheck)
	}
}

// idleAfter is how long after its last hit a tier stops sending barriers.
const idleAfter = time.Second

// errRedialed is how a report connection that go-redis redialled on its
// own is lost: the reports sent meanwhile were.
var errRedialed = errors.New("guard: report connection redialled")

// changed applies the report that the key name changed.
func (c *coherence) changed(name string) {
	c.reports.Add(1)
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
	if up && t.moved.Load() {
		return // a barrier of the connection left behind (switch.go)
	}
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

// setPubSub records ps as t's subscription; false when t was stopped.
func (t *tracker) setPubSub(ps *redis.PubSub) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.life.Err() != nil {
		return false
	}
	t.ps = ps
	return true
}

// stop ends t's goroutine; it does not wait for it.
func (t *tracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.life.Err() != nil {
		return
	}
	t.end()
	// Then the clients, before their dials are cancelled: a dial cancelled
	// then fails in a closed pool, which go-redis does not probe again.
	for _, c := range t.owned {
		_ = c.Close()
	}
	t.owned = nil
	t.endDials()
	// Then the last connection dialled: one still being set up (its HELLO
	// or CLIENT TRACKING unanswered, on a frozen server or a stalled path)
	// holds the PubSub's lock until its read times out, and the PubSub's
	// Close would wait for it.
	if fc := t.fc.Load(); fc != nil {
		_ = fc.Close()
	}
	if t.ps != nil {
		_ = t.ps.Close() // unblocks its Receive
	}
}

// ReportAddr, set by tests, maps a master's address to the one its report
// connection dials: a proxy that delays or cuts that connection alone.
var ReportAddr func(addr string) string

// trackerOptions are the options of t's report connection to the node
// that o reaches: the same address, dialer (its connections watched for
// the fence), credentials and TLS, RESP2 (reports on a subscribed
// connection), one connection, and tracking turned on as it connects,
// again after every reconnect.
func trackerOptions(o *redis.Options, ns string, perKey bool, t *tracker, kernel bool) *redis.Options {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	addr := t.raddr
	return &redis.Options{
		Network: o.Network, Addr: addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// A dial the tracker's stop cancels: a blackholed address
			// would hold Close for the dial timeout.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(t.dialing, cancel)()
			cn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if ra := cn.RemoteAddr(); ra != nil && t.raddr == o.Addr { // not through a proxy of ReportAddr
				t.reached(ra.String())
			}
			cn, fc := watch(cn, kernel)
			t.fc.Store(fc)
			if t.dialing.Err() != nil {
				// stop closed the connection before, if it saw this one;
				// if not, this closes it (stop cancels dials, then looks).
				_ = fc.Close()
				return nil, errTrackerStopped
			}
			t.dials.Add(1)
			return cn, nil
		},
		Username: o.Username, Password: o.Password,
		// The RESP3 connection reads the held keys itself (resp3.go):
		// in the Group's database.
		DB:                           o.DB,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		TLSConfig:                    o.TLSConfig, DialTimeout: o.DialTimeout,
		ClientName: o.ClientName,
		//lint:ignore SA1019 the misspelt field is still honoured for whoever sets it
		DisableIdentity: o.DisableIdentity || o.DisableIndentity,
		IdentitySuffix:  o.IdentitySuffix,
		Protocol:        2, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
		PipelinePoolSize: -1, // one connection: a pipeline too runs on it
		// One attempt per dial: the tracker has its own backoff, and
		// go-redis goes on with a dial its caller gave up (a stop) for
		// every attempt, 100 ms apart.
		DialerRetries: 1,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			id, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			t.id.Store(id)
			if perKey {
				return nil // the reports come from the tracked reader (track.go)
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
		if fc := tr.fc.Load(); fc != nil && fc.watched {
			watched++
		}
	}
	return conns, watched
}

// goTracker runs f, a goroutine of a report connection's, in c.wg: Close
// returns once it has.
func (c *coherence) goTracker(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}
