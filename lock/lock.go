package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/lua"
)

// Lock is one held lock (or one hold of a reentrant lock). Its methods are
// safe for concurrent use.
type Lock struct {
	c        *Client
	key      string
	nm       names
	id       string // what the scripts know it by: the token, or the hold's id
	token    string // Token: the token, or the reentrant owner
	mode     string // "t" token lock, "r" reentrant
	holds    int64
	obtained time.Time

	fenceMu sync.Mutex // held while minting, so one handle mints once
	fence   int64      // 0 until known

	// renewing is held by the one renewal (Refresh, watchdog) or Release
	// in flight. Concurrent renewals could run in Redis in another order
	// than their replies arrive, and the handle would trust a lease Redis
	// did not keep; one at a time, a reply's order is Redis's. A renewal or
	// a second Release that Redis ran after a Release would find the lock
	// gone and report a lock that was released as lost.
	renewing chan struct{}

	mu         sync.Mutex
	ttl        time.Duration
	released   bool
	releasing  bool        // a Release is in flight: a "not held" may be its doing
	goneSeen   bool        // TTL or Fence found the lock gone while releasing
	validUntil time.Time   // the lease is known valid until then
	expiry     *time.Timer // closes lost at validUntil; nil until armed
	renewedAt  time.Time   // start of the call that set the lease validUntil counts on
	// unsure is the shortest lease asked for by a Refresh whose outcome is
	// unknown (it failed without a reply), or 0. Such a call may still run
	// in Redis at any later time, after a Refresh that succeeded, and leave
	// its lease: no later renewal is trusted for longer.
	unsure time.Duration

	lost     chan struct{}
	lostOnce sync.Once
	lostAt   time.Time // when lost was closed by a loss; read after <-lost

	wdStop, wdDone chan struct{} // nil without AutoRenew
	wdCancel       context.CancelFunc
	wdOnce         sync.Once
}

// Token returns the random token of a token lock, or the owner id of a
// reentrant lock (shared by all its holds; each hold also has a random id
// of its own, which the handle keeps).
func (l *Lock) Token() string { return l.token }

// Holds returns how many live holds the owner had right after this
// acquisition, this one included: always 1 for a token lock.
func (l *Lock) Holds() int64 { return l.holds }

// Lost returns a channel that is closed when this handle no longer holds the
// lock (for a reentrant hold: when this hold no longer keeps other owners
// out): its lease, as far as this process can know it, ran out without
// renewal; the watchdog, Refresh, TTL or Fence found it gone; or it was
// released. It closes no later than the lock could pass to another owner,
// barring data lost by Redis (a restart without persistence, a failover).
// Work protected by the lock should stop when it closes.
func (l *Lock) Lost() <-chan struct{} {
	l.mu.Lock()
	l.armLocked()
	l.mu.Unlock()
	return l.lost
}

// armLocked starts the timer that closes lost when the lease runs out,
// unless it runs already or the handle was released. A timer costs about
// as much as the rest of an uncontended Obtain's client-side work, so it
// starts only once something can see it fire: Lost, Hooks.Lost or the
// watchdog. Until then isLost reads the clock instead.
func (l *Lock) armLocked() {
	if l.expiry == nil && !l.released {
		l.expiry = time.AfterFunc(time.Until(l.validUntil), l.markLost)
	}
}

// leaseLocked is how long a renewal of ttl that started at start keeps
// the lease known valid: ttl capped by unsure, minus the drift allowance.
func (l *Lock) leaseLocked(start time.Time, ttl time.Duration) time.Time {
	if l.unsure > 0 && l.unsure < ttl {
		ttl = l.unsure
	}
	return start.Add(ttl - l.c.drift(ttl))
}

// extend records a renewal of ttl, made by a call that started at start,
// before the lease was known to have run out. It reports false when the
// lease ran out (or the handle was released) while the call was under way,
// or when the renewal came too late to be of use: the handle then stays
// lost, as its timer may already have closed Lost.
func (l *Lock) extend(start time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	now := time.Now()
	until := l.leaseLocked(start, ttl)
	if l.released || !now.Before(l.validUntil) || !now.Before(until) || isClosed(l.lost) {
		l.mu.Unlock()
		l.isLost() // marks it lost if the timer has not yet
		return false
	}
	l.validUntil, l.renewedAt = until, start
	if l.expiry != nil {
		l.expiry.Reset(time.Until(until))
	}
	l.mu.Unlock()
	return true
}

