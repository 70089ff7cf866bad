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
// of s for each of calls; errors are read per command. On a
// *redis.ClusterClient the pipeline goes out as one round trip per node.
//
// Calls a server answered NOSCRIPT (its script cache is empty: a restart,
// a failover, SCRIPT FLUSH) are sent again in a second pipeline: the first
// of them for each server as EVAL, which caches the script there, and the
// others, behind it on the same connection, by digest again. Only calls
// still refused then go out as EVAL. Sending each failed call as EVAL had
// cost a freshly restarted Redis the script's whole text per key (16 KiB
// for a fill: 16 MB for one batch of 1,000 keys, from every node at once,
// just as Redis came back).
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
	again := noScript(callCmds, nil)
	if len(again) > 1 {
		heads := firstPerServer(ctx, rdb, calls, again)
		pipe := rdb.Pipeline()
		for _, i := range again {
			if heads[i] {
				callCmds[i] = s.Eval(ctx, pipe, calls[i].Keys, calls[i].Args...)
			} else {
				callCmds[i] = s.EvalSha(ctx, pipe, calls[i].Keys, calls[i].Args...)
			}
		}
		_, _ = pipe.Exec(ctx)
		again = noScript(callCmds, again)
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

// noScript returns the indexes among idx (all of cmds when nil) of the
// commands a server answered NOSCRIPT.
func noScript(cmds []*redis.Cmd, idx []int) []int {
	n := len(idx)
	if idx == nil {
		n = len(cmds)
	}
	var out []int
	for k := range n {
		i := k
		if idx != nil {
			i = idx[k]
		}
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			out = append(out, i)
		}
	}
	return out
}

// firstPerServer marks, of the calls idx, the first that goes to each
// server: on a cluster, each call's master by its first key; on a Ring,
// its shard; otherwise the client has one server, and the first call is
// marked. A call whose server cannot be told is marked too.
func firstPerServer(ctx context.Context, rdb redis.UniversalClient, calls []Call, idx []int) map[int]bool {
	heads := map[int]bool{}
	var serverOf func(key string) (*redis.Client, error)
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		serverOf = func(key string) (*redis.Client, error) { return c.MasterForKey(ctx, key) }
	case *redis.Ring:
		serverOf = c.GetShardClientForKey
	default:
		heads[idx[0]] = true
		return heads
	}
	seen := map[*redis.Client]bool{}
	for _, i := range idx {
		if len(calls[i].Keys) == 0 {
			heads[i] = true
			continue
		}
		srv, err := serverOf(calls[i].Keys[0])
		if err != nil || !seen[srv] {
			heads[i] = true
			if err == nil {
				seen[srv] = true
			}
		}
	}
	return heads
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
