package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/breaker"
	"github.com/stampede-go/stampede/guard/internal/commit"
	"github.com/stampede-go/stampede/guard/internal/tier"
)

// One master down on a cluster. The Group's breaker opens only when no
// server answers (see Options.BreakerFailures); a master that stops
// answering while the others do is met by a breaker of its own. After
// BreakerFailures failures in a row on it, the calls of its keys skip
// Redis at once and are served as while Redis is down (degrade.go: from
// this node's reserve, else by one load of this node's), rather than each
// waiting RedisTimeout for a master that will not answer; after
// BreakerCooldown a probe tries it again, in the background. The other
// masters' keys are coordinated as before. The reserve is emptied only when the Group's
// breaker and every master's are past their failures.

// errMasterDown is what a Redis call of a key returns, without being sent,
// while the breaker of the key's master is open.
var errMasterDown = errors.New("guard: the key's Redis master is failing; served without Redis until it answers")

// masterBreakers returns the breakers of rdb's masters: nil unless rdb is
// a cluster client.
func (g *Group) masterBreakers(rdb redis.UniversalClient, o Options) *commit.Shards[*breaker.Breaker] {
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	threshold, cooldown, report := o.BreakerFailures, o.BreakerCooldown, o.Hooks.RedisError
	return commit.NewShards(rdb, true, func(master *redis.Client) *breaker.Breaker {
		b := &breaker.Breaker{Threshold: threshold, Cooldown: cooldown, Recovered: g.clearReserve, Starved: g.starved, Probe: g.probe}
		addr := ""
		if master != nil {
			addr = master.Options().Addr
		}
		b.Hook = func(open bool) {
			if !open {
				return
			}
			// Probed in the background, with the key of the last call
			// that reached it: a master that answers again closes its
			// breaker with no call to its keys, and one a failover
			// replaced closes it as the key's new master answers (else
			// a failback would find it open).
			g.probeWhileOpen(b, b.LastKey)
			if report != nil && addr != "" {
				report("master", fmt.Errorf("guard: Redis master %s failed %d calls in a row: its keys are served without Redis, tried again every %v",
					addr, threshold, cooldown))
			}
		}
		return b
	})
}

// toMaster runs f, a Redis call of key (whose entry is named name),
// through the breaker of name's master (on a cluster; on any other client
// it runs f): while that breaker is open it returns errMasterDown without
// running f. ctx is the call's: its own end is no verdict on the master.
func (g *Group) toMaster(ctx context.Context, key, name string, f func() error) error {
	if g.masters == nil {
		return f()
	}
	b := g.masters.For(ctx, name)
	probe, ok := b.AllowKey(key)
	if !ok {
		return errMasterDown
	}
	// Settled however f ends (a panic, runtime.Goexit).
	defer b.Release(probe)
	err := f()
	b.Record(err, ctx.Err())
	return err
}

// masterOpen reports whether the breaker of name's master is open.
func (g *Group) masterOpen(ctx context.Context, name string) bool {
	return g.masters != nil && g.masters.For(ctx, name).Open()
}

// clearReserve empties the reserve once coordination resumed everywhere
// and settled: the Group's breaker saw no failure for a cooldown, the tier
// is not coming back from a lost report connection, and stayed on for a
// cooldown if it came back, every current master's breaker is past its
// failures (a master still failing has keys served from the reserve; one
// a failover replaced has none, and is never called again to recover),
// and Redis answered since the tier last handed its copies over (confirm
// tries it when nothing did). What is only a matter of time is waited for
// with a timer (clearLater), so that the reserve is emptied with no call
// to come: a recovered Redis may be called by nobody, its keys all served
// from the tier. It reports whether it emptied the reserve or armed that
// timer; when it did neither, what it waits for calls it again: the
// breaker still failing (its Recovered, at a later success; the one left
// failing may be a master a failover is replacing, which the client's
// slot map still names, and which no success will ever report
// recovered), or the tier's return (settleReserve). Besides those, the
// tier's handover arms the timer (OnHanded): no failure the breaker
// counts may follow it.
func (g *Group) clearReserve() bool { return g.clearReserveWith(g.loc) }

