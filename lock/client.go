package lock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/notify"
	"github.com/stampede-go/stampede/scripts"
)

// Client obtains locks on one Redis (New) or on several independent masters
// (NewRedlock). It is safe for concurrent use. Close releases its shared
// Pub/Sub connection.
type Client struct {
	nodes   []*node
	quorum  int
	opts    Options
	channel string // this Client's wake channel, the same on every node
	trust   string // "1": PUBLISH receiver counts are reliable (not a cluster)

	wg        sync.WaitGroup // best-effort cleanups still running
	closeOnce sync.Once
	closed    chan struct{}
}

type node struct {
	rdb redis.UniversalClient
	hub *notify.Hub
}

// New returns a Client that keeps its locks on rdb, which may be a
// *redis.Client, a *redis.ClusterClient or a failover client. It panics if
// rdb is nil or opts is invalid: both are programming errors.
func New(rdb redis.UniversalClient, opts Options) *Client {
	if rdb == nil {
		panic("lock: New with a nil Redis client")
	}
	return newClient([]redis.UniversalClient{rdb}, opts)
}

// NewRedlock returns a Client that obtains each lock on a majority of
// independent Redis masters (the Redlock algorithm): a lock is held when
// more than half of the masters granted it within its lease, and is valid for
// ttl - time spent acquiring - clock drift. Release and Refresh act on all
// masters.
//
// Redlock tolerates the loss of a minority of masters; it does not make a
// lock safe against a paused holder. Use Fence, checked by the resource, for
// that. Fencing numbers of a Redlock lock are the largest any master minted,
// and increase only as far as the masters' clocks agree. It panics if clients
// is empty, holds nil, or opts is invalid.
func NewRedlock(clients []redis.UniversalClient, opts Options) *Client {
	if len(clients) == 0 {
		panic("lock: NewRedlock with no Redis clients")
	}
	for i, c := range clients {
		if c == nil {
			panic("lock: NewRedlock with a nil Redis client at index " + strconv.Itoa(i))
		}
	}
	return newClient(clients, opts)
}

func newClient(rdbs []redis.UniversalClient, opts Options) *Client {
	o, err := opts.withDefaults()
	if err != nil {
		panic(err.Error())
	}
	if !hashtag.ValidPrefix(o.Prefix) {
		panic(fmt.Sprintf("lock: Prefix %q must not contain '{' or '}'", o.Prefix))
	}
	c := &Client{
		opts: o, quorum: len(rdbs)/2 + 1, closed: make(chan struct{}),
		channel: notify.NewChannel(o.Prefix + "wake:"), trust: "1",
	}
	for _, r := range rdbs {
		if _, ok := r.(*redis.ClusterClient); ok {
			// Cluster PUBLISH counts only the receivers on the script's node.
			c.trust = "0"
		}
		c.nodes = append(c.nodes, &node{rdb: r, hub: notify.New(r, c.channel)})
	}
	return c
}

// Close stops the Client's Pub/Sub connections and waits for its background
// cleanups. It does not release held locks (their leases run out) and does
// not close the Redis clients. Obtain fails with ErrClosed afterwards.
func (c *Client) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		close(c.closed)
		for _, n := range c.nodes {
			errs = append(errs, n.hub.Close())
		}
		c.wg.Wait()
	})
	return errors.Join(errs...)
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// names are the Redis keys of one lock; they share one hash tag.
type names struct{ lock, fence, queue string }

func (c *Client) names(key string) names {
	b := hashtag.Base(c.opts.Prefix, key)
	return names{lock: b, fence: b + ":fence", queue: b + ":q"}
}

// Obtain takes the lock named key for ttl. It returns ErrNotObtained when the
// lock is busy (after waiting, with WaitFor). Each lock gets a random token
// and a fencing number larger than that of every earlier holder.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	return c.obtain(ctx, key, "", false, ttl, opts)
}

// ObtainReentrant takes one hold of the reentrant lock named key for owner.
// The owner may take it again while holding it (each hold is released by its
// own Lock.Release, and the lock is free once every hold is released); other
// owners are blocked until then. A re-acquire keeps the fencing number of the
// first hold and resets the lease to ttl. Go has no thread identity, so the
// owner id is explicit: use one per logical owner (a request, a job, a
// process).
func (c *Client) ObtainReentrant(ctx context.Context, key, owner string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	if owner == "" {
		return nil, errors.New("lock: empty owner")
	}
	return c.obtain(ctx, key, owner, true, ttl, opts)
}

// testHookAfterFirstAttempt, when set by a test, runs between a waiter's
// first failed attempt and its subscription: the window a release must not
// be lost in.
var testHookAfterFirstAttempt func()

func validate(key string, ttl, wait time.Duration) error {
	switch {
	case key == "":
		return errors.New("lock: empty key")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("lock: key of %d bytes exceeds MaxKeyBytes (%d)", len(key), MaxKeyBytes)
	case ttl < time.Millisecond:
		return fmt.Errorf("lock: ttl %v is below 1ms", ttl)
	case wait < 0:
		return fmt.Errorf("lock: negative WaitFor %v", wait)
	}
	return nil
}

