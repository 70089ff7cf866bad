package guard

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/stampede-go/stampede/guard/internal/breaker"
	"github.com/stampede-go/stampede/guard/internal/sched"

	"github.com/redis/go-redis/v9"
)

// lateness tells how late this process runs its goroutines: a
// *sched.Gauge, or a test's.
type lateness interface{ Late() time.Duration }

// processLate is the Groups' gauge: lateness is the process's.
var processLate sched.Gauge

// redisTimeout bounds a Redis call: RedisTimeout, plus how late this
// process runs its goroutines lately (at most sched.MaxPad RedisTimeouts
// more). On a starved process a reply waits to be read; RedisTimeout
// measures Redis, not the run queue.
func (g *Group) redisTimeout() time.Duration { return sched.Pad(g.opts.RedisTimeout, g.late.Late()) }

// starved reports whether a goroutine of this process waited a whole
// RedisTimeout to run lately: then a Redis call that timed out may have
// had its reply waiting, and the timeout is no verdict on Redis.
func (g *Group) starved() bool { return g.late.Late() >= g.opts.RedisTimeout }

// readReply is the outcome of guard_read.lua.
type readReply struct {
	raw     []byte
	present bool
	now     int64 // Redis clock, ms
	x       int64 // > 0: lease won (fence); < 0: -remaining lease of the holder
	// capped: the lease was not tried, the key's tag is full (MaxTagKeys)
	capped bool
}

// read runs the one-round-trip read: the entry, Redis's clock and, when the
// entry is not fresh (or force is set, for early refresh), an attempt at the
// refresh lease. A caller that finds nothing usable is registered as a
// waiter for the fill.
func (g *Group) read(ctx context.Context, nm names, force bool) (readReply, error) {
	forceArg := "0"
	if force {
		forceArg = "1"
	}
	sent := g.clk.local()
	keys := nm.readKeys()
	var v []any
	err := g.toMaster(ctx, nm.user, keys[0], func() (err error) {
		v, err = g.readQ.For(ctx, keys[0]).Call(ctx, lua.Call{Keys: keys, Args: []any{g.leaseArg, g.chanArg, g.waitArg, g.leaseArg, forceArg, g.capArg}})
		return err
	})
	if err != nil {
		g.redisFailed("read", err)
		return readReply{}, err
	}
	g.br.Success()
	rr, err := g.readReplyOf(nm, v, sent)
	if err != nil {
		g.redisFailed("read", err)
	}
	return rr, err
}

// peekRead reads the entry and Redis's clock, trying no lease and
// registering no waiter.
func (g *Group) peekRead(ctx context.Context, nm names) (readReply, error) {
	sent := g.clk.local()
	v, err := g.peekScript(ctx, nm)
	if err != nil {
		g.redisFailed("peek", err)
		return readReply{}, err
	}
	g.br.Success()
	rr, err := g.readReplyOf(nm, v, sent)
	if err != nil {
		g.redisFailed("peek", err)
	}
	return rr, err
}

// peekScript sends the read script for nm with no lease and no waiter
// (Peek's read, and the breaker's probe), bounded by RedisTimeout.
func (g *Group) peekScript(ctx context.Context, nm names) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, g.redisTimeout())
	defer cancel()
	return lua.GuardRead.Run(ctx, g.rdb, nm.readKeys(), 0, "", 0, g.keepArg, "0").Slice()
}

// readReplyOf decodes a reply v of guard_read.lua for the key named nm,
// sent at local time sent.
func (g *Group) readReplyOf(nm names, v []any, sent int64) (readReply, error) {
	var rr readReply
	if len(v) < 3 || len(v) > 5 {
		return rr, fmt.Errorf("guard: unexpected read reply of %d elements", len(v))
	}
	if len(v) >= 4 {
		g.foreign(nm, v[3])
	}
	rr.capped = len(v) == 5
	if s, ok := v[0].(string); ok {
		// No copy: the value is read-only from here on (see Result.Value).
		rr.raw, rr.present = unsafe.Slice(unsafe.StringData(s), len(s)), true
	}
	rr.now, _ = v[1].(int64)
	rr.x, _ = v[2].(int64)
	g.clk.observe(rr.now, sent)
	return rr, nil
}

// foreign reports, through the Corrupt hook, the names of a key under which
// a script found (and dropped) a value the guard did not write: a comma
// list in what, "" for none.
func (g *Group) foreign(nm names, what any) {
	s, _ := what.(string)
	if s == "" {
		return
	}
	if h := g.opts.Hooks.Corrupt; h != nil {
		h(nm.user, fmt.Errorf("guard: a foreign value under the %s name of the key was dropped", s))
	}
}

func (g *Group) redisFailed(op string, err error) {
	if errors.Is(err, errMasterDown) {
		return // not sent: the master's breaker is open (masters.go)
	}
	g.reportRedisError(op, err)
	g.br.Record(err, nil)
}

// reportRedisError tells the hook of a failed Redis call, and has a
// cluster client reload its slot map when the failure says a node is
// unwell.
func (g *Group) reportRedisError(op string, err error) {
	if h := g.opts.Hooks.RedisError; h != nil {
		h(op, err)
	}
	if cc, ok := g.rdb.(*redis.ClusterClient); ok && !errors.Is(err, context.Canceled) && breaker.Unwell(err) {
		// A dead master sends no MOVED, and go-redis otherwise reloads the
		// slot map only every ClusterStateReloadInterval (60s by default):
		// after a failover the promoted replica would go unused that long.
		// The reload is asynchronous and go-redis coalesces bursts of them.
		cc.ReloadState(context.Background())
	}
}