// clearReserveWith is clearReserve with loc, the Group's tier: the tier's
// own callbacks may run before New has set g.loc.
func (g *Group) clearReserveWith(loc *tier.Tier) bool {
	if !g.reserve.Holding() {
		return true // nothing to empty: no timer, no probe
	}
	// What was handed in after this look is not dropped (ClearAt).
	epoch := g.reserve.Epoch()
	quiet, ok := g.br.QuietFor()
	if !ok {
		g.nudge(&g.br, g.probeKey)
		return false
	}
	wait := max(g.br.Settle-quiet, 0)
	if away, returning := loc.ReturningFor(); returning {
		// Its report connection is coming back: the reserve is what this
		// node holds meanwhile. Emptied now, a call Redis failed before
		// the tier was back and had its copies found neither, and loaded.
		// Not for long, though: a report path broken while Redis answers
		// must not keep values this node may no longer read.
		if left := tierReturnWait(g.opts) - min(quiet, away); left > 0 {
			g.clearLater(max(left, wait), loc)
			return true
		}
	} else if at := g.liveAt.Load(); at != 0 {
		wait = max(wait, g.opts.BreakerCooldown-time.Duration(tier.Nanotime()-at))
	}
	failing := false
	if g.masters != nil {
		g.masters.EachCurrent(context.Background(), func(b *breaker.Breaker) {
			if b.Failing() {
				failing = true
				g.nudge(b, b.LastKey)
			}
		})
	}
	switch {
	case failing:
		return false
	case wait > 0:
		g.clearLater(wait, loc)
	case !g.answeredSinceHanded():
		g.confirm(loc)
	default:
		if loc.Serving() {
			// The tier is back: the keys it holds copies of again leave
			// the reserve now. If it holds only some, the others wait
			// for the tier, or for the bound.
			every := g.tierHoldsReserve(loc)
			if at := g.liveAt.Load(); !every && at != 0 && time.Duration(tier.Nanotime()-at) < tierReturnWait(g.opts) {
				g.clearLater(g.opts.BreakerCooldown, loc)
				return true
			}
		}
		// Nothing is dropped that was handed in since the look (the tier
		// stopped, a load ended): it is kept until the next call of this
		// function empties it (docs/operations.md, "What the reserve may
		// serve meanwhile").
		g.reserve.ClearAt(epoch)
	}
	return true
}

// answeredSinceHanded reports whether Redis answered this node since the
// tier last handed its copies to the reserve: a call succeeded, or the
// tier came back. Quiet alone says no call failed, which no call at all
// says too (a node left idle while Redis is down).
func (g *Group) answeredSinceHanded() bool {
	h := g.handedAt.Load()
	if h == 0 || g.liveAt.Load() >= h {
		return true
	}
	return g.br.AnsweredSince(time.Now().Add(-time.Duration(tier.Nanotime() - h)))
}

// confirm tries Redis once in the background for a reserve that is to be
// emptied with no answer seen since the tier handed its copies over, and
// looks again: at once if Redis answered, else a cooldown later (a
// failure the breaker counts has its own recovery look as well).
func (g *Group) confirm(loc *tier.Tier) {
	g.goBackground(func() { // the key may read the cluster's slot map
		k := g.probeKey()
		g.probe(k, func(err error) {
			if err != breaker.ErrNoVerdict {
				g.br.Record(err, nil)
			}
			if err == nil {
				g.clearLater(0, loc)
			} else {
				g.clearLater(g.opts.BreakerCooldown, loc)
			}
		})
	})
}

// tierReturnWait is how long, Redis answering, the reserve waits for the
// tier's report connection to come back before it is emptied all the
// same: five of the tier's longest backoffs between attempts, plus two
// cooldowns (12 s by default). Under a path that flaps, data calls may
// succeed for seconds while the report connection, cut before it is
// confirmed, backs off: a node's tier was seen away 2.8 s so, Redis
// answering its calls for 2.4 s (TestFlappingRedisKeepsReserve, two CPU
// hogs beside it).
func tierReturnWait(o Options) time.Duration {
	return 5*tier.MaxTrackBackoff + 2*o.BreakerCooldown
}

