// Package guard stops cache stampedes across a fleet: when a key is missing
// or stale, one caller in the whole fleet loads it, and everyone else is
// served the previous value or woken the moment the new one lands.
//
// # Start here
//
// These names cover most uses:
//
//   - New builds a Group on a go-redis client with Options; three fields
//     matter first: Namespace (one per service sharing the Redis), FreshFor
//     (how long a value is served as is) and StaleFor (how long after that
//     it is still served while one node refreshes it).
//   - Fetch loads and serves a typed value (encoding/json by default);
//     Wrap turns a func(ctx, K) (V, error) into a guarded one; Do is the
//     []byte form under both, returning a Result (the value, and whether
//     it was a hit, stale, loaded or degraded).
//   - A loader answers ErrNotFound for a key that does not exist: the
//     answer is cached for NegativeFor, so a missing row is not asked for
//     again by every caller.
//   - Invalidate drops a key on every node after a write.
//   - Close stops the Group's background work; Ready tells a readiness
//     probe whether the Group can coordinate through Redis.
//
// Everything else (batches, tags, windows per value, hooks, the back-off
// of a failing loader, private answers) is optional and has safe defaults.
//
// # Two tiers
//
// In a process, golang.org/x/sync/singleflight collapses the callers of a
// key into one flight. Across processes, a Redis lease lets exactly one node
// refresh a key: the read script, finding the entry stale or missing and no
// lease held, mints a fencing number and stores it as the lease with a
// short TTL, in the same round trip that read the entry. Every Redis name
// of a key shares one hash tag, so the guard runs unchanged on Redis
// Cluster.
//
// The lease is the guard's own rather than a lock of package lock on
// purpose: it is tried inside the read script and released inside the fill
// script, which is what keeps a hit, a "stale, and I refresh" decision and
// a fill at one round trip each; a separate lock would add a round trip to
// each. Both mint fences by the same rule (see package scripts).
//
// A key that holds a Redis Cluster hash tag of its own ("{user:42}:profile")
// is named in that tag's slot, so the keys of one tag share a slot; any
// other key is its own tag.
//
// # Serving rules
//
// Each entry carries its fresh-until and stale-until times on the Redis
// clock (never compared with a node's clock):
//
//	fresh     → the value (from the in-process tier: no round trip;
//	            else 1)
//	stale     → the value at once; the caller whose read won the lease
//	            refreshes it in the background (same round trip)
//	negative  → ErrNotFound, until NegativeFor ends
//	missing   → the lease winner loads and fills (1 more round trip, which
//	            also releases the lease and wakes the waiters); everyone
//	            else waits for the fill notification up to WaitTimeout,
//	            then applies WaitTimeoutPolicy
//	kept      → (Windows.MustRevalidate, past fresh-until) as missing, but
//	            the winner's load sees the kept value (Previous) and may
//	            answer Revalidated: the value is stored fresh again, and
//	            only its new head travels to Redis
//	oversize  → (a marker: the value is over MaxValueBytes) this node's own
//	            copy, fresh or stale as the marker says; without one, a
//	            fresh marker is loaded by this node alone, once, and a
//	            stale one is waited for as missing
//
// A refresh (stale or early) also sees the value it replaces through
// Previous. Peek reads an entry without any of this: no load, no lease, no
// waiting.
//
// Waiters wake on the fill's Pub/Sub message, on one subscription per
// Group, with a bounded polling fallback for lost messages and expired
// leases.
//
// The read is a Lua script, and a script call costs Redis 7.0 far more
// server time than a GET (about 10-15 µs against 0.4 µs). So a key this
// process has lately seen fresh, with at least 25ms of freshness left, is
// served by a plain GET of its entry, judged against an estimate of the
// Redis clock (the local monotonic clock plus an offset read from every
// script reply, which can only run ahead of Redis's clock, never behind).
// An entry found missing, undecodable or no longer clearly fresh goes to
// the script, which decides stale, lease and waiting as above.
//
// # Batches
//
// GetMany and FetchMany serve many keys per call, with the rules above
// applied to each key. The reads of a batch go out in one pipeline: one
// round trip per Redis node for all its hits, the lease of each missing or
// stale key tried in that same read. The keys this node won are loaded in
// one loader call (MaxBatch keys per call) and filled in one more round
// trip per node; keys another node is loading are waited for as above;
// keys already loading in this process join that load, and batches of one
// process asking for the same key at once share its read. Stale keys are
// served at once and refreshed together in one background loader call.
// Without Redis, a batch's keys load through this process alone, a key
// already loading in it being joined.
//
// Concurrent hits share round trips: the GET of a hit that arrives while
// another is in flight is queued, and the queue goes out as one MGET of
// its names when a round trip in flight is back (group commit; on a
// *redis.ClusterClient one MGET per hash slot, pipelined by node). A lone
// hit is a plain GET sent at once, so a single caller pays nothing for
// it. Each queued caller still leaves on its own ctx, within RedisTimeout
// of its call, and its own outcome counts for the breaker. The batching
// is the guard's own, not go-redis's experimental AutoPipeline. The read
// and fill scripts of concurrent misses are batched the same way (a herd
// of cold keys shares round trips). MaxHitBatch caps a batch; Disabled
// turns batching off.
//
// # The in-process tier
//
// A hot key's hit costs no round trip: each Group keeps fresh values in
// memory (Options.LocalEntries, 10000 by default, and LocalBytes, 64 MiB),
// and the copies are coherent across the fleet. On each Redis master the
// Group keeps one connection of its own that runs
//
//	CLIENT TRACKING ON REDIRECT <its own id> BCAST PREFIX <Namespace>
//
// so Redis reports every change of an entry under the Namespace, whoever
// made it: another node's fill, refresh, Invalidate or InvalidateTag, an
// expiry, an eviction, a DEL by hand. A report drops the copy; it leaves
// Redis before the writer's reply and never crosses the cluster bus. The
// tier serves a copy only while every report that reached this host has
// been applied (its fence: one getsockopt per master and hit, on Linux
// over plain TCP), so once a change has returned on any node, no call
// that begins after gets the copy it replaced (over TLS or a Unix socket,
// the copy goes when the report is applied, within milliseconds). It costs
// each master one message per change and listening Group, and nothing is
// sent per hit.
//
// Late replies are kept out: a read takes a ticket before it is sent, and
// its value is kept only if no change to its entry was seen since; a call
// that joins a read sent before it began takes its value only if nothing
// newer was returned since. So a caller never gets a value older than one
// a call that ended before it began already returned. A lost report
// connection, a failover or a new cluster node flushes the tier, which
// serves nothing until every master is listened to again. A copy of a
// fresh value is served up to its fresh-until (judged on the estimate of
// the Redis clock below) and for LocalTTL at most (1m, a backstop should a
// report ever be lost); while a stale value is refreshed, its copy is
// served as Stale for 250ms at a time (then Redis is read again, which is
// what retries the refresh lease), never past its stale-until, and the
// refresh's fill drops it. Where the guard
// cannot follow changes (a *redis.Ring, a cluster client that reads from
// replicas, a server before Redis 6.0, an ACL that refuses CLIENT
// TRACKING) the tier stays off and every hit is a Redis read. Options.LocalEntries = Disabled turns it off.
//
// go-redis client-side caching (a *redis.Client with Protocol 3 and
// ClientSideCacheConfig, experimental there) also works under the guard:
// a hit is then a plain GET of the entry, which that cache may serve, and
// such hits are never batched, since go-redis pipelines bypass its cache.
//
// # Guarantees
//
//   - One loader call per key per refresh across all nodes while Redis is
//     healthy.
//   - A stale value is served at hit latency while the refresh runs.
//   - Every lease carries a fencing number. A fill is rejected once a newer
//     fence exists for its key: another node took the lease over (the
//     holder paused, or was partitioned, past its lease) or an Invalidate
//     ran, even if nothing newer has landed yet. A caller that loaded
//     without a lease (after WaitTimeout) stores only where no fenced entry
//     exists, and mints a fence as it does. So stored values follow the
//     order their loads began in: the stored value never goes back in time.
//   - Loads run detached from the caller that started them
//     (context.WithoutCancel), bounded by LoadTimeout: a cancelled caller
//     never fails the others, and each caller leaves on its own ctx. A
//     loader that ignores its ctx is abandoned after LoadTimeout and a
//     grace (see Options.LoadTimeout): its callers get ErrLoadTimeout, its
//     lease is settled, and nothing, Close included, waits for it.
//   - Every way a loader can end reaches the callers of its flight: a
//     value, an error, a panic (*PanicError) or runtime.Goexit (ErrGoexit);
//     the loader runs on a goroutine of its own, so the process survives,
//     the watchdog stops and the lease is released whichever way it ended.
//   - A call's LoadFunc runs at most once per Do, on this node, whatever
//     paths the call takes (its read's flight, a miss flight, a wait that
//     timed out, a degraded load).
//   - Every state machine settles in one deferred path, whichever way a
//     call ends (a value, an error, a cancel, a deadline, a panic,
//     runtime.Goexit, Close): the breaker's probe, the read flights, the
//     per-process load slots, the lease watchdogs and the waiter
//     registrations. A probe whose caller left before Redis answered gives
//     no verdict; it is released, and the next call probes. Close waits
//     for the background refreshes (each bounded by LoadTimeout and its
//     grace), then stops the watchdogs of loads still running for callers,
//     single keys and batches alike: a closed Group renews no lease.
//   - A failing loader is not hammered: a stale value keeps being served and
//     the lease is held for ErrorBackoff (stale-if-error); a missing key
//     answers ErrBackoff (a *BackoffError naming the key and the error) on
//     every node for ErrorBackoff.
//   - A load's answer that is its caller's own never reaches another
//     caller: with Private, the other callers take turns, one load at a
//     time across the fleet, until one value is stored and shared; with
//     Pass, the key is marked pass and calls run their own loads until one
//     stores a value (see Private and Pass).
//   - A value over MaxValueBytes costs the origin at most one load per key
//     per refresh per node; its refreshes are coordinated fleet-wide as any
//     other's (see Options.MaxValueBytes).
//   - Redis trouble degrades, it does not cascade: every Redis call has its
//     own RedisTimeout, a breaker stops paying it while Redis is down, and
//     callers are then served through singleflight alone. The breaker
//     counts only what says Redis itself is unwell (no answer in time, a
//     broken connection, replies such as LOADING, BUSY, MASTERDOWN,
//     CLUSTERDOWN, TRYAGAIN, READONLY or OOM, an ACL refusal), never an
//     error about one key's data: that answers the key's call alone
//     (served Degraded) and is reported to Hooks.RedisError. Coordination
//     resumes by itself; on a *redis.ClusterClient a failed call also
//     reloads the slot map, so a replica promoted by a failover is used
//     within about a second.
//   - At most one load of a key runs in a process at any time, whatever
//     asked for it (a miss, a background refresh, Redis being
//     unavailable): callers that only need a value share the running load;
//     a load to be stored under a lease waits for it and loads anew. A load
//     abandoned after LoadTimeout no longer counts: the next load of its
//     key may start while its loader still runs (so a loader that ignores
//     its ctx can have more than one call of a key running here, one per
//     LoadTimeout at most), and its result is never stored or served.
//
// # Redis layout
//
// For Namespace ns and key k, with {k} the escaped hash tag:
//
//	ns{k}        the entry: "~1,fresh_until,stale_until,written,load_us,fence,flags\n" payload
//	             (flags: "" a value, "n" not found, "e" an error marker whose
//	             payload is the error text, "r" never served stale; markers
//	             with no payload: "o" oversize, "f" failing, "p" pass)
//	ns{k}:lease  the refresh lease; value = the holder's fence
//	ns{k}:fence  fence counter (floored by Redis TIME in µs)
//	ns{k}:w      set of the fill channels of nodes waiting for a fill
//	ns{k}:inv    fence of the last Invalidate
//	ns{T}:tkeys  for a key holding hash tag T: the set of the entries of
//	             T's keys filled since T's last InvalidateTag
//	ns{T}:tinv   Redis time (µs) of T's last InvalidateTag
//	nsfill:<id>  Pub/Sub channel of one Group
//
// Garbage under an entry key is a miss (reported to Hooks.Corrupt) and is
// overwritten by the next fill. Any other value the guard would not have
// written under a key's names is dropped by the scripts and reported to
// Hooks.Corrupt, so that no script ever fails on it (a failure would count
// against Redis's health, and open the breaker for every key) and it can
// neither keep the key's callers waiting nor fence out its fills:
//
//   - a value of another type, under any of the names;
//   - an entry with no TTL (every entry the guard writes expires);
//   - a lease with no TTL, that is not a canonical decimal, or that is
//     above the fence counter (or has none): every lease is minted from it;
//   - a fence counter that is not a canonical decimal of at most 2^53 (a
//     negative, non-integer or huge counter; the next fence is then floored
//     by the Redis clock, as after a lost counter);
//   - an invalidation marker that is not a canonical decimal, has no TTL or
//     is above the fence counter;
//   - a tag's invalidation time that is not a canonical decimal or has no
//     TTL, a member set of another type, a member that is not the entry
//     name of one of the tag's keys (never touched: it may be a user's key).
//
// A tag's member set may also be lost (evicted, expired, overwritten):
// InvalidateTag then cannot name the entries filled before it, so every
// read of a tagged key (the read script, the fast path's GET, the
// in-process tier's report) also compares its entry with the tag's
// invalidation time, and an entry filled before it is deleted and read as
// missing.
//
// An entry whose fence is above the fence counter cannot have been written
// under a fence the guard minted: a fill it would reject overwrites it.
// What cannot be told from the guard's own writes is taken as such: a
// valid entry with its TTL is a value (served until its stale-until); a
// lease that is a fence at most the counter, with a TTL, is another
// node's (waited for, up to WaitTimeout).
//
// # Observability
//
// Hooks is a struct of optional funcs (hits, stale answers, misses,
// coalesced callers, loads, leases, wake-ups, refresh errors, rejected
// fills, Redis errors, breaker changes, corrupt entries and foreign data,
// oversized values): wire it to your metrics; the package itself logs
// nothing.
package guard
