package guard

import (
	"context"
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/stampede-go/stampede/guard/internal/breaker"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"
)

// The Redis side of batches: the same scripts as the single-key path, sent
// in one pipeline per batch, which go-redis sends as one round trip per
// Redis node (a ClusterClient splits a pipeline by the node of each
// command's slot; every script of one key touches one slot).

// batchRead is the outcome of reading one key of a batch.
type batchRead struct {
	rr  readReply
	hit bool        // the fast path's GET found e clearly fresh (rr is unset)
	e   entry.Entry // when hit
	err error
	k   keep      // where a fresh value may go in the in-process tier
	at  time.Time // when it was sent (a batch sharing it may have begun later)
}

// pipeline sends a GET of each name in gets and a call of s for each of
// calls in one pipeline (see lua.Pipeline); on a cluster, one pipeline per
// master, at once. A cluster client's single pipeline is no better on the
// wire (one round trip per node either way), but when one node fails it
// retries that node's commands and, out of time, stamps its error on
// every command, the other masters' answered ones too: one master down
// would fail every batch's every key.
func (g *Group) pipeline(ctx context.Context, gets []string, s *redis.Script, calls []lua.Call) ([]*redis.StringCmd, []*redis.Cmd) {
	if g.masters == nil || len(gets)+len(calls) < 2 {
		return lua.Pipeline(ctx, g.rdb, gets, s, calls)
	}
	type part struct {
		gets       []string
		calls      []lua.Call
		gIdx, cIdx []int
	}
	var order []*breaker.Breaker
	parts := map[*breaker.Breaker]*part{}
	partOf := func(name string) *part {
		b := g.masters.For(ctx, name)
		p := parts[b]
		if p == nil {
			p = &part{}
			parts[b] = p
			order = append(order, b)
		}
		return p
	}
	for i, name := range gets {
		p := partOf(name)
		p.gets, p.gIdx = append(p.gets, name), append(p.gIdx, i)
	}
	for i, c := range calls {
		p := partOf(c.Keys[0])
		p.calls, p.cIdx = append(p.calls, c), append(p.cIdx, i)
	}
	if len(parts) == 1 {
		return lua.Pipeline(ctx, g.rdb, gets, s, calls)
	}
	getCmds, callCmds := make([]*redis.StringCmd, len(gets)), make([]*redis.Cmd, len(calls))
	var wg sync.WaitGroup
	for _, b := range order {
		p := parts[b]
		wg.Go(func() {
			gc, cc := lua.Pipeline(ctx, g.rdb, p.gets, s, p.calls)
			for j, c := range gc {
				getCmds[p.gIdx[j]] = c
			}
			for j, c := range cc {
				callCmds[p.cIdx[j]] = c
			}
		})
	}
	wg.Wait()
	return getCmds, callCmds
}

// batchTimeout is the deadline of a batch's pipeline of n commands that
// carry size bytes of values: RedisTimeout, as for one call, plus the time
// a Redis that answers takes to run that many scripts and this process to
// decode their replies (about 10 µs a key, 410 ms for 40,000 keys; 35-60
// µs under the race detector on a loaded machine: batchKeyTime allows
// 200) and to take in the bytes (batchByteTime). A frozen Redis is found
// that much later by a large batch (2 s more for 10,000 keys); its
// callers' deadlines still bound it. One RedisTimeout for any batch made every
// key of a batch of 40,000 stored ones a load, at every call, and left
// the leases its scripts had won held: the pipeline timed out though
// Redis answered all along.
func (g *Group) batchTimeout(n, size int) time.Duration {
	return g.redisTimeout() + time.Duration(n)*batchKeyTime + time.Duration(size/batchByteTime)*time.Millisecond
}

const (
	batchKeyTime  = 200 * time.Microsecond
	batchByteTime = 64 << 10 // bytes per millisecond allowed
)

// settle reports a pipeline's health to the breaker once (not once per
// key: one batch must not open the breaker by itself).
func (g *Group) settle(op string, err error) {
	if err != nil {
		g.redisFailed(op, err)
		return
	}
	g.br.Success()
}