func (c *Client) obtain(ctx context.Context, key, owner string, reentrant bool, ttl time.Duration, opts []ObtainOption) (*Lock, error) {
	if ctx == nil {
		return nil, errors.New("lock: nil context")
	}
	var o obtainOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := validate(key, ttl, o.wait); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	token, mode := owner, "r"
	if !reentrant {
		token, mode = newToken(), "t"
	}
	nm := c.names(key)
	start := time.Now()

	// A waiter registers its wake channel before its first attempt, so a
	// release right after that attempt finds it. When this Client's
	// subscription is already confirmed, the first attempt joins the wait
	// queue at once; otherwise it only tries, and the waiter subscribes
	// before it queues (subscribe, then retry: a release in between is seen
	// by the retry).
	var wake chan struct{}
	queued := false
	if o.wait > 0 {
		wake = make(chan struct{}, 1)
		defer c.register(token, wake)()
		queued = c.subscribed()
	}
	firstWait := time.Duration(0)
	if queued {
		firstWait = o.wait
	}
	a, err := c.attempt(ctx, nm, token, mode, ttl, firstWait)
	if err != nil {
		return nil, c.failed(ctx, nm, token, mode, queued, err)
	}
	if a.ok {
		return c.newLock(key, nm, token, mode, ttl, a, start, o), nil
	}
	if o.wait == 0 {
		return nil, ErrNotObtained
	}

	if testHookAfterFirstAttempt != nil {
		testHookAfterFirstAttempt()
	}
	deadline := start.Add(o.wait)
	if !queued {
		subCtx, cancel := context.WithDeadline(ctx, deadline)
		err := c.subscribe(subCtx)
		cancel()
		if err != nil && (errors.Is(err, notify.ErrClosed) || ctx.Err() != nil) {
			return nil, c.failed(ctx, nm, token, mode, false, ErrClosed)
		}
		if rerr := redis.Error(nil); errors.As(err, &rerr) {
			// Redis refused the wake channel (NOPERM): no release could
			// wake this waiter, so waiting would only turn a
			// misconfiguration into ErrNotObtained.
			return nil, c.failed(ctx, nm, token, mode, false, err)
		}
		// Unconfirmed in time: the fallback timer still serves.
	}

	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	var lastErr error
	for {
		if queued {
			// Fallback for a lock that expires (an expiry publishes nothing)
			// or a lost message: retry when the holder's lease ends.
			pause := a.retry
			if pause <= 0 {
				pause = max(ttl/4, time.Millisecond)
			}
			timer.Reset(min(pause, max(time.Until(deadline), 0)))
			select {
			case <-wake:
				if !timer.Stop() {
					<-timer.C
				}
			case <-timer.C:
			case <-ctx.Done():
				c.leaveQueue(nm, token)
				return nil, errors.Join(ErrNotObtained, ctx.Err())
			}
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			if queued {
				c.leaveQueue(nm, token)
			}
			if lastErr != nil {
				return nil, lastErr
			}
			return nil, ErrNotObtained
		}
		queued = true
		var err error
		a, err = c.attempt(ctx, nm, token, mode, ttl, remaining)
		switch {
		case err != nil && len(c.nodes) > 1 && errors.Is(err, ErrNotObtained) && ctx.Err() == nil:
			// Redlock with masters down: keep trying within the wait.
			lastErr = err
		case err != nil:
			return nil, c.failed(ctx, nm, token, mode, true, err)
		case a.ok:
			return c.newLock(key, nm, token, mode, ttl, a, start, o), nil
		}
	}
}

// failed turns an error of an acquire attempt into the caller's error. The
// attempt may have taken the lock before failing (a timeout after the script
// ran), so a token lock is released in the background.
func (c *Client) failed(ctx context.Context, nm names, token, mode string, queued bool, err error) error {
	switch {
	case mode == "t":
		c.background(func(bg context.Context) {
			for _, n := range c.nodes {
				_ = c.release(bg, n, nm, token, "t")
			}
		})
		if queued {
			c.leaveQueue(nm, token)
		}
	case queued:
		c.leaveQueue(nm, token)
	}
	if ctx.Err() != nil {
		return errors.Join(ErrNotObtained, ctx.Err())
	}
	if errors.Is(err, ErrNotObtained) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("lock: obtain: %w", err)
}

// leaveQueue takes a waiter that gives up out of the wait queue, and passes
// on a hand-off reservation a release may have made for it meanwhile.
func (c *Client) leaveQueue(nm names, token string) {
	c.background(func(bg context.Context) {
		for _, n := range c.nodes {
			_ = c.release(bg, n, nm, token, "l")
		}
	})
}

// release runs lock_release.lua on one node: mode "t" or "r" releases, "l"
// leaves the wait queue.
func (c *Client) release(ctx context.Context, n *node, nm names, token, mode string) error {
	_, err := c.releaseRun(ctx, n, nm, token, mode)
	return err
}

func (c *Client) releaseRun(ctx context.Context, n *node, nm names, token, mode string) (int64, error) {
	return scripts.LockRelease.Run(ctx, n.rdb, []string{nm.lock, nm.queue},
		token, mode, ms(c.opts.HandoffTimeout), c.trust, c.channel).Int64()
}

