package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"
)

// Obtain takes the lock named key for ttl (at least MinTTL). It returns
// ErrNotObtained when the lock is busy (after waiting, with WaitFor), and
// another error when Redis failed or did not answer in time (see the
// package doc's Errors). Each lock gets a random token; its fencing number
// is minted when first asked for (Lock.Fence).
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	return c.obtain(ctx, key, "", ttl, opts)
}

// ObtainReentrant takes one hold of the reentrant lock named key for owner,
// with a lease of its own of ttl (at least MinTTL). The owner may take more
// holds while it holds the lock; other owners are kept out as long as any
// of the owner's holds lives: until each is released or its own lease ends.
// Each hold's Release, Refresh and TTL act on that hold alone, and its Lost
// closes when that hold ends. All holds of one owner share one fencing
// number while the owner keeps the lock. Go has no thread identity, so the
// owner id is explicit: use one per logical owner (a request, a job, a
// process). See the package doc for the model.
func (c *Client) ObtainReentrant(ctx context.Context, key, owner string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	if owner == "" {
		return nil, errors.New("lock: empty owner")
	}
	return c.obtain(ctx, key, owner, ttl, opts)
}

// request is one Obtain call: what every step of it needs.
type request struct {
	key    string
	nm     names
	owner  string // the reentrant owner; "" for a token lock
	waiter string // random id the caller waits under (queue, wake-ups, hand-off); "" without WaitFor
	mode   string // "t" token lock, "r" reentrant
	ttl    time.Duration
	opts   obtainOptions
	start  time.Time
}

func validate(key string, ttl, wait time.Duration) error {
	switch {
	case key == "":
		return errors.New("lock: empty key")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("lock: key of %d bytes exceeds MaxKeyBytes (%d)", len(key), MaxKeyBytes)
	case wait < 0:
		return fmt.Errorf("lock: negative WaitFor %v", wait)
	}
	return validateTTL(ttl)
}

func validateTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("lock: ttl %v is below MinTTL (%v)", ttl, MinTTL)
	}
	return nil
}

// newRequest checks an Obtain call and describes it; owner "" asks for a
// token lock.
func (c *Client) newRequest(ctx context.Context, key, owner string, ttl time.Duration, opts []ObtainOption) (*request, error) {
	if ctx == nil {
		return nil, errors.New("lock: nil context")
	}
	r := &request{key: key, owner: owner, mode: "r", ttl: ttl}
	for _, opt := range opts {
		opt(&r.opts)
	}
	if err := validate(key, ttl, r.opts.wait); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		// Not ErrNotObtained: nobody asked Redis whether the lock is busy.
		return nil, fmt.Errorf("lock: obtain: %w", err)
	}
	if owner == "" {
		r.mode = "t"
	}
	r.nm = c.names(key)
	r.start = time.Now()
	return r, nil
}

func (c *Client) obtain(ctx context.Context, key, owner string, ttl time.Duration, opts []ObtainOption) (*Lock, error) {
	r, err := c.newRequest(ctx, key, owner, ttl, opts)
	if err != nil {
		return nil, err
	}
	if r.opts.wait > 0 {
		return c.wait(ctx, r)
	}
	a, err := c.attempt(ctx, r, 0, r.start)
	switch {
	case err != nil:
		return nil, c.failed(ctx, r, a.id, false, err)
	case !a.ok:
		return nil, ErrNotObtained
	}
	return c.newLock(r, a), nil
}

// attempt is the outcome of one acquire round on every node.
type attempt struct {
	id       string // the lock's token or the hold's id, random for each attempt
	ok       bool
	fence    int64 // a reentrant owner's number, if it has one yet
	holds    int64
	start    time.Time     // when the round started
	at       time.Time     // when the replies were in
	validity time.Duration // when ok: how long from at the lock is known held
	retry    time.Duration // when busy: remaining lease of the holder
}

// attempt tries to take r's lock once on every node, starting now (a
// reading of the clock the caller took anyway: reading it costs); wait > 0
// joins the wait queue where the lock is busy.
//
// Each attempt takes the lock under a new random id, so that giving back
// what one attempt got (in the background, after a partial Redlock round
// or a failure) can never release what a later attempt of the same call
// got, and an attempt the Redis client retries after a lost reply finds its
// own grant.
func (c *Client) attempt(ctx context.Context, r *request, wait time.Duration, start time.Time) (attempt, error) {
	id := newToken()
	if len(c.nodes) == 1 {
		// Inline, without fanout's closure and result slices: the
		// uncontended lock is this package's hot path.
		var replies [1]reply
		var errs [1]error
		replies[0], errs[0] = c.try(ctx, c.nodes[0], r, id, wait)
		return c.settle(r, id, start, replies[:], errs[:])
	}
	replies, errs := fanout(ctx, c.nodes, c.nodeTimeout(r.ttl), func(ctx context.Context, n *node) (reply, error) {
		return c.try(ctx, n, r, id, wait)
	})
	return c.settle(r, id, start, replies, errs)
}

