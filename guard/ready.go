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

// ReadyTimeout bounds Ready when its ctx has no deadline.
const ReadyTimeout = 500 * time.Millisecond

// ReadyError is one failed check of Ready or Coordinating: Check is
// "redis", "scripts" (no scripting, or an ACL refusing it) or
// "subscription" (waiters are woken late).
type ReadyError struct {
	Check string
	Err   error
}

func (e *ReadyError) Error() string { return "guard: not ready: " + e.Check + ": " + e.Err.Error() }

func (e *ReadyError) Unwrap() error { return e.Err }

// Ready reports whether this node can serve, for a readiness probe. A
// Redis outage does not fail it (the Group serves from memory); what
// waiting will not heal does (an ACL, no Lua), with a *ReadyError. A
// failed TLS handshake counts as Redis not answering (Coordinating
// reports it): a server certificate that expires does so for every pod
// at once, and failing them all would drain the fleet.
func (g *Group) Ready(ctx context.Context) error {
	var out []error
	for _, err := range unjoin(g.Coordinating(ctx)) {
		var re *ReadyError
		if errors.Is(err, ErrClosed) || errors.As(err, &re) && refused(re.Err) {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

// Coordinating reports whether the Group coordinates with the fleet
// through Redis (for dashboards, not readiness): nil, or a *ReadyError
// per failed check. It writes nothing.
func (g *Group) Coordinating(ctx context.Context) error {
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

// unjoin returns the errors err joins (or err alone).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// refused reports whether err says Redis refuses what the guard needs, for
// good: an error reply that waiting will not change (NOPERM, WRONGPASS,
// an unknown command, a script that does not compile, a check the script
// did not reject), as opposed to no answer or a reply of a passing state
// (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY, OOM, ...).
func refused(err error) bool {
	var check *checkError
	if errors.As(err, &check) {
		return true
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := strings.TrimPrefix(reply.Error(), "ERR ")
	for _, p := range passingReplies {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return true
}

// passingReplies are the error replies of a state Redis leaves by itself.
var passingReplies = [...]string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY",
	"NOREPLICAS", "MISCONF", "OOM", "MOVED", "ASK", "max number of clients"}

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
			errs = append(errs, &checkError{fmt.Sprintf("%s: ran with the check's arguments (want its rejection %q)", p.name, p.reject)})
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
// TIME says of Redis. Not after Close. It reports whether it reported.
// tellReady ends, once, the unready state Hooks.Unready reported: the
// fill subscription came up after all, or the Group closed first (a
// gauge of the unready Groups would keep a closed one for good, as it
// would a breaker left open: Close reports that closed too).
func (g *Group) tellReady() {
	if g.unreadyOut.CompareAndSwap(true, false) {
		if h := g.opts.Hooks.Ready; h != nil {
			h()
		}
	}
}

func (g *Group) unready(subErr error) bool {
	h := g.opts.Hooks.Unready
	if h == nil || errors.Is(subErr, notify.ErrClosed) || g.closed.Load() {
		return false
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
	return true
}

// checkError is a script check whose script answered, but not as the
// guard's script would: another script under its hash, or a server that
// runs it differently.
type checkError struct{ msg string }

func (e *checkError) Error() string { return e.msg }
