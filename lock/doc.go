// Package lock provides distributed locks on Redis: token locks with fencing
// numbers, reentrant locks with an explicit owner, a watchdog that renews
// leases, waits that are woken by the holder's release, and Redlock over
// independent masters.
//
// # Guarantees
//
//   - Mutual exclusion while a lease lasts: a lock is taken with
//     SET key token NX PX ttl (a plain command when the lock is free and the
//     caller does not wait; inside the acquire script otherwise), or,
//     reentrant, as a Redis hash of the owner's holds. It is released,
//     renewed and read only by compare-and-act Lua scripts, so a handle
//     whose lease ran out never releases or extends the next holder's lock:
//     it gets ErrNotHeld and nothing changes.
//   - A handle knows when it may have lost the lock: it is known valid for
//     ttl minus the time Redis took to answer minus a drift allowance
//     (Options.DriftFactor), measured from before the call, and Lost closes
//     when that validity ends without a renewal, or when Redis reports the
//     lock gone. A Refresh to a shorter lease counts from the moment it is
//     sent, whatever becomes of the call; and a Refresh that failed without
//     a reply may still run in Redis later, after a Refresh that succeeded,
//     so the handle trusts no later renewal for longer than the lease that
//     call asked for. Renewals and releases of one handle run one at a
//     time, so that their replies arrive in the order Redis ran them (and a
//     renewal that Redis runs after the release does not report a released
//     lock lost). So Lost closes before the lock can pass to another
//     owner, unless Redis itself loses data (a restart without
//     persistence, a failover to a replica that missed the write).
//   - Fencing: a holder's first Lock.Fence call mints a number larger than
//     every number minted for the key before, in a script that mints only
//     while the lock is held; so numbers rise in the order of the holds
//     that asked, and a holder that never asks pays nothing. Numbers are
//     floored by the Redis clock in microseconds, so they keep rising after
//     Redis loses the counter (the rule of scripts/fence_lib.lua, which the
//     guard's leases use too). A lease cannot protect a resource from a
//     holder that paused past its lease, nor from Redis losing the lock; a
//     fence checked by the resource can.
//   - Waiting costs no polling: a waiter (WaitFor) joins a per-lock queue and
//     is woken by the release, which reserves the lock for exactly one waiter
//     (for Options.HandoffTimeout) and publishes its id on the wake channel
//     of the waiter's Client. Each Client subscribes its own channel once,
//     on one Pub/Sub connection shared by all its waiters, so a contended
//     acquisition costs about three round trips (a try that queues, the try
//     after the wake-up, the release) however many waiters there are. A
//     waiter that gives up leaves the queue and passes on a reservation made
//     for it. A lock that expires instead of being released publishes
//     nothing: waiters then retry when the holder's remaining lease ends.
//   - Watchdog (AutoRenew): renews every ttl/3; Release stops it and waits
//     for it; when a renewal finds the lock gone it stops and closes Lost.
//     Client.Close stops the watchdogs of the Client's locks too: no
//     renewal is sent after Close returns, and leases not released run out.
//   - Redis Cluster: the lock key, its fence counter and its wait queue
//     share one hash tag derived from the key (any bytes, braces included),
//     so each script touches one slot. Wake channels are classic Pub/Sub,
//     which Redis Cluster delivers on every node.
//
// Leases are at least MinTTL (10ms): below it, the drift allowance and one
// round trip leave no validity, so a free lock could never be obtained.
//
// # Reentrant locks: each hold has its own lease
//
// ObtainReentrant(ctx, key, owner, ttl) takes one hold of the lock for
// owner. The lock belongs to one owner at a time; while it does, the owner
// may take more holds (nested calls, or several goroutines of one job), and
// every other owner, and every token lock on the key, is kept out.
//
// Each hold is a handle of its own, with its own lease on the Redis clock:
//
//   - A hold lives until its Release or the end of its own lease, whichever
//     comes first. Taking, refreshing or releasing one hold never shortens
//     or lengthens another.
//   - The owner keeps the lock as long as any of its holds lives: the lock's
//     lease is the latest deadline among the owner's live holds. A nested
//     hold with a short lease therefore cannot cut the outer hold's lease,
//     and an outer hold released early does not free a lock that a nested
//     hold still keeps.
//   - Release, Refresh, TTL and Fence act on this hold alone. Release of a
//     hold that was released or whose lease ended returns ErrNotHeld and
//     changes nothing, even when other holds of the same owner keep the lock.
//   - Lost of a hold closes when that hold ends (its lease runs out, or it is
//     found gone): from then on it keeps nobody out, and work it guards must
//     stop, even if another hold of the owner still keeps the lock.
//   - Every hold of one owner reports the same fencing number for as long as
//     the owner keeps the lock without a gap; once every hold has ended, the
//     lock is free, and the next holder (the same owner included) gets a
//     larger number.
//   - Holds reports the owner's live holds right after this acquisition,
//     this one included.
//
// This is the model of a reference count whose references expire on their
// own: safe when a nested caller forgets its Release or dies, and no
// handle ever believes it holds the lock after the lock could have passed
// to another owner.
//
// # Redis layout
//
// For Prefix p (default "stampede:lock:") and key k, with {k} the escaped
// hash tag:
//
//	p{k}         token lock: a string, the token;
//	             reentrant lock: a hash of
//	               owner      the owner id
//	               hold:<id>  one hold's deadline, Redis ms (TIME);
//	                          a hold whose deadline came is dead, and
//	                          is deleted by the next script that meets it
//	               ""         the owner's fencing number, once minted
//	             expiring at the latest live deadline;
//	             or "stampede-handoff:<waiter>", a release's reservation
//	p{k}:fence   fence counter, from the first Fence call; expires
//	             FenceRetention after last use
//	p{k}:q       sorted set of waiters, score = wait deadline (Redis ms),
//	             member = "<len(channel)>:<channel><waiter id>"
//	pwake:<id>   Pub/Sub channel of one Client; message = the id of the
//	             waiter woken
//
// Tokens, hold ids and waiter ids are random and new for each attempt, so
// a release made in the background for a failed attempt never touches what
// another attempt, or another caller, holds. A hash without an owner field
// (another tool's, or an older layout's) is treated as held and never
// taken over.
//
// # Errors
//
// Obtain and ObtainReentrant return:
//
//   - ErrNotObtained when the lock is busy: Redis answered that another
//     holder has it (after waiting up to WaitFor, when given). When the
//     caller's context ends while it waits for a busy lock, the error is
//     errors.Join(ErrNotObtained, ctx.Err()).
//   - An error that is not ErrNotObtained when Redis could not say: a
//     connection or server error, a deadline or cancellation that cut a
//     Redis call short (then errors.Is(err, context.DeadlineExceeded) or
//     context.Canceled holds), a grant that came back after its lease was
//     over (Redis stalled), and, for Redlock, a quorum missed because
//     masters failed. Such errors start with "lock: obtain: " and wrap
//     their cause. Whatever the call may have taken is released in the
//     background. A context already done before the call is such an error
//     too: nothing was asked of Redis.
//   - ErrClosed after Client.Close, also to a caller that was waiting
//     (WaitFor) when Close ran, and an error naming the problem for bad
//     arguments (an empty key or owner, a key over MaxKeyBytes, a ttl below
//     MinTTL, a negative WaitFor).
//
// A caller that skips work when the lock is busy should test
// errors.Is(err, ErrNotObtained), and treat any other error as Redis
// failing.
//
// Release, Refresh, TTL and FenceContext return ErrNotHeld when the lock is
// no longer held by this handle (for a reentrant lock: this hold), and
// close Lost; Fence then returns 0, which a resource that checks fences
// refuses. One case reads the same and is harmless: a Release that Redis
// ran but whose reply was lost, sent again by the client (go-redis retries
// after a connection reset), finds the hold already gone and returns
// ErrNotHeld; the lock is released either way. A Release's ErrNotHeld
// means "this hold is not in Redis any more", not always "it was taken". Their other errors wrap the Redis error (and ctx.Err()); the
// outcome is then unknown: Release may be retried; after a failed Refresh
// the handle trusts the shorter of its old and new leases, and no later
// renewal for longer than the failed call's lease (a watchdog, which renews
// with one lease, loses nothing by this).
//
// # Programmer errors
//
// New panics on programmer errors, which no retry could fix: a nil client
// (also a typed nil such as a nil *redis.Client), a *redis.Client,
// *redis.ClusterClient or *redis.Ring made without ContextTimeoutEnabled
// (a caller's deadline could not bound its Redis calls, so a stalled Redis
// would hold each call for the client's own timeouts), and invalid Options
// (a Prefix with '{' or '}', DriftFactor outside [0, 0.5), a negative
// duration). NewRedlock panics on the same errors for any of its clients,
// and when it has none. Calls never panic on bad arguments: they return an
// error.
//
// # Failover
//
// Redis replicates asynchronously: a lock taken on a master that dies
// before its replicas received it is missing on the promoted replica, and
// another client can obtain it there while the first still believes it
// holds it. The first finds out only at its next Refresh or renewal
// (ErrNotHeld, Lost closed), or when its lease runs out. Fencing still
// protects a resource that checks fences: the new holder's number is above
// the lost one's as long as the promoted replica's clock is behind the old
// master's by less than the failover took. Redlock over independent
// masters does not depend on one master's replication. docs/failover.md
// has the measurements.
//
// # Redlock
//
// NewRedlock obtains locks on a majority of independent masters, valid for
// ttl minus the time spent acquiring minus clock drift. It keeps working with
// a minority of masters down: a lock is busy when a majority of masters say
// so (or when no master failed and none has a majority); when failures keep
// both a grant and a busy majority out of reach, Obtain returns an error,
// not ErrNotObtained. A reentrant owner's first Fence takes a second round
// trip, which gives every master the number reported, so that the owner's
// later holds report it too (Lock.Fence has the exceptions). A waiter
// (WaitFor) needs its Client's wake channel confirmed on a quorum of
// masters only; on the others, until they confirm it, its fallback timer
// stands in for the wake-up. It is an efficiency tool: fencing numbers,
// not a quorum, protect a resource from a paused holder.
//
// # Testing
//
// TestLockHistories is a model check of the package on a real redis-server:
// it generates histories of several Clients with leases of tens of
// milliseconds while pausing, freezing and restarting the server and
// killing its connections, and checks mutual exclusion, loss before
// another grant, fence order and a fenced register. It runs for a few
// seconds in CI; go test ./lock -run TestLockHistories -args
// -lock.soak=10m (or STAMPEDE_SOAK=10m) runs it longer.
package lock
