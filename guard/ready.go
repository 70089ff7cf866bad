package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/notify"
)

// ReadyTimeout bounds Ready when its ctx has no deadline: under a Kubernetes
// probe's default timeout (1s).
const ReadyTimeout = 500 * time.Millisecond

// ReadyError is one failed check of Ready. Ready joins one per failed check
// (errors.Join); errors.As finds the first.
type ReadyError struct {
	// Check names what failed:
	//
	//	"redis"         Redis did not answer TIME (on every master of a
	//	                cluster) within the deadline, or answered with an
	//	                error (LOADING, MASTERDOWN, NOPERM, ...).
	//	"scripts"       a guard script could not be run or loaded: scripting
	//	                is disabled or refused to this user, its keys are
	//	                outside the user's key patterns, or the server
	//	                cannot compile it.
	//	"subscription"  Redis has not confirmed the Group's subscription to
	//	                its fill channel (refused, or not yet made): waiters
	//	                on another node's fill are woken by their fallback
	//	                timer only, up to WaitTimeout late.
	Check string
	Err   error
}

func (e *ReadyError) Error() string { return "guard: not ready: " + e.Check + ": " + e.Err.Error() }

func (e *ReadyError) Unwrap() error { return e.Err }

// Ready reports whether the Group can coordinate through Redis, for a
// readiness probe: it returns nil, or one *ReadyError per failed check,
// joined. It checks, concurrently and within ctx's deadline (ReadyTimeout
// when ctx has none), that
//
//   - Redis answers (TIME, on every master of a *redis.ClusterClient);
//   - the guard's scripts run: each is called by EVALSHA (EVAL, which
//     loads it, when the server does not have it) with arguments the
//     script rejects before it touches a key, on names of a key of this
//     Group's Namespace, so that the check writes nothing and needs no
//     command beyond those the guard sends (the least-privilege ACL of
//     docs/security.md). On a cluster the scripts are so checked on one
//     master; the others load them on first use;
//   - Redis has confirmed the subscription to the Group's fill channel.
//     Once confirmed it stays so (go-redis subscribes again after a
//     reconnect), so after an outage it is the first check that fails.
//
// A Group that is not ready still answers its callers (degraded: through
// this process alone, or woken late); Ready says whether it coordinates
// with the fleet. Ready returns ErrClosed after Close.
func (g *Group) Ready(ctx context.Context) error {
	if g.closed.Load() {
		return ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ReadyTimeout)
		defer cancel()
	}
	// The subscription cannot come up while Redis does not answer: stop
	// waiting for it when the TIME check fails.
	subCtx, stopSub := context.WithCancelCause(ctx)
	defer stopSub(nil)
	var redisErr, scriptsErr, subErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := g.redisTime(ctx); err != nil {
			redisErr = &ReadyError{"redis", err}
			stopSub(errRedisDown)
		}
	})
	wg.Go(func() {
		if err := g.scriptsRun(ctx); err != nil {
			scriptsErr = &ReadyError{"scripts", err}
		}
	})
	wg.Go(func() {
		if err := g.hub.Ready(subCtx); err != nil && !g.hub.Subscribed() {
			if errors.Is(context.Cause(subCtx), errRedisDown) {
				err = errRedisDown
			}
			subErr = &ReadyError{"subscription", fmt.Errorf("fill channel not subscribed: %w", err)}
		}
	})
	wg.Wait()
	return errors.Join(redisErr, scriptsErr, subErr)
}

var errRedisDown = errors.New("guard: Redis does not answer")

// redisTime sends TIME to Redis, to every master of a cluster. TIME rather
// than PING: the least-privilege ACL grants it (the scripts call it).
func (g *Group) redisTime(ctx context.Context) error {
	if cc, ok := g.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.Time(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
			return nil
		})
	}
	return g.rdb.Time(ctx).Err()
}

// readyKey is the key whose names the script check passes: its entry is
// never read or written (each script refuses the check's arguments first).
const readyKey = "stampede.ready"

// scriptsRun calls each guard script with arguments it rejects before
// touching a key, and expects that rejection: a reply that proves the
// script is loaded (or was loaded by EVAL), compiles, and may run on this
// Group's names as this user.
func (g *Group) scriptsRun(ctx context.Context) error {
	nm := g.names(readyKey)
	probes := []struct {
		name   string
		script *redis.Script
		keys   []string
		args   []any
		reject string // the start of the script's rejection
	}{
		{"guard_read", lua.GuardRead, nm.keys[:4], []any{"-"}, "ERR guard_read: bad lease"},
		{"guard_fill", lua.GuardFill, nm.keys, []any{"-"}, "ERR guard_fill: bad fence"},
		{"guard_lease", lua.GuardLease, nm.keys[1:2], []any{"", "-"}, "ERR guard_lease: bad milliseconds"},
		{"guard_invalidate", lua.GuardInvalidate, nm.keys, []any{"-"}, "ERR guard_invalidate: bad fence retention"},
	}
	var errs []error
	for _, p := range probes {
		err := p.script.Run(ctx, g.rdb, p.keys, p.args...).Err()
		switch {
		case err != nil && strings.HasPrefix(err.Error(), p.reject):
		case err == nil:
			errs = append(errs, fmt.Errorf("%s: ran with the check's arguments (want its rejection %q)", p.name, p.reject))
		default:
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			if rerr := redis.Error(nil); !errors.As(err, &rerr) {
				return errors.Join(errs...) // no reply: the rest would fail alike
			}
		}
	}
	return errors.Join(errs...)
}

// unready reports to Hooks.Unready that the fill subscription New started
// failed (subErr: refused, or not confirmed within WaitTimeout), with what
// TIME says of Redis. Not after Close.
func (g *Group) unready(subErr error) {
	h := g.opts.Hooks.Unready
	if h == nil || errors.Is(subErr, notify.ErrClosed) || g.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.RedisTimeout)
	defer cancel()
	var redisErr error
	if err := g.redisTime(ctx); err != nil {
		redisErr = &ReadyError{"redis", err}
	}
	if errors.Is(subErr, context.DeadlineExceeded) {
		subErr = fmt.Errorf("not confirmed within WaitTimeout (%v): %w", g.opts.WaitTimeout, subErr)
	}
	h(errors.Join(redisErr, &ReadyError{"subscription", fmt.Errorf("fill channel not subscribed: %w", subErr)}))
}
