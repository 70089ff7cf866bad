// Package scripts holds every Lua script stampede runs on Redis, one file
// each, embedded at build time and exported as *redis.Script.
//
// Each file starts with a header comment that states its KEYS, ARGV and
// return values. Every script touches only the keys it is given in KEYS, and
// callers give it keys that share one hash tag, so every script runs on one
// Redis Cluster slot.
//
// A *redis.Script runs with EVALSHA and falls back to EVAL when the server
// does not have the script cached yet (after a restart or a failover), so
// callers never need to preload them.
package scripts

import (
	"embed"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// guardLib holds the Lua functions the guard scripts share; load puts it in
// front of each of them (Redis Lua has no includes).
const guardLib = "guard_lib.lua"

func load(name string) *redis.Script {
	src, err := files.ReadFile(name)
	if err != nil {
		panic("scripts: missing embedded " + name) // a build defect, not a runtime condition
	}
	if strings.HasPrefix(name, "guard_") && name != guardLib {
		lib, err := files.ReadFile(guardLib)
		if err != nil {
			panic("scripts: missing embedded " + guardLib)
		}
		src = append(lib, src...)
	}
	return redis.NewScript(string(src))
}

// Lock scripts, used by package lock.
var (
	// LockAcquire takes a token lock or one hold of a reentrant lock and
	// mints its fencing number; see lock_acquire.lua.
	LockAcquire = load("lock_acquire.lua")
	// LockRelease releases a lock (or one hold) and wakes one waiter; see
	// lock_release.lua.
	LockRelease = load("lock_release.lua")
	// LockRefresh extends a held lock; see lock_refresh.lua.
	LockRefresh = load("lock_refresh.lua")
	// LockTTL reads the remaining lease of a held lock; see lock_ttl.lua.
	LockTTL = load("lock_ttl.lua")
)

// All returns every embedded script by file name (without ".lua"), for
// tools and tests that load them all into a server.
func All() map[string]*redis.Script {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("scripts: " + err.Error())
	}
	out := make(map[string]*redis.Script, len(entries))
	for _, e := range entries {
		if e.Name() == guardLib {
			continue // a prelude, not a script
		}
		out[strings.TrimSuffix(e.Name(), ".lua")] = load(e.Name())
	}
	return out
}

// Names returns the names All uses, sorted.
func Names() []string {
	all := All()
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Guard scripts, used by package guard. The names of one cache key (entry,
// lease, fence, waiters, invalidation) share one hash tag, so each script
// runs on one slot; the entry format is described in guard_read.lua.
var (
	// GuardRead reads an entry and, when it is not fresh, tries the refresh
	// lease in the same round trip; see guard_read.lua.
	GuardRead = load("guard_read.lua")
	// GuardFill stores a loaded value under the fence checks, settles the
	// lease and wakes the waiters; see guard_fill.lua.
	GuardFill = load("guard_fill.lua")
	// GuardLease renews or releases a refresh lease the caller holds; see
	// guard_lease.lua.
	GuardLease = load("guard_lease.lua")
	// GuardInvalidate drops an entry and fences out refreshes in flight; see
	// guard_invalidate.lua.
	GuardInvalidate = load("guard_invalidate.lua")
)