// settle turns the replies of an acquire round that started at start into
// its outcome, and gives back what a failed round got. The error is nil
// when the lock was obtained or is busy.
func (c *Client) settle(r *request, id string, start time.Time, replies []reply, errs []error) (attempt, error) {
	a, granted, err := c.tally(replies, errs)
	a.id = id
	a.start, a.at = start, time.Now()
	a.validity = r.ttl - a.at.Sub(start) - c.drift(r.ttl)
	if granted >= c.quorum {
		if a.validity > 0 {
			a.ok = true
			return a, nil
		}
		// Granted, but Redis answered too late for the lease to be of use:
		// Redis was slow, the lock was not busy.
		err = fmt.Errorf("the lease of %v ran out before Redis granted it (after %v)", r.ttl, a.at.Sub(start).Round(time.Millisecond))
	}
	if granted > 0 {
		// Not enough of the masters, or too late: give back what we got.
		var got []*node
		for i, n := range c.nodes {
			if errs[i] == nil && replies[i][0] == 1 {
				got = append(got, n)
			}
		}
		c.background(func(bg context.Context) {
			for _, n := range got {
				_ = c.release(bg, n, r.nm, id, r.mode)
			}
		})
	}
	return a, err
}

// reply is a node's answer to an acquire, as lock_acquire.lua gives it:
// {1, fence, holds} when obtained, {0, pttl, 0} when busy.
type reply [3]int64

// try runs one acquire on one node.
//
// A token lock that will not join the wait queue is taken with a plain
// SET NX PX, the cheapest write Redis has: its token is fresh, so no
// hand-off reservation can be waiting for it, and the fencing number is
// minted later, by Lock.Fence, if the holder asks. Every other case (joining
// the queue, a reservation made for a queued waiter, reentrant holds) runs
// the acquire script.
func (c *Client) try(ctx context.Context, n *node, r *request, id string, wait time.Duration) (reply, error) {
	if r.mode == "t" && wait == 0 {
		// SET NX GET: the value found tells a holder's token from this
		// attempt's own, set by a first try whose reply was lost and that
		// the client sent again.
		old, err := n.rdb.SetArgs(ctx, r.nm.lock, id, redis.SetArgs{Mode: "NX", Get: true, TTL: r.ttl}).Result()
		switch {
		case errors.Is(err, redis.Nil), err == nil && old == id:
			return reply{1, 0, 1}, nil
		case err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE"):
			return reply{}, err
		}
		// Busy (a reentrant hold's hash under the name is busy too); the
		// holder's lease is not needed without a wait.
		return reply{0, -1, 0}, nil
	}
	args := []any{id, ms(r.ttl), modeArg(r.mode), ms(wait), c.channelArg, r.waiter}
	if r.mode == "r" {
		args = append(args, r.owner)
	}
	v, err := lua.LockAcquire.Run(ctx, n.rdb, []string{r.nm.lock, r.nm.queue}, args...).Int64Slice()
	if err == nil && len(v) != 3 {
		err = fmt.Errorf("lock: unexpected acquire reply %v", v)
	}
	if err != nil {
		return reply{}, err
	}
	return reply(v), nil
}

// tally sums the replies of an acquire round: the nodes that granted the
// lock, the shortest lease among the busy ones, and the error to report when
// failures, not holders, kept the round from a quorum.
//
// The lock is busy when a quorum of nodes says so, or when no node failed
// (a split among contenders). When nodes failed and the others do not add
// up to a quorum either way, the outcome is unknown: an error, as from a
// single node that failed.
func (c *Client) tally(replies []reply, errs []error) (attempt, int, error) {
	var a attempt
	granted, busy := 0, 0
	var failures []error
	// What each granting master says of the owner's holds: its number and
	// how many holds it counts. A master a Release missed (a minority: a
	// Release needs a quorum) still holds the owner's previous holds and
	// number, though another owner may have held the lock since with a
	// larger one: only what a quorum says is the owner's.
	type view struct{ fence, holds int64 }
	var views map[view]int
	for i, v := range replies {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i])
		case v[0] == 1:
			granted++
			if views == nil {
				views = make(map[view]int, len(replies))
			}
			views[view{v[1], v[2]}]++
		default:
			busy++
			retry := time.Duration(v[1]) * time.Millisecond
			if v[1] == 0 || v[1] == -2 {
				// Under a millisecond left (PTTL rounds down), or gone by
				// now: retry at once rather than fall back to ttl/4.
				retry = time.Millisecond
			}
			if busy == 1 || retry < a.retry {
				a.retry = retry
			}
		}
	}
	if granted > 0 {
		// No view of a quorum: the holds are new (the fewest counted), and
		// the number is minted anew on the first Fence, larger than every
		// number minted before.
		a.fence, a.holds = 0, math.MaxInt64
		for w, n := range views {
			if n >= c.quorum {
				a.fence, a.holds = w.fence, w.holds
				break
			}
			a.holds = min(a.holds, w.holds)
		}
	}
	if len(failures) == 0 || granted >= c.quorum || busy >= c.quorum {
		return a, granted, nil
	}
	if len(c.nodes) == 1 {
		return a, granted, failures[0]
	}
	return a, granted, &quorumError{failed: len(failures), of: len(c.nodes), err: errors.Join(failures...)}
}