// readMany reads keys (named nms) in one pipeline: a GET for each key the
// fast path may serve (see fastHit) and, when filled is set (a fill was
// just announced), for every key not forced; the read script (trying the
// lease, registering as a waiter) for the others, with force set for those
// whose force is true. A GET that does not find its key clearly fresh is
// followed by the read script, in a second pipeline for all such keys.
func (g *Group) readMany(ctx context.Context, keys []string, nms []names, force []bool, filled bool) []batchRead {
	out := make([]batchRead, len(keys))
	rctx, cancel := context.WithTimeout(ctx, g.batchTimeout(len(keys), 0))
	defer cancel()
	gate := g.gateMasters(ctx, nms)
	defer gate.release()
	p := g.planReads(keys, nms, force, filled, gate.skip)
	for i, skip := range gate.skip {
		if skip {
			out[i].err = errMasterDown
		}
	}
	keeps := make([]keep, len(keys))
	for i := range keys {
		keeps[i] = g.keepOf(nms[i].entry)
	}
	at := time.Now()
	var failed error
	calls := make([]lua.Call, len(p.callIdx))
	lease := g.batchLease(len(calls))
	for j, i := range p.callIdx {
		calls[j] = g.readCall(nms[i], force != nil && force[i], lease)
	}
	sent := g.clk.local()
	getCmds, callCmds := g.pipeline(rctx, p.gets, lua.GuardRead, calls)
	for j, c := range getCmds {
		gate.note(p.getIdx[j], c.Err())
	}
	retry := g.takeGets(getCmds, p, keys, out, &failed)
	for j, c := range callCmds {
		i := p.callIdx[j]
		out[i] = g.readResult(c, nms[i], sent)
		gate.note(i, c.Err())
		g.keyRead(out[i].err, &failed)
	}
	if len(retry) > 0 && failed == nil {
		calls := make([]lua.Call, len(retry))
		lease := g.batchLease(len(p.callIdx) + len(calls))
		for j, i := range retry {
			calls[j] = g.readCall(nms[i], false, lease)
		}
		sent := g.clk.local()
		_, callCmds := g.pipeline(rctx, nil, lua.GuardRead, calls)
		for j, c := range callCmds {
			i := retry[j]
			out[i] = g.readResult(c, nms[i], sent)
			gate.note(i, c.Err())
			g.keyRead(out[i].err, &failed)
		}
	} else {
		for _, i := range retry {
			out[i].err = failed
		}
	}
	if gate.settle(ctx.Err()) && failed != nil {
		// Another master answered: a master down, not Redis (the
		// Group's breaker weighs that on a cluster; see Breaker.Silence).
		g.br.Success()
	}
	g.settle("read", failed)
	for i := range out {
		out[i].k, out[i].at = keeps[i], at
	}
	return out
}

// readPlan is how readMany reads each key: a GET (gets, the indexes in
// getIdx, the fresh-until a hint expects in getFU, 0 for none) or the
// read script (callIdx).
type readPlan struct {
	gets            []string
	getIdx, callIdx []int
	getFU           []int64
}

// planReads sorts the keys of readMany, but those skip marks.
func (g *Group) planReads(keys []string, nms []names, force []bool, filled bool, skip []bool) readPlan {
	var p readPlan
	now, known := g.clk.now()
	for i, k := range keys {
		if skip != nil && skip[i] {
			continue // its master's breaker is open
		}
		if force == nil || !force[i] {
			// A key with a tag of its own is read by the script, which
			// also checks the tag's invalidation (see tagDropped).
			if h, ok := g.hints.c.Peek(k); ok && !h.pass && h.tinv == "" && known && h.freshUntil-now > fastMargin.Milliseconds() {
				p.gets, p.getIdx, p.getFU = append(p.gets, h.entry), append(p.getIdx, i), append(p.getFU, h.freshUntil)
				continue
			}
			if filled && known && nms[i].tagInv() == "" {
				// A GET costs Redis a small share of a script call, and
				// the keys of a fill pipeline are all fresh.
				p.gets, p.getIdx, p.getFU = append(p.gets, nms[i].entry), append(p.getIdx, i), append(p.getFU, 0)
				continue
			}
		}
		p.callIdx = append(p.callIdx, i)
	}
	return p
}

// takeGets puts in out the hits the GETs of p found clearly fresh, and
// returns the keys to read by the script instead (missing, undecodable, no
// longer clearly fresh, not the entry a hint expected); a GET that says
// Redis is unwell sets *failed.
func (g *Group) takeGets(cmds []*redis.StringCmd, p readPlan, keys []string, out []batchRead, failed *error) (retry []int) {
	for j, c := range cmds {
		i := p.getIdx[j]
		s, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil) || (err != nil && !breaker.Unwell(err)):
			// Missing, or another type under the entry's name (the read
			// script drops and reports it).
			g.hints.c.Remove(keys[i])
			retry = append(retry, i)
			continue
		case err != nil:
			out[i].err, *failed = err, err
			continue
		}
		e, derr := entry.Decode(unsafe.Slice(unsafe.StringData(s), len(s)))
		now, _ := g.clk.now()
		if derr != nil || e.Marker() || e.FreshUntil-now <= fastMargin.Milliseconds() || (p.getFU[j] != 0 && e.FreshUntil != p.getFU[j]) ||
			(e.Oversize && !g.overValue(keys[i], &e, now)) {
			g.hints.c.Remove(keys[i])
			retry = append(retry, i)
			continue
		}
		out[i] = batchRead{hit: true, e: e, rr: readReply{now: now}}
	}
	return retry
}

