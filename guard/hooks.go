package guard

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
)

// Hooks are optional funcs for metrics and logs (nil ones are skipped),
// called on the goroutine that saw the event: they must be quick and must
// not block. key is the caller's key.
type Hooks struct {
	// Hit: a fresh entry answered the call (a value, or a not-found or a
	// failure remembered: NegativeFor, ErrorBackoff); local: from the
	// in-process tier.
	Hit func(key string, age time.Duration, local bool)
	// Stale: a stale entry answered the call while a refresh runs or
	// backs off.
	Stale func(key string, age time.Duration)
	// Miss: no usable value; the caller loads (a key marked pass
	// included), waits or shares a flight. Each call that is not
	// Degraded reports one of Hit, Stale and Miss.
	Miss func(key string)
	// Coalesced: the caller shared a flight of this process.
	Coalesced func(key string)
	// Load: a loader call ended, after d, with err.
	Load func(key string, d time.Duration, err error)
	// Lease: this node won a key's refresh lease, or found it held
	// (by another node, or by a refresh of this node's own still
	// running: a stale key's later callers find it so).
	Lease func(key string, won bool)
	// Woken: a wait for another node's fill ended (per key of a batch);
	// notified: by the fill's notification, not a poll or a timeout.
	Woken func(key string, notified bool, waited time.Duration)
	// RefreshError: a background refresh failed; stale is served.
	RefreshError func(key string, err error)
	// FillRejected: a newer value or an Invalidate beat this node's fill.
	FillRejected func(key string)
	// RedisError: a Redis call failed; op names it ("track": the tier's
	// report connection was lost or refused, once per outage; "master":
	// on a cluster, one master failed BreakerFailures calls in a row and
	// its keys are served without Redis, once each time that opens;
	// "probe": an open breaker's probe, sent in the background a
	// BreakerCooldown after its last failure, found Redis still down).
	RedisError func(op string, err error)
	// Breaker: the Redis breaker opened or closed, once per change. An
	// open breaker is probed a BreakerCooldown after its last failure,
	// calls or none, so an idle Group reports it closed once Redis
	// answers; Close reports one left open closed.
	Breaker func(open bool)
	// Corrupt: an undecodable entry, or foreign data under one of the
	// key's names, was dropped and treated as a miss.
	Corrupt func(key string, err error)
	// Oversize: a load returned size bytes, over MaxValueBytes: not
	// stored in Redis.
	Oversize func(key string, size int)
	// TagFull: key was loaded, not stored: its tag was full (MaxTagKeys).
	TagFull func(key string)
	// Batch: a GetMany or FetchMany call finished its work. The hooks
	// above run for each of its keys as well.
	Batch func(BatchStats)
	// BatchLoad: a batch loader call ended. Load runs for each of its
	// keys as well.
	BatchLoad func(BatchLoadStats)
	// Unready: the fill subscription New starts failed, with a
	// *ReadyError per failed check; once per Group, which still serves.
	Unready func(err error)
	// Ready: the fill subscription Unready reported is up after all
	// (Redis answered again), or the Group was closed before it was (so
	// that a gauge of unready Groups drops it); once, after Unready,
	// never without it.
	Ready func()
	// LocalTier: the in-process tier started serving or stopped. why is
	// "" when on, else "disabled", "unsupported", "connecting", "lost",
	// "refused" or "closed" (the last three call for an operator).
	LocalTier func(on bool, why string)
	// HotKeys: a window of hot keys ended (every 5s, Options.HotKeys);
	// hk is what HotKeys returns until the next. Close reports an empty
	// one.
	HotKeys func(hk HotKeys)
}

// MergeHooks returns Hooks that call each of hs in turn.
func MergeHooks(hs ...Hooks) Hooks {
	var m Hooks
	for _, h := range hs {
		m.Hit = chain3(m.Hit, h.Hit)
		m.Stale = chain2(m.Stale, h.Stale)
		m.Miss = chain1(m.Miss, h.Miss)
		m.Coalesced = chain1(m.Coalesced, h.Coalesced)
		m.Load = chain3(m.Load, h.Load)
		m.Lease = chain2(m.Lease, h.Lease)
		m.Woken = chain3(m.Woken, h.Woken)
		m.RefreshError = chain2(m.RefreshError, h.RefreshError)
		m.FillRejected = chain1(m.FillRejected, h.FillRejected)
		m.RedisError = chain2(m.RedisError, h.RedisError)
		m.Breaker = chain1(m.Breaker, h.Breaker)
		m.Corrupt = chain2(m.Corrupt, h.Corrupt)
		m.Oversize = chain2(m.Oversize, h.Oversize)
		m.TagFull = chain1(m.TagFull, h.TagFull)
		m.Batch = chain1(m.Batch, h.Batch)
		m.BatchLoad = chain1(m.BatchLoad, h.BatchLoad)
		m.Unready = chain1(m.Unready, h.Unready)
		m.Ready = chain0(m.Ready, h.Ready)
		m.LocalTier = chain2(m.LocalTier, h.LocalTier)
		m.HotKeys = chain1(m.HotKeys, h.HotKeys)
	}
	return m
}

