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
//     reentrant, as a Redis hash owner → holds. It is released, renewed and
//     read only by compare-and-act Lua scripts, so a handle whose lease ran
//     out never releases or extends the next holder's lock: it gets
//     ErrNotHeld and nothing changes.
//   - Fencing: a holder's first Lock.Fence call mints a number larger than
//     every number minted for the key before, in a script that mints only
//     while the lock is held; so numbers rise in the order of the holds
//     that asked, and a holder that never asks pays nothing. Numbers are
//     floored by the Redis clock in microseconds, so they keep rising after
//     Redis loses the counter (the rule of scripts/fence_lib.lua, which the
//     guard's leases use too). A lease cannot protect a resource from a
//     holder that paused past its lease; a fence checked by the resource
//     can.
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
//   - Redis Cluster: the lock key, its fence counter and its wait queue
//     share one hash tag derived from the key (any bytes, braces included),
//     so each script touches one slot. Wake channels are classic Pub/Sub,
//     which Redis Cluster delivers on every node.
//
// # Redis layout
//
// For Prefix p (default "stampede:lock:") and key k, with {k} the escaped
// hash tag:
//
//	p{k}         string token (token lock) or hash owner → holds (reentrant),
//	             plus, once the owner asked for one, "" → its fence
//	p{k}:fence   fence counter, from the first Fence call; expires
//	             FenceRetention after last use
//	p{k}:q       sorted set of waiters, score = wait deadline (Redis ms),
//	             member = "<len(channel)>:<channel><token>"
//	pwake:<id>   Pub/Sub channel of one Client; message = token of the
//	             waiter woken
//
// # Errors
//
// Obtain returns ErrNotObtained when the lock is busy, errors.Join of
// ErrNotObtained and ctx.Err() when the caller's context ends while waiting,
// and a wrapped Redis error when Redis cannot be reached. Release, Refresh,
// TTL and FenceContext return ErrNotHeld when the lock is no longer ours;
// Fence then returns 0, which a resource that checks fences refuses.
//
// # Redlock
//
// NewRedlock obtains locks on a majority of independent masters, valid for
// ttl minus the time spent acquiring minus clock drift. It keeps working with
// a minority of masters down. It is an efficiency tool: fencing numbers, not
// a quorum, protect a resource from a paused holder.
package lock
