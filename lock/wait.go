package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/notify"
)

// testHookAfterFirstAttempt, when set by a test, runs between a waiter's
// first failed attempt and its subscription: the window a release must not
// be lost in.
var testHookAfterFirstAttempt func()

// wait obtains r's lock, waiting up to r.opts.wait for a busy lock.
//
// A waiter registers its wake channel before its first attempt, so a
// release right after that attempt finds it. When this Client's
// subscription is already confirmed, the first attempt joins the wait queue
// at once; otherwise it only tries, and the waiter subscribes before it
// queues (subscribe, then retry: a release in between is seen by the retry).
func (c *Client) wait(ctx context.Context, r *request) (*Lock, error) {
	r.waiter = newToken()
	wake := make(chan struct{}, 1)
	defer c.register(r.waiter, wake)()
	queued := c.subscribed()
	firstWait := time.Duration(0)
	if queued {
		firstWait = r.opts.wait
	}
	a, err := c.attempt(ctx, r, firstWait, r.start)
	switch {
	case err != nil:
		return nil, c.failed(ctx, r, a.id, queued, err)
	case a.ok:
		return c.won(r, a, queued)
	}
	if testHookAfterFirstAttempt != nil {
		testHookAfterFirstAttempt()
	}
	deadline := r.start.Add(r.opts.wait)
	if !queued {
		if err := c.subscribeUntil(ctx, deadline); err != nil {
			return nil, c.failed(ctx, r, "", false, err)
		}
	}
	return c.waitLoop(ctx, r, wake, queued, a.retry, deadline)
}

// waitLoop retries r's acquire, queued, each time the waiter is woken or its
// fallback timer fires, until it obtains the lock or the wait ends.
func (c *Client) waitLoop(ctx context.Context, r *request, wake <-chan struct{}, queued bool, retry time.Duration, deadline time.Time) (*Lock, error) {
	timer := time.NewTimer(time.Hour) // Reset below; Go 1.23 timers need no draining
	defer timer.Stop()
	var lastErr error
	for {
		if queued {
			if err := c.pause(ctx, r, timer, wake, retry, deadline); err != nil {
				return nil, err
			}
		}
		now := time.Now()
		remaining := deadline.Sub(now)
		if remaining <= 0 {
			if queued {
				c.leaveQueueNow(r)
			}
			if lastErr != nil {
				return nil, opError("obtain", ctx, lastErr)
			}
			return nil, ErrNotObtained
		}
		if c.isClosed() {
			if queued {
				c.leaveQueue(r)
			}
			return nil, ErrClosed
		}
		queued = true
		a, err := c.attempt(ctx, r, remaining, now)
		var qe *quorumError
		switch {
		case err != nil && errors.As(err, &qe) && ctx.Err() == nil:
			// Redlock with masters down: keep trying within the wait.
			lastErr = err
		case err != nil:
			return nil, c.failed(ctx, r, a.id, true, err)
		case a.ok:
			return c.won(r, a, true)
		default:
			lastErr = nil // busy
		}
		retry = a.retry
	}
}

// won returns the lock a waiter obtained. A Redlock waiter may still be
// queued on masters that said busy, where a later release would reserve
// the lock for it: it leaves those queues (and passes on such
// reservations) in the background. A waiter whose Client was closed while
// it waited gives the lock back and returns ErrClosed: the caller never
// gets a lock from a closed Client's wait.
func (c *Client) won(r *request, a attempt, queued bool) (*Lock, error) {
	if c.isClosed() {
		return nil, c.failed(context.Background(), r, a.id, queued, ErrClosed)
	}
	if queued && len(c.nodes) > 1 {
		c.leaveQueue(r)
	}
	return c.newLock(r, a), nil
}