// sending records a renewal of ttl about to be sent at start: Redis may run
// it and set its lease however the call ends for the caller (a late reply,
// a timeout), so from now on the lease is known valid only until the
// earlier of the old and the new ends.
func (l *Lock) sending(start time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shortenLocked(l.leaseLocked(start, ttl))
}

// unresolved records that a renewal of ttl failed without a reply on at
// least one node: it may still run later, even after a later renewal that
// succeeds (also one under way now), and leave a lease of ttl from then.
// So no renewal is trusted for longer than ttl from its start, the one the
// lease counts on now included.
func (l *Lock) unresolved(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsure == 0 || ttl < l.unsure {
		l.unsure = ttl
	}
	l.shortenLocked(l.leaseLocked(l.renewedAt, ttl))
}

func (l *Lock) shortenLocked(until time.Time) {
	if until.Before(l.validUntil) {
		l.validUntil = until
		if l.expiry != nil {
			l.expiry.Reset(time.Until(until))
		}
	}
}

func (l *Lock) closeLost(lost bool) {
	l.lostOnce.Do(func() {
		if lost {
			l.lostAt = time.Now()
		}
		if h := l.c.opts.Hooks.Lost; lost && h != nil {
			h(l.key)
		}
		close(l.lost)
	})
}

func (l *Lock) markLost() { l.closeLost(true) }

// gone records that Redis answered that the handle does not hold the lock,
// and closes Lost as a loss: unless the handle was released, or a Release
// is in flight, which may have caused the answer (a TTL or Fence that Redis
// ran after the release). Such a Release decides.
func (l *Lock) gone() {
	l.mu.Lock()
	if l.released || l.releasing {
		l.goneSeen = true
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.markLost()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// isLost reports whether the handle is known to have lost the lock,
// marking it lost when its lease ran out with no timer armed to see it.
func (l *Lock) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
	}
	l.mu.Lock()
	expired := !time.Now().Before(l.validUntil)
	l.mu.Unlock()
	if expired {
		l.markLost()
	}
	return expired
}

// Release releases the lock (this hold, for a reentrant lock: the lock is
// free, and one waiter woken, once no hold of the owner lives) and closes
// Lost. It stops the watchdog first and waits for it, so no renewal runs
// after Release returns, and it waits, up to ctx, for a Refresh or another
// Release of the handle in flight: a lock released by one Release is not
// reported lost (Hooks.Lost) by a concurrent call. It returns ErrNotHeld,
// changing nothing in Redis, when the lock (the hold) was no longer ours:
// released before, or its lease over.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return errors.New("lock: nil context")
	}
	l.stopWatchdog()
	select {
	case l.renewing <- struct{}{}:
	case <-ctx.Done():
		return opError("release", ctx, ctx.Err())
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		<-l.renewing
		return ErrNotHeld
	}
	l.releasing = true
	l.mu.Unlock()

	released, failures := l.releaseEverywhere(ctx)
	l.mu.Lock()
	l.releasing = false
	seen := l.goneSeen
	l.goneSeen = false
	unknown := released < l.c.quorum && released+len(failures) >= l.c.quorum
	if !unknown {
		l.released = true
		if l.expiry != nil {
			l.expiry.Stop()
		}
	}
	l.mu.Unlock()
	<-l.renewing // given back before the hooks below run
	switch {
	case unknown:
		// Unknown outcome: the caller may retry Release.
		if seen {
			l.markLost() // Redis said, meanwhile, that the lock is gone
		}
		return opError("release", ctx, errors.Join(failures...))
	case released < l.c.quorum:
		l.markLost()
		return ErrNotHeld
	}
	l.closeLost(false)
	if h := l.c.opts.Hooks.Released; h != nil {
		h(l.key, time.Since(l.obtained))
	}
	return nil
}

