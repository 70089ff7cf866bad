// Package lua runs the scripts of package scripts for guard and lock: one
// *redis.Script per script, made once (it has no mutable state, so no
// caller can swap a script out from under another), and pipelines of
// script calls.
//
// A *redis.Script runs with EVALSHA and falls back to EVAL when the server
// does not have the script cached yet (after a restart or a failover), so
// callers never need to preload them.
package lua

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/scripts"
)

func load(name string) *redis.Script { return redis.NewScript(scripts.Source(name)) }

// The scripts of package lock; see each file's header for KEYS and ARGV.
var (
	LockAcquire = load("lock_acquire.lua") // a busy-path token lock or one reentrant hold
	LockFence   = load("lock_fence.lua")   // the fencing number of a held lock
	LockRelease = load("lock_release.lua") // a release (or one hold less), waking one waiter
	LockRefresh = load("lock_refresh.lua") // a held lock extended
	LockTTL     = load("lock_ttl.lua")     // the remaining lease of a held lock
)

// The scripts of package guard. The names of one cache key share one hash
// tag, so each runs on one slot.
var (
	GuardRead          = load("guard_read.lua")             // an entry, and the lease when not fresh
	GuardFill          = load("guard_fill.lua")             // a fill under the fence checks; wakes the waiters
	GuardLease         = load("guard_lease.lua")            // a lease renewed or released
	GuardInvalidate    = load("guard_invalidate.lua")       // an entry dropped, refreshes fenced out
	GuardInvalidateTag = load("guard_invalidate_tag.lua")   // a hash tag invalidated; its members to drain
	GuardDrainTag      = load("guard_invalidate_drain.lua") // one slice of an invalidated tag's members dropped
	GuardBackup        = load("guard_backup.lua")           // a backup lease, after WaitTimeout
)

// Call is one call of a script: its keys and arguments.
type Call struct {
	Keys []string
	Args []any
}

// Pipeline sends, in one pipeline, a GET of each name in gets and a call
// of s for each of calls; errors are read per command. An EVALSHA that a
// server answers NOSCRIPT (its script cache is empty: a restart, a
// failover) is sent again as EVAL in a second pipeline. On a
// *redis.ClusterClient the pipeline goes out as one round trip per node.
func Pipeline(ctx context.Context, rdb redis.UniversalClient, gets []string, s *redis.Script, calls []Call) ([]*redis.StringCmd, []*redis.Cmd) {
	pipe := rdb.Pipeline()
	getCmds := make([]*redis.StringCmd, len(gets))
	for i, name := range gets {
		getCmds[i] = pipe.Get(ctx, name)
	}
	callCmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		callCmds[i] = s.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	_, _ = pipe.Exec(ctx)
	var again []int
	for i, c := range callCmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := rdb.Pipeline()
		for _, i := range again {
			callCmds[i] = s.Eval(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return getCmds, callCmds
}

// Scripts calls s once for each of calls, in one pipeline.
func Scripts(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, calls []Call) []*redis.Cmd {
	_, cmds := Pipeline(ctx, rdb, nil, s, calls)
	return cmds
}

// All returns every script by file name, for tests and tools that load
// them all into a server.
func All() map[string]*redis.Script {
	out := map[string]*redis.Script{}
	for _, name := range scripts.Names() {
		out[name] = load(name)
	}
	return out
}
