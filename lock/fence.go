package lock

import (
	"context"
	"errors"

	"github.com/stampede-go/stampede/internal/lua"
)

// Fence returns the lock's fencing number. Pass it with every write to the
// protected resource and have the resource reject numbers lower than the
// last it accepted: that, not the lock, stops a holder that lost its lease
// during a pause from overwriting newer data.
//
// The number is minted on the first call, in one round trip that succeeds
// only while the lock is held, so numbers rise in the order of the holds
// that asked for one; a holder that never asks pays nothing. Later calls
// return the same number without a round trip, also after Release. All holds
// of one reentrant owner share one number. Numbers come from a per-key
// counter floored by the Redis clock in microseconds, so they keep
// increasing even if Redis loses the counter.
//
// On a Redlock each master mints a number of its own, and the lock's is the
// largest of a quorum. For a reentrant hold the first call then takes a
// second round trip, which raises the number every master keeps for the
// owner (and its fence counter) to that one; the number is returned once a
// quorum has it, so a later hold of the owner, granted by a quorum, reports
// it too, whichever minority of masters is down. Two cases still differ: a
// hold obtained while that first call is under way may report a number
// from before the raise; a master that ran a mint whose reply was lost
// keeps its own number if it was larger, and a later hold granted by it
// reports that larger number; and a hold whose granting masters do not
// agree, a quorum of them, on the owner's number and holds (a master that
// lost its data, or one a Release missed, which keeps the owner's old
// holds, while others are down) is taken as the owner's first: its
// number is minted anew, larger than every number before, and Holds
// reports the fewest holds a master counted. Were the number taken from
// a master a Release missed, it could be lower than another owner's
// since. When the second round reaches no quorum, FenceContext returns an
// error (Fence 0), and a later call tries again.
//
// Fence returns 0 when it cannot mint a number: the lock was lost or
// released before the first call, or Redis did not answer within
// Options.CleanupTimeout. 0 is below every fencing number, so a resource
// that checks fences refuses it. FenceContext says why.
func (l *Lock) Fence() int64 {
	if f := l.knownFence(); f > 0 {
		return f
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.opts.CleanupTimeout)
	defer cancel()
	f, _ := l.FenceContext(ctx)
	return f
}

// FenceContext is Fence with a context for the first call's round trip and
// an error when no number could be minted: ErrNotHeld when the lock is no
// longer held, a wrapped Redis error otherwise.
func (l *Lock) FenceContext(ctx context.Context) (int64, error) {
	if ctx == nil {
		return 0, errors.New("lock: nil context")
	}
	l.fenceMu.Lock()
	defer l.fenceMu.Unlock()
	if l.fence > 0 {
		return l.fence, nil
	}
	if l.isReleased() || l.isLost() {
		return 0, ErrNotHeld
	}
	f, err := l.mint(ctx)
	if err != nil {
		return 0, err
	}
	l.fence = f
	return f, nil
}

func (l *Lock) knownFence() int64 {
	l.fenceMu.Lock()
	defer l.fenceMu.Unlock()
	return l.fence
}

// mint runs lock_fence.lua on every node and returns the largest number of
// a quorum that found the lock held.
//
// Each master of a Redlock mints (or keeps, for a reentrant owner) a
// number of its own. A reentrant owner's later holds read the number from
// the masters that grant them, which need not include the one that gave
// the largest: so for a reentrant hold on several masters a second round
// raises every master's stored number (and fence counter) to the one
// reported, and the number is known only once a quorum has it. Any later
// hold's quorum then includes a master that has it.
func (l *Lock) mint(ctx context.Context) (int64, error) {
	f, err := l.fenceRound(ctx, nil)
	if err != nil || l.mode != "r" || len(l.c.nodes) == 1 {
		return f, err
	}
	return l.fenceRound(ctx, f)
}

// fenceRound runs lock_fence.lua on every node, raising a reentrant
// owner's stored number to raise when it is not nil, and returns the
// largest number of a quorum that found the lock held.
func (l *Lock) fenceRound(ctx context.Context, raise any) (int64, error) {
	keys := []string{l.nm.lock, l.nm.fence()}
	args := []any{l.id, ms(l.c.opts.FenceRetention)}
	if raise != nil {
		args = append(args, raise)
	}
	replies, errs := fanout(ctx, l.c.nodes, l.nodeTimeout(), func(ctx context.Context, n *node) (int64, error) {
		return lua.LockFence.Run(ctx, n.rdb, keys, args...).Int64()
	})
	var fence int64
	held, notHeld, failures := 0, 0, []error(nil)
	for i, f := range replies {
		switch {
		case errs[i] != nil:
			failures = append(failures, errs[i])
		case f > 0:
			held++
			fence = max(fence, f)
		default:
			notHeld++
		}
	}
	switch {
	case held >= l.c.quorum:
		return fence, nil
	case len(l.c.nodes)-notHeld < l.c.quorum:
		l.gone()
		return 0, ErrNotHeld
	default:
		return 0, opError("fence", ctx, errors.Join(failures...))
	}
}