// quorumError reports a Redlock round that missed its quorum because
// masters failed, not because the lock was busy.
type quorumError struct {
	failed, of int
	err        error
}

func (e *quorumError) Error() string {
	return fmt.Sprintf("%d of %d masters failed: %v", e.failed, e.of, e.err)
}

func (e *quorumError) Unwrap() error { return e.err }

// failed turns an error of an acquire attempt into the caller's error. The
// attempt may have taken the lock (or a hold) before failing (a timeout
// after the write ran), so what it may hold is released in the background;
// the random id makes that release touch nothing else.
func (c *Client) failed(ctx context.Context, r *request, id string, queued bool, err error) error {
	if id != "" {
		c.background(func(bg context.Context) {
			for _, n := range c.nodes {
				_ = c.release(bg, n, r.nm, id, r.mode)
			}
		})
	}
	if queued {
		c.leaveQueue(r)
	}
	if errors.Is(err, ErrClosed) {
		return err
	}
	return opError("obtain", ctx, err)
}

// opError describes the failure of a Redis call made for op, adding the
// caller's context error when ctx ended (the Redis client reports a
// deadline that cut a call short as an I/O timeout), so that errors.Is
// finds context.DeadlineExceeded or context.Canceled.
func opError(op string, ctx context.Context, err error) error {
	cause := ctx.Err()
	if cause == nil {
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			cause = context.DeadlineExceeded // the timer has yet to mark ctx
		}
	}
	if cause == nil || errors.Is(err, cause) {
		return fmt.Errorf("lock: %s: %w", op, err)
	}
	return fmt.Errorf("lock: %s: %w (%w)", op, cause, err)
}

// release runs lock_release.lua on one node for the lock, hold or waiter
// id: mode "t" or "r" releases, "l" leaves the wait queue.
func (c *Client) release(ctx context.Context, n *node, nm names, id, mode string) error {
	_, err := c.releaseRun(ctx, n, nm, id, mode)
	return err
}

func (c *Client) releaseRun(ctx context.Context, n *node, nm names, id, mode string) (int64, error) {
	keys := []string{nm.lock, nm.queue}
	if mode != "l" {
		return lua.LockRelease.Run(ctx, n.rdb, keys, id, modeArg(mode), c.handoffArg, c.trustArg).Int64()
	}
	return lua.LockRelease.Run(ctx, n.rdb, keys, id, "l", c.handoffArg, c.trustArg, c.channelArg).Int64()
}

func (c *Client) newLock(r *request, a attempt) *Lock {
	token := a.id
	if r.mode == "r" {
		token = r.owner
	}
	l := &Lock{
		c: c, key: r.key, nm: r.nm, id: a.id, token: token, mode: r.mode,
		fence: a.fence, holds: a.holds, obtained: a.at, ttl: r.ttl,
		validUntil: a.at.Add(a.validity), renewedAt: a.start, lost: make(chan struct{}),
		renewing: make(chan struct{}, 1),
	}
	if c.opts.Hooks.Lost != nil || r.opts.autoRenew {
		l.armLocked() // l is not shared yet
	}
	if h := c.opts.Hooks.Obtained; h != nil {
		h(r.key, a.fence, a.at.Sub(r.start))
	}
	if r.opts.autoRenew {
		l.wdStop, l.wdDone = make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		l.wdCancel = cancel
		if c.watch(l) {
			go l.watchdog(ctx)
		} else {
			// Close has begun and stops every watchdog: this one never
			// starts, and the lease runs out.
			close(l.wdDone)
		}
	}
	return l
}