func chain0(f, g func()) func() {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func() { f(); g() }
}

func chain1[A any](f, g func(A)) func(A) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(a A) { f(a); g(a) }
}

func chain2[A, B any](f, g func(A, B)) func(A, B) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(a A, b B) { f(a, b); g(a, b) }
}

func chain3[A, B, C any](f, g func(A, B, C)) func(A, B, C) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(a A, b B, c C) { f(a, b, c); g(a, b, c) }
}

// LogHooks returns Hooks that log to l one line per change of state (the
// breaker, the tier, failed loads, corrupt data), not per attempt.
func LogHooks(l *slog.Logger) Hooks {
	ctx := context.Background()
	// While the breaker is open, the probes' failures are not logged:
	// one line says the breaker opened, one that it closed, with how many
	// calls failed between.
	var open atomic.Bool
	var quiet atomic.Int64
	return Hooks{
		Load: func(key string, d time.Duration, err error) {
			if err != nil && !isQuiet(err) {
				l.LogAttrs(ctx, slog.LevelWarn, "stampede: load failed",
					slog.Int("key_len", len(key)), slog.Duration("took", d), slog.Any("err", err))
			}
		},
		RefreshError: func(key string, err error) {
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: refresh failed, serving stale",
				slog.Int("key_len", len(key)), slog.Any("err", err))
		},
		LocalTier: func(on bool, why string) {
			switch {
			case on:
				l.LogAttrs(ctx, slog.LevelInfo, "stampede: in-process tier on")
			case why == tier.WhyLost || why == tier.WhyRefused:
				l.LogAttrs(ctx, slog.LevelWarn, "stampede: in-process tier off; every hit reads Redis", slog.String("why", why))
			default:
				l.LogAttrs(ctx, slog.LevelInfo, "stampede: in-process tier off", slog.String("why", why))
			}
		},
		Breaker: func(opened bool) {
			open.Store(opened)
			if opened {
				quiet.Store(0)
				l.LogAttrs(ctx, slog.LevelError, "stampede: Redis breaker open; serving through this node alone")
			} else {
				l.LogAttrs(ctx, slog.LevelInfo, "stampede: Redis breaker closed; coordination resumed",
					slog.Int64("failed_while_open", quiet.Load()))
			}
		},
		Corrupt: func(key string, err error) {
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: corrupt cache entry treated as a miss",
				slog.Int("key_len", len(key)), slog.Any("err", err))
		},
		Oversize: func(key string, size int) {
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: value over MaxValueBytes not stored; each node keeps its own copy",
				slog.Int("key_len", len(key)), slog.Int("size", size))
		},
		RedisError: func(op string, err error) {
			if open.Load() {
				quiet.Add(1)
				return
			}
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: Redis call failed", slog.String("op", op), slog.Any("err", err))
		},
		Unready: func(err error) {
			l.LogAttrs(ctx, slog.LevelWarn, "stampede: fill subscription not up; waiters poll until it is", slog.Any("err", err))
		},
		Ready: func() {
			l.LogAttrs(ctx, slog.LevelInfo, "stampede: fill subscription up")
		},
	}
}

// isQuiet reports load outcomes that are answers, not failures: a
// negative entry, a value not stored, and a Pass (a complete answer that
// is not shared: the HTTP middleware's response with Set-Cookie, say,
// which would otherwise log a line per request of its URL).
func isQuiet(err error) bool {
	if pe := privateOf(err); pe != nil && pe.pass > 0 {
		return true
	}
	return errors.Is(err, ErrNotFound) || isNoStore(err)
}

// missOnce reports c's miss to Hooks.Miss, once however many turns the
// call takes (a call that goes again after another caller's private
// answer reads again).
func (g *Group) missOnce(c *call) {
	if !c.missed {
		c.missed = true
		g.missHook(c.key)
	}
}

// missHook reports a miss to Hooks.Miss.
func (g *Group) missHook(key string) {
	if h := g.opts.Hooks.Miss; h != nil {
		h(key)
	}
}

// wokenHook reports to Hooks.Woken how a wait for another node's fill that
// began at start ended, once per wait and only if it woke at all: notified
// says whether its last wake-up was the fill's notification.
func (g *Group) wokenHook(key string, woke, notified bool, start time.Time) {
	if h := g.opts.Hooks.Woken; h != nil && woke {
		h(key, notified, time.Since(start))
	}
}