func (c *Client) background(f func(context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.CleanupTimeout)
		defer cancel()
		f(ctx)
	}()
}

// register routes wake-ups for token from every node to wake.
func (c *Client) register(token string, wake chan struct{}) (unregister func()) {
	unregs := make([]func(), len(c.nodes))
	for i, n := range c.nodes {
		unregs[i] = n.hub.Register(token, wake)
	}
	return func() {
		for _, u := range unregs {
			u()
		}
	}
}

// subscribed reports whether every node confirmed this Client's wake channel.
func (c *Client) subscribed() bool {
	for _, n := range c.nodes {
		if !n.hub.Subscribed() {
			return false
		}
	}
	return true
}

// subscribe subscribes the wake channel on every node and waits for the
// confirmations, up to ctx.
func (c *Client) subscribe(ctx context.Context) error {
	_, errs := fanout(ctx, c.nodes, time.Hour, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.hub.Ready(ctx)
	})
	return errors.Join(errs...)
}

// attempt is the outcome of one acquire round on every node.
type attempt struct {
	ok       bool
	fence    int64
	holds    int64
	validity time.Duration // when ok: how long the lock is known held
	retry    time.Duration // when busy: remaining lease of the holder
}

func (c *Client) attempt(ctx context.Context, nm names, token, mode string, ttl, wait time.Duration) (attempt, error) {
	start := time.Now()
	keys := []string{nm.lock, nm.fence, nm.queue}
	replies, errs := fanout(ctx, c.nodes, c.nodeTimeout(ttl), func(ctx context.Context, n *node) ([]int64, error) {
		v, err := scripts.LockAcquire.Run(ctx, n.rdb, keys, token, ms(ttl), mode, ms(wait), ms(c.opts.FenceRetention), c.channel).Int64Slice()
		if err == nil && len(v) != 3 {
			err = fmt.Errorf("lock: unexpected acquire reply %v", v)
		}
		return v, err
	})
	var a attempt
	granted, busy := 0, 0
	var failures []error
	for i, v := range replies {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i])
		case v[0] == 1:
			granted++
			a.fence = max(a.fence, v[1])
			a.holds = max(a.holds, v[2])
		default:
			busy++
			r := time.Duration(v[1]) * time.Millisecond
			if v[1] == 0 || v[1] == -2 {
				// Under a millisecond left (PTTL rounds down), or gone by
				// now: retry at once rather than fall back to ttl/4.
				r = time.Millisecond
			}
			if busy == 1 || r < a.retry {
				a.retry = r
			}
		}
	}
	a.validity = ttl - time.Since(start) - c.drift(ttl)
	if granted >= c.quorum && a.validity > 0 {
		a.ok = true
		return a, nil
	}
	if granted > 0 {
		// Not enough of the masters, or too late: give back what we got.
		c.background(func(bg context.Context) {
			for i, n := range c.nodes {
				if errs[i] == nil && replies[i][0] == 1 {
					_ = c.release(bg, n, nm, token, mode)
				}
			}
		})
	}
	if len(failures) > 0 && busy < c.quorum && len(c.nodes)-busy-len(failures) < c.quorum {
		// Failures, not holders, kept us from a quorum.
		if len(c.nodes) == 1 {
			return a, failures[0]
		}
		return a, errors.Join(ErrNotObtained, fmt.Errorf("%d of %d masters failed: %w", len(failures), len(c.nodes), errors.Join(failures...)))
	}
	return a, nil
}

func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.opts.DriftFactor) + 2*time.Millisecond
}

// nodeTimeout bounds each master's reply in Redlock mode, so one slow master
// cannot eat the lease (the Redlock paper's "small compared to the TTL").
func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// fanout runs f on every node: inline for one node, concurrently for several,
// each bounded by timeout.
func fanout[T any](ctx context.Context, nodes []*node, timeout time.Duration, f func(context.Context, *node) (T, error)) ([]T, []error) {
	out := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	if len(nodes) == 1 {
		out[0], errs[0] = f(ctx, nodes[0])
		return out, errs
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i], errs[i] = f(nctx, n)
		}()
	}
	wg.Wait()
	return out, errs
}

func (c *Client) newLock(key string, nm names, token, mode string, ttl time.Duration, a attempt, start time.Time, o obtainOptions) *Lock {
	l := &Lock{
		c: c, key: key, nm: nm, token: token, mode: mode,
		fence: a.fence, holds: a.holds, obtained: time.Now(), ttl: ttl,
		lost: make(chan struct{}),
	}
	l.expiry = time.AfterFunc(a.validity, func() { l.markLost() })
	if h := c.opts.Hooks.Obtained; h != nil {
		h(key, a.fence, time.Since(start))
	}
	if o.autoRenew {
		l.wdStop, l.wdDone = make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		l.wdCancel = cancel
		go l.watchdog(ctx)
	}
	return l
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on a broken system source)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ms converts d to whole milliseconds for Redis, rounding a positive
// sub-millisecond duration up to 1.
func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if m == 0 && d > 0 {
		m = 1
	}
	return m
}