// releaseEverywhere runs lock_release.lua on every node and counts the
// nodes that released the lock, and the failures.
func (l *Lock) releaseEverywhere(ctx context.Context) (released int, failures []error) {
	count := func(r int64, err error) {
		switch {
		case err != nil:
			failures = append(failures, err)
		case r >= 0:
			released++
		}
	}
	if len(l.c.nodes) == 1 {
		// Inline, without fanout's closure and result slices: the
		// uncontended lock is this package's hot path.
		count(l.c.releaseRun(ctx, l.c.nodes[0], l.nm, l.id, l.mode))
		return released, failures
	}
	replies, errs := fanout(ctx, l.c.nodes, l.nodeTimeout(), func(ctx context.Context, n *node) (int64, error) {
		return l.c.releaseRun(ctx, n, l.nm, l.id, l.mode)
	})
	for i, r := range replies {
		count(r, errs[i])
	}
	return released, failures
}

// Refresh sets the lease of a held lock (of this hold, for a reentrant
// lock) to ttl from now; ttl may be shorter than the lease left, but not
// below MinTTL. It returns ErrNotHeld, changing nothing, when the lock is
// no longer ours (also when a concurrent Release released it first).
// Renewals of one handle run one at a time: Refresh waits, up to ctx, for a
// renewal in flight (another Refresh, the watchdog's) or a Release.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return errors.New("lock: nil context")
	}
	if err := validateTTL(ttl); err != nil {
		return err
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released || l.isLost() {
		return ErrNotHeld
	}
	if err := l.refresh(ctx, ttl); err != nil {
		return err
	}
	l.mu.Lock()
	l.ttl = ttl
	l.mu.Unlock()
	return nil
}

func (l *Lock) refresh(ctx context.Context, ttl time.Duration) error {
	select {
	case l.renewing <- struct{}{}:
	case <-ctx.Done():
		return opError("refresh", ctx, ctx.Err())
	}
	defer func() { <-l.renewing }()
	if l.isReleased() {
		return ErrNotHeld // by a Release that ran first
	}
	start := time.Now()
	l.sending(start, ttl)
	keys := []string{l.nm.lock, l.nm.fence()}
	replies, errs := fanout(ctx, l.c.nodes, l.c.nodeTimeout(ttl), func(ctx context.Context, n *node) (int64, error) {
		return lua.LockRefresh.Run(ctx, n.rdb, keys, l.id, ms(ttl), ms(l.c.opts.FenceRetention)).Int64()
	})
	held, notHeld, failures := 0, 0, []error(nil)
	for i, r := range replies {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i])
		case r == 1:
			held++
		default:
			notHeld++
		}
	}
	if len(failures) > 0 {
		l.unresolved(ttl)
	}
	switch {
	case held >= l.c.quorum && l.extend(start, ttl):
		return nil
	case len(l.c.nodes)-notHeld < l.c.quorum:
		l.gone()
		return ErrNotHeld
	case len(failures) > 0:
		return opError("refresh", ctx, errors.Join(failures...))
	default:
		return fmt.Errorf("lock: refresh: the lease of %v ran out before Redis renewed it", ttl)
	}
}

// TTL returns the remaining lease of a held lock (of this hold, for a
// reentrant lock) as Redis sees it (the smallest among the masters of a
// Redlock). It returns ErrNotHeld, and closes Lost, when the lock is no
// longer ours.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if ctx == nil {
		return 0, errors.New("lock: nil context")
	}
	replies, errs := fanout(ctx, l.c.nodes, l.nodeTimeout(), func(ctx context.Context, n *node) (int64, error) {
		return lua.LockTTL.Run(ctx, n.rdb, []string{l.nm.lock}, l.id).Int64()
	})
	held, notHeld := 0, 0
	var ttl time.Duration
	var failures []error
	for i, r := range replies {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i])
		case r >= 0:
			d := time.Duration(r) * time.Millisecond
			if held == 0 || d < ttl {
				ttl = d
			}
			held++
		default:
			notHeld++
		}
	}
	switch {
	case held >= l.c.quorum:
		return ttl, nil
	case len(l.c.nodes)-notHeld < l.c.quorum:
		l.gone()
		return 0, ErrNotHeld
	default:
		return 0, opError("ttl", ctx, errors.Join(failures...))
	}
}