// pause waits for a wake-up, or for the fallback timer: a lock that expires
// publishes nothing, and a message can be lost, so a queued waiter also
// retries when the holder's lease (retry) ends. It returns the caller's
// error when ctx ends first, and ErrClosed when the Client is closed,
// having left the queue.
func (c *Client) pause(ctx context.Context, r *request, timer *time.Timer, wake <-chan struct{}, retry time.Duration, deadline time.Time) error {
	if retry <= 0 {
		retry = max(r.ttl/4, time.Millisecond)
	}
	timer.Reset(min(retry, max(time.Until(deadline), 0)))
	select {
	case <-wake:
	case <-timer.C:
	case <-ctx.Done():
		c.leaveQueueNow(r)
		return errors.Join(ErrNotObtained, ctx.Err())
	case <-c.closed:
		c.leaveQueue(r)
		return ErrClosed
	}
	return nil
}

// subscribeUntil confirms this Client's wake channel (on a quorum of the
// masters of a Redlock) before a waiter first queues. Unconfirmed by
// deadline is no error: the fallback timer still serves. A closed Client,
// the caller's ctx ending during the subscription (Redis did not confirm
// in time), or Redis refusing the channel (NOPERM: no release could wake
// the waiter, so waiting would only turn a misconfiguration into
// ErrNotObtained) are.
func (c *Client) subscribeUntil(ctx context.Context, deadline time.Time) error {
	subCtx, cancel := context.WithDeadline(ctx, deadline)
	err := c.subscribe(subCtx)
	cancel()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, notify.ErrClosed) || c.isClosed():
		return ErrClosed
	case ctx.Err() != nil:
		return fmt.Errorf("subscribe: %w", err)
	}
	if rerr := redis.Error(nil); errors.As(err, &rerr) {
		return err
	}
	return nil
}

// leaveQueueNow is leaveQueue for a waiter that gives up, done before its
// caller is told: left in the background, the waiter was still queued
// when the caller, told it failed, released or retried, and a release
// then reserved the lock for the departed waiter (HandoffTimeout, the
// lock refused to everyone meanwhile). Each node gets nodeTimeout; one
// that has not answered by then is left in the background, as before.
func (c *Client) leaveQueueNow(r *request) {
	d := c.nodeTimeout(r.ttl)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, errs := fanout(ctx, c.nodes, d, func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, c.release(ctx, n, r.nm, r.waiter, "l")
	})
	var left []*node
	for i, err := range errs {
		if err != nil {
			left = append(left, c.nodes[i])
		}
	}
	if len(left) > 0 {
		c.leaveQueueOn(r, left)
	}
}

// leaveQueue takes a waiter that gives up out of the wait queue, and passes
// on a hand-off reservation a release may have made for it meanwhile.
func (c *Client) leaveQueue(r *request) { c.leaveQueueOn(r, c.nodes) }

// leaveQueueOn is leaveQueue on the given nodes, in the background.
func (c *Client) leaveQueueOn(r *request, nodes []*node) {
	c.background(func(bg context.Context) {
		for _, n := range nodes {
			_ = c.release(bg, n, r.nm, r.waiter, "l")
		}
	})
}

// register routes wake-ups for the waiter id from every node to wake.
func (c *Client) register(waiter string, wake chan struct{}) (unregister func()) {
	unregs := make([]func(), len(c.nodes))
	for i, n := range c.nodes {
		unregs[i] = n.hub.Register(waiter, wake)
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

// subscribe subscribes the wake channel on every node and waits, up to
// ctx, for the confirmations of a quorum of them: a waiter can obtain a
// Redlock lock only from a quorum of masters, and one master down or
// frozen (which may never confirm) must not hold every wait to its end.
// The subscriptions of the others go on in the background; until they are
// confirmed, a release on their master publishes to nobody, and the
// waiter's fallback timer serves there.
func (c *Client) subscribe(ctx context.Context) error {
	if len(c.nodes) == 1 {
		return c.nodes[0].hub.Ready(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replies := make(chan error, len(c.nodes)) // buffered: none blocks after we return
	for _, n := range c.nodes {
		go func() { replies <- n.hub.Ready(ctx) }()
	}
	confirmed := 0
	var errs []error
	for range c.nodes {
		err := <-replies
		if err == nil {
			if confirmed++; confirmed >= c.quorum {
				return nil
			}
			continue
		}
		if errs = append(errs, err); len(c.nodes)-len(errs) < c.quorum {
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...) // not reached: a quorum either confirmed or could not
}
