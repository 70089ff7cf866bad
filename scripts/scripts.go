// Package scripts holds every Lua script stampede runs on Redis, one file
// each, embedded at build time. Each script is reached through a function
// (LockAcquire, GuardRead, ...) returning a shared *redis.Script, which has
// no mutable state: callers cannot swap a script out from under each other.
//
// Each file starts with a header comment that states its KEYS, ARGV and
// return values. Every script touches only the keys it is given in KEYS, and
// callers give it keys that share one hash tag, so every script runs on one
// Redis Cluster slot.
//
// Redis Lua has no includes: the functions several scripts share live in
// preludes (files ending in _lib.lua) that are put in front of the scripts
// that use them. fence_lib.lua holds the one fence-minting rule of both
// packages: max(counter + 1, Redis time in microseconds).
//
// A *redis.Script runs with EVALSHA and falls back to EVAL when the server
// does not have the script cached yet (after a restart or a failover), so
// callers never need to preload them.
package scripts

import (
	"embed"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// The preludes: never run alone.
const (
	fenceLib = "fence_lib.lua"
	guardLib = "guard_lib.lua"
)

// preludes lists, for each script that needs any, the preludes put in front
// of it, in order.
var preludes = map[string][]string{
	"lock_fence.lua":           {fenceLib},
	"guard_read.lua":           {fenceLib, guardLib},
	"guard_fill.lua":           {fenceLib, guardLib},
	"guard_invalidate.lua":     {fenceLib, guardLib},
	"guard_invalidate_tag.lua": {fenceLib, guardLib},
	"guard_lease.lua":          {guardLib},
}

func isPrelude(name string) bool { return strings.HasSuffix(name, "_lib.lua") }

// source returns the text of script name with its preludes in front.
func source(name string) string {
	var b strings.Builder
	for _, f := range slices.Concat(preludes[name], []string{name}) {
		src, err := files.ReadFile(f)
		if err != nil {
			panic("scripts: missing embedded " + f) // a build defect, not a runtime condition
		}
		b.Write(src)
	}
	return b.String()
}

func load(name string) *redis.Script { return redis.NewScript(source(name)) }

var (
	lockAcquireScript = load("lock_acquire.lua")
	lockFenceScript   = load("lock_fence.lua")
	lockReleaseScript = load("lock_release.lua")
	lockRefreshScript = load("lock_refresh.lua")
	lockTTLScript     = load("lock_ttl.lua")

	guardReadScript          = load("guard_read.lua")
	guardFillScript          = load("guard_fill.lua")
	guardLeaseScript         = load("guard_lease.lua")
	guardInvalidateScript    = load("guard_invalidate.lua")
	guardInvalidateTagScript = load("guard_invalidate_tag.lua")
)

// Lock scripts, used by package lock.

// LockAcquire takes a busy-path token lock (hand-off reservation, waiter
// queue) or one hold of a reentrant lock; see lock_acquire.lua.
func LockAcquire() *redis.Script { return lockAcquireScript }

// LockFence mints the fencing number of a held lock; see lock_fence.lua.
func LockFence() *redis.Script { return lockFenceScript }

// LockRelease releases a lock (or one hold) and wakes one waiter; see
// lock_release.lua.
func LockRelease() *redis.Script { return lockReleaseScript }

// LockRefresh extends a held lock; see lock_refresh.lua.
func LockRefresh() *redis.Script { return lockRefreshScript }

// LockTTL reads the remaining lease of a held lock; see lock_ttl.lua.
func LockTTL() *redis.Script { return lockTTLScript }

// Guard scripts, used by package guard. The names of one cache key (entry,
// lease, fence, waiters, invalidation) share one hash tag, so each script
// runs on one slot; the entry format is described in guard_read.lua.

// GuardRead reads an entry and, when it is not fresh, tries the refresh
// lease in the same round trip; see guard_read.lua.
func GuardRead() *redis.Script { return guardReadScript }

// GuardFill stores a loaded value under the fence checks, settles the lease
// and wakes the waiters; see guard_fill.lua.
func GuardFill() *redis.Script { return guardFillScript }

// GuardLease renews or releases a refresh lease the caller holds; see
// guard_lease.lua.
func GuardLease() *redis.Script { return guardLeaseScript }

// GuardInvalidate drops an entry and fences out refreshes in flight; see
// guard_invalidate.lua.
func GuardInvalidate() *redis.Script { return guardInvalidateScript }

// GuardInvalidateTag drops the entries of every key of one hash tag and
// fences out their refreshes in flight; see guard_invalidate_tag.lua.
func GuardInvalidateTag() *redis.Script { return guardInvalidateTagScript }

// All returns every embedded script by file name (without ".lua"), each
// with its preludes, for tools and tests that load them all into a server.
func All() map[string]*redis.Script {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("scripts: " + err.Error())
	}
	out := make(map[string]*redis.Script, len(entries))
	for _, e := range entries {
		if !isPrelude(e.Name()) {
			out[strings.TrimSuffix(e.Name(), ".lua")] = load(e.Name())
		}
	}
	return out
}
