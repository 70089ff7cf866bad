package lock

import (
	"fmt"
	"time"
)

// Options configures a Client. The zero value is ready to use: every field
// documents its default.
type Options struct {
	// Prefix is prepended to every Redis key and channel of a lock. It must
	// not contain '{' or '}' (the lock name's hash tag follows it), and
	// must not be a guard Group's Namespace on the same Redis: the lock
	// of "k" and the Group's entry of "k" would be one Redis name, and
	// the Group, taking the lock for foreign data, would drop it.
	// Default: "stampede:lock:".
	Prefix string

	// DriftFactor is the share of the lease held back for clock drift between
	// this process and Redis when computing how long a lock is known valid:
	// validity = ttl - elapsed - ttl*DriftFactor - 2ms, elapsed counted from
	// before the call. Lock.Lost closes when the validity ends. It must be in
	// [0, 0.5). Default: 0.01.
	DriftFactor float64

	// HandoffTimeout is how long a released lock stays reserved for the one
	// waiter the release woke. It stops a barging caller from starving
	// waiters; if the woken waiter is gone, others get the lock after this.
	// Default: 250ms.
	HandoffTimeout time.Duration

	// FenceRetention is how long a lock's fence counter is kept after a
	// number was last minted or the lock last renewed. Fencing numbers never
	// decrease even after the counter expires (they are floored by the Redis
	// clock), so this only bounds memory. Default: 24h.
	FenceRetention time.Duration

	// CleanupTimeout bounds the Redis calls made on behalf of a caller that
	// has gone (a best-effort release after a cancelled acquire, leaving the
	// wait queue), and the mint of Lock.Fence, which takes no context.
	// Default: 1s.
	CleanupTimeout time.Duration

	// Hooks observe lock events; nil funcs are skipped.
	Hooks Hooks
}

// Hooks are optional callbacks for metrics and logs. They are called
// synchronously from the goroutine that saw the event and must not block.
type Hooks struct {
	// Obtained is called when a lock (or a reentrant hold) is obtained,
	// with how long the caller waited for it. fence is the number the lock
	// already has (a reentrant owner's, once minted), else 0: numbers are
	// minted by Lock.Fence.
	Obtained func(key string, fence int64, waited time.Duration)
	// Renewed is called after each watchdog renewal, err nil on success.
	Renewed func(key string, err error)
	// Lost is called once when a held lock is found lost or its lease ran out
	// before Release; never for a lock that a Release released, also when
	// a concurrent Release, Refresh, TTL or Fence of the handle then finds
	// it gone. It must not call the handle's methods: it may run on the
	// handle's watchdog or inside one of them, which they wait for (a
	// Release from it would never return, nor would Client.Close). To act
	// on a loss, read the handle's Lost channel.
	Lost func(key string)
	// Released is called after a successful Release with how long the handle
	// held the lock.
	Released func(key string, held time.Duration)
}

// MaxKeyBytes is the longest lock name accepted.
const MaxKeyBytes = 64 << 10

// MinTTL is the shortest lease Obtain, ObtainReentrant and Refresh accept.
// A lock is known valid for ttl minus the time Redis took to answer minus
// the drift allowance (ttl*DriftFactor + 2ms); a shorter lease leaves no
// validity on most machines, so a free lock could never be obtained.
const MinTTL = 10 * time.Millisecond

const (
	defaultPrefix         = "stampede:lock:"
	defaultDriftFactor    = 0.01
	defaultHandoffTimeout = 250 * time.Millisecond
	defaultFenceRetention = 24 * time.Hour
	defaultCleanupTimeout = time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = defaultPrefix
	}
	switch {
	case o.DriftFactor == 0:
		o.DriftFactor = defaultDriftFactor
	case !(o.DriftFactor >= 0 && o.DriftFactor < 0.5): // NaN too
		return o, fmt.Errorf("lock: DriftFactor %v out of range [0, 0.5)", o.DriftFactor)
	}
	if o.HandoffTimeout < 0 || o.FenceRetention < 0 || o.CleanupTimeout < 0 {
		return o, fmt.Errorf("lock: negative duration in Options")
	}
	if o.HandoffTimeout == 0 {
		o.HandoffTimeout = defaultHandoffTimeout
	}
	if o.FenceRetention == 0 {
		o.FenceRetention = defaultFenceRetention
	}
	if o.CleanupTimeout == 0 {
		o.CleanupTimeout = defaultCleanupTimeout
	}
	return o, nil
}

// ObtainOption changes how one Obtain call behaves.
type ObtainOption func(*obtainOptions)

type obtainOptions struct {
	wait      time.Duration
	autoRenew bool
}

// WaitFor makes Obtain block up to d for a busy lock. Waiters are woken by the
// holder's release (one waiter per release, over one shared subscription per
// Client), with a fallback timer for locks that expire instead. d must not be
// negative; 0 means do not wait.
func WaitFor(d time.Duration) ObtainOption {
	return func(o *obtainOptions) { o.wait = d }
}

// AutoRenew starts a watchdog that renews the lease (this hold's, for a
// reentrant lock) every ttl/3 until Release or the Client's Close. If a renewal finds the lock
// gone, the watchdog stops and Lost is closed; it never renews a lock that
// is not ours. Renewals that fail (Redis slow or down) leave the lease to
// run out, and Lost closes when the last known validity ends.
func AutoRenew() ObtainOption {
	return func(o *obtainOptions) { o.autoRenew = true }
}