// nudge tries Redis once in the background for b, a breaker whose last
// call failed but which is not open (an open one probes on its own,
// probeWhileOpen), with the key key gives, and records the verdict: a
// node whose calls the tier serves from memory sends Redis nothing that
// could tell b it answers again, and the reserve is not emptied while b
// says its last call failed. Called as the tier comes back, and when the
// reserve is to be emptied but such a breaker holds it: not at every call.
func (g *Group) nudge(b *breaker.Breaker, key func() string) {
	if b.Open() || !b.Failing() {
		return
	}
	g.goBackground(func() { // key may read the cluster's slot map
		if k := key(); k != "" {
			g.probe(k, func(err error) {
				if err != breaker.ErrNoVerdict {
					b.Record(err, nil)
				}
			})
		}
	})
}

// masterGate is a batch read's pass through the breakers of its keys'
// masters (on a cluster): keys of a master whose breaker is open are not
// sent (skip); each master the pipeline reached gets one verdict (one
// round trip per node), failing if any of its commands said it is
// unwell. The zero masterGate (any other client) lets every key through.
type masterGate struct {
	skip []bool             // nil: none skipped
	of   []*breaker.Breaker // each key's master's breaker
	by   map[*breaker.Breaker]*gateState
}

type gateState struct {
	probe uint64
	sent  bool
	err   error // the first unwell error of the master's commands
}

// gateMasters asks the breaker of the master of each of nms whether it
// may be called; the caller defers release.
func (g *Group) gateMasters(ctx context.Context, nms []names) *masterGate {
	gt := &masterGate{}
	if g.masters == nil {
		return gt
	}
	gt.of, gt.by = make([]*breaker.Breaker, len(nms)), map[*breaker.Breaker]*gateState{}
	open := map[*breaker.Breaker]bool{}
	for i := range nms {
		b := g.masters.For(ctx, nms[i].entry)
		gt.of[i] = b
		if _, asked := gt.by[b]; !asked && !open[b] {
			if probe, ok := b.AllowKey(nms[i].user); ok {
				gt.by[b] = &gateState{probe: probe}
			} else {
				open[b] = true
			}
		}
		if open[b] {
			if gt.skip == nil {
				gt.skip = make([]bool, len(nms))
			}
			gt.skip[i] = true
		}
	}
	return gt
}

// note records the outcome of key i's command.
func (gt *masterGate) note(i int, err error) {
	if gt.of == nil {
		return
	}
	st := gt.by[gt.of[i]]
	if st == nil {
		return
	}
	st.sent = true
	if err != nil && st.err == nil && breaker.Unwell(err) {
		st.err = err
	}
}

// settle gives each master the pipeline reached its verdict; callerErr is
// the error of the batch's ctx (its own end is no verdict). It reports
// whether a master answered.
func (gt *masterGate) settle(callerErr error) (answered bool) {
	for b, st := range gt.by {
		if st.sent {
			b.Record(st.err, callerErr)
			answered = answered || st.err == nil
		}
	}
	return answered
}

// release settles the probes no verdict settled.
func (gt *masterGate) release() {
	for b, st := range gt.by {
		b.Release(st.probe)
	}
}

// probe is a breaker's Probe: in a goroutine Close waits for, bounded by
// RedisTimeout, it reads key's entry as Peek does (the read script, with
// no lease and no waiter), then gives the verdict (ErrNoVerdict once the
// Group is closing). A keyed script, not a PING or a TIME: a server that
// answers those while it refuses the calls (LOADING a dataset,
// CLUSTERDOWN, an ACL without the scripts) would close the breaker only
// for the calls to open it again, each time emptying the reserve.
func (g *Group) probe(key string, verdict func(error)) {
	started := g.goBackground(func() {
		_, err := g.peekScript(context.Background(), g.names(key))
		if err != nil {
			g.reportRedisError("probe", err)
		}
		verdict(err)
	})
	if !started {
		verdict(breaker.ErrNoVerdict)
	}
}

// tierHoldsReserve drops from the reserve the keys the tier holds copies
// of again, and reports whether that was every key it kept.
func (g *Group) tierHoldsReserve(loc *tier.Tier) bool {
	all := true
	for _, k := range g.reserve.Keys() {
		if loc.Holds(k) {
			g.reserve.Remove(k)
		} else {
			all = false
		}
	}
	return all
}