// keyRead sorts the error of one key's read in a pipeline: one that says
// Redis is unwell fails the pipeline's other keys too (*failed); one about
// the key alone fails that key only, and is reported.
func (g *Group) keyRead(err error, failed *error) {
	switch {
	case err == nil:
	case breaker.Unwell(err):
		*failed = err
	default:
		if h := g.opts.Hooks.RedisError; h != nil {
			h("read", err)
		}
	}
}

// readCall is the read script's call for nm, taking a lease of lease
// (milliseconds, batchLease) when it wins one.
func (g *Group) readCall(nm names, force bool, lease any) lua.Call {
	f := "0"
	if force {
		f = "1"
	}
	return lua.Call{Keys: nm.readKeys(), Args: []any{lease, g.chanArg, g.waitArg, lease, f, g.capArg}}
}

// batchLease is the lease (milliseconds, as the read script takes it) the
// read scripts of a pipeline of n take: firstLease, and the time the
// pipeline is allowed per key (batchKeyTime, as batchTimeout allows it),
// up to LockTTL. The watchdog renews the leases once the pipeline's
// reply is in, but the first script of a pipeline of 30,000 ran seconds
// before that: with firstLease alone its lease ran out meanwhile, another
// node's read took the key over, and both loaded it (1,523 of 30,000
// keys in one run). A read whose caller left still frees its leases
// within the time its pipeline was given.
func (g *Group) batchLease(n int) any {
	if n <= 1 {
		return g.leaseArg
	}
	return ms(min(g.opts.LockTTL, g.firstLease+time.Duration(n)*batchKeyTime))
}

// readResult decodes one reply of guard_read.lua (see read).
func (g *Group) readResult(c *redis.Cmd, nm names, sent int64) batchRead {
	v, err := c.Slice()
	if err != nil {
		return batchRead{err: err}
	}
	rr, err := g.readReplyOf(nm, v, sent)
	return batchRead{rr: rr, err: err}
}

// fillItem is one key's fill in a batch.
type fillItem struct {
	key string
	nm  names
	f   fillSpec
}

// storeMany runs guard_fill.lua for every item in one pipeline; see store.
// A lease whose fill failed is given back in one more pipeline, so that the
// other nodes do not wait it out (the watchdog may have extended it to
// LockTTL); should the fill have run after all, that finds the lease gone.
// It returns each fill's verdict.
func (g *Group) storeMany(ctx context.Context, items []fillItem) []fillVerdict {
	verdicts := make([]fillVerdict, len(items))
	if len(items) == 0 {
		return verdicts
	}
	var unsettled []heldLease
	calls := make([]lua.Call, len(items))
	size := 0 // the values' bytes, for the deadline
	for i, it := range items {
		f := it.f
		size += len(f.value)
		fresh := f.fresh
		if f.mode == fillNone {
			fresh = time.Millisecond // windows are not used, but must be valid
		}
		calls[i] = lua.Call{Keys: it.nm.keys, Args: []any{f.fence, f.value, ms(fresh), ms(f.stale),
			f.loadDur.Microseconds(), string(f.flags), string(f.mode), ms(f.keepLease), it.nm.entry, g.keepArg, 0, "", g.capArg}}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.batchTimeout(len(items), size))
	defer cancel()
	sent := g.clk.local()
	_, cmds := g.pipeline(rctx, nil, lua.GuardFill, calls)
	for _, it := range items {
		if it.f.mode != fillNone {
			g.loc.Changed(it.nm.entry) // as store does
		}
	}
	var failed error
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil {
			failed = err
			if f := items[i].f.fence; f > 0 {
				unsettled = append(unsettled, heldLease{nm: items[i].nm, fence: f})
			}
			g.keepUnfilled(items[i].key, items[i].nm, items[i].f) // as store does, after Changed
			if items[i].f.mode != fillNone {
				verdicts[i] = fillUnknown
			}
			continue
		}
		it := items[i]
		verdicts[i] = g.filled(it.key, it.nm, it.f, v, sent)
	}
	g.settle("fill", failed)
	if breaker.Refused(failed) {
		g.br.Trip() // see fillRefused
	}
	g.releaseLeases(ctx, unsettled)
	return verdicts
}
