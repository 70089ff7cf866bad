package guard

import (
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// run resolves the keys idx: one read, then loads, waits and refreshes.
func (b *batch) run(idx []int) {
	g := b.g
	defer b.wg.Wait()
	sr := b.readShared(idx, nil, true, false)
	defer sr.abandon(g)
	var p plan
	for j, i := range idx {
		if sr.own[j] {
			b.sort(i, sr.reads[j], true, &p)
		}
	}
	// Claim the loads of the keys won before the reads are shared, so that
	// the batches sharing them join the loads rather than wait through
	// Redis.
	slots := g.tryClaim(pickAt(b.keys, p.won))
	sr.publish(g)
	if refresh, fences := p.refresh, p.refreshF; len(refresh) > 0 {
		b.background(func(bg *batch) { bg.loadChunks(refresh, fences, nil, sr.at) })
	}
	if early := p.early; len(early) > 0 {
		b.background(func(bg *batch) { bg.refreshEarly(early) })
	}
	// Load first: the leases run from the read.
	b.loadWon(p.won, p.wonF, slots, sr.at)
	var again []int
	for j, i := range idx {
		if !sr.own[j] {
			r := sr.theirs(j)
			if !b.current(i, r) {
				// Another batch's read, sent before this batch began,
				// and a newer value was returned since: read again.
				again = append(again, i)
				continue
			}
			b.sort(i, r, false, &p)
		}
	}
	b.readOwn(again, &p)
	if len(p.failed) > 0 {
		b.degrade(p.failed)
	}
	b.loadOversize(p.over)
	if len(p.waits) > 0 {
		b.wait(p.waits)
	}
}

// readOwn reads the keys idx for this batch alone (not shared), and acts
// on the reads as run does on the reads it owns; what is left to do (keys
// failed, oversized or to wait for) is added to p.
func (b *batch) readOwn(idx []int, p *plan) {
	if len(idx) == 0 {
		return
	}
	g := b.g
	at := time.Now()
	rs := g.readMany(b.ctx, b.pick(idx), b.pickNames(idx), nil, false)
	var q plan
	for k, i := range idx {
		b.sort(i, rs[k], true, &q)
	}
	slots := g.tryClaim(pickAt(b.keys, q.won))
	if refresh, fences := q.refresh, q.refreshF; len(refresh) > 0 {
		b.background(func(bg *batch) { bg.loadChunks(refresh, fences, nil, at) })
	}
	if early := q.early; len(early) > 0 {
		b.background(func(bg *batch) { bg.refreshEarly(early) })
	}
	b.loadWon(q.won, q.wonF, slots, at)
	p.failed = append(p.failed, q.failed...)
	p.over = append(p.over, q.over...)
	p.waits = append(p.waits, q.waits...)
}

// current reports whether r, another batch's read of key i, may answer
// this batch: it was sent after this batch began, or it holds no value, or
// no newer value of the key was returned since it was sent (see
// localTier.current).
func (b *batch) current(i int, r batchRead) bool {
	if r.err != nil {
		return true
	}
	e := r.e
	if !r.hit {
		var st state
		if e, st = b.g.classify(b.keys[i], r.rr); st != fresh && st != stale {
			return true
		}
	}
	return b.g.joinedCurrent(b.start, r.at, b.nms[i].entry, r.k.tk, &e)
}

// loadWon loads the keys idx whose leases the read sent at leased won:
// those claimed in slots at once, the others (a load of theirs already
// runs here) once that load is over.
func (b *batch) loadWon(idx []int, fences []int64, slots []*runningLoad, leased time.Time) {
	var busy, claimed []int
	var busyF, claimedF []int64
	var claimedS []*runningLoad
	for k, i := range idx {
		if slots[k] == nil {
			busy, busyF = append(busy, i), append(busyF, fences[k])
		} else {
			claimed, claimedF, claimedS = append(claimed, i), append(claimedF, fences[k]), append(claimedS, slots[k])
		}
	}
	b.loadChunks(claimed, claimedF, claimedS, leased)
	b.loadChunks(busy, busyF, nil, leased)
}

// plan is what run does with the keys of a batch after its read.
type plan struct {
	won, refresh, early, failed []int
	wonF, refreshF              []int64 // the fences of the leases won
	waits                       []*waiter
	over                        []overKey // fresh oversize markers without a copy here
}

// sort files key i under what its read r calls for. own is false when r is
// another batch's read, shared: that batch acts on the lease r won.
func (b *batch) sort(i int, r batchRead, own bool, p *plan) {
	g, key := b.g, b.keys[i]
	if r.err != nil {
		p.failed = append(p.failed, i)
		return
	}
	early := func(e entry.Entry, now int64) bool {
		return own && g.opts.EarlyRefreshBeta > 0 && !e.Negative && !e.ErrMark && g.earlyRefresh(e, now)
	}
	if r.hit {
		if early(r.e, r.rr.now) {
			p.early = append(p.early, i)
		}
		b.serve(i, r.e, r, Hit, true)
		return
	}
	e, st := g.classify(key, r.rr)
	switch {
	case st == fresh:
		if own {
			g.hint(key, b.nms[i], e.FreshUntil)
		}
		if early(e, r.rr.now) {
			p.early = append(p.early, i)
		}
		b.serve(i, e, r, Hit, true)
		return
	case st == stale:
		if own && r.rr.x > 0 {
			g.leaseHook(key, true)
			p.refresh, p.refreshF = append(p.refresh, i), append(p.refreshF, r.rr.x)
		}
		b.serve(i, e, r, Stale, true)
		return
	}
	if h := g.opts.Hooks.Miss; h != nil {
		h(key)
	}
	switch {
	case st == oversized:
		p.over = append(p.over, overKey{i: i, e: e, now: r.rr.now})
	case r.rr.capped:
		// Its tag is full (MaxTagKeys): loaded with no lease, and its
		// fill (fence 0) is refused.
		g.tagFullHook(key)
		p.won, p.wonF = append(p.won, i), append(p.wonF, 0)
	case r.rr.x > 0 && own:
		g.leaseHook(key, true)
		p.won, p.wonF = append(p.won, i), append(p.wonF, r.rr.x)
	case r.rr.x > 0:
		// Won by the batch whose read this is, which claimed the key's
		// load: wait joins it.
		p.waits = append(p.waits, &waiter{i: i, joinable: true})
	case r.rr.x < 0:
		if own {
			g.leaseHook(key, false)
		}
		p.waits = append(p.waits, &waiter{i: i, holder: time.Duration(-r.rr.x) * time.Millisecond})
	default:
		// "Fresh" to the script yet undecodable: read again at once,
		// trying the lease (see resolveMiss).
		p.waits = append(p.waits, &waiter{i: i, force: true})
	}
}

// background runs f on a batch of the same keys whose outcomes nobody
// reads, in a goroutine Close waits for.
func (b *batch) background(f func(bg *batch)) {
	bg := &batch{g: b.g, ctx: b.ctx, co: b.co, load: b.load, keys: b.keys, nms: b.nms,
		res: make([]keyResult, len(b.keys)), start: time.Now(), refresh: true}
	b.g.goBackground(func() {
		defer bg.wg.Wait()
		f(bg)
	})
}

// refreshEarly tries the leases of fresh keys drawn for early refresh and
// refreshes those it wins, in one loader call.
func (b *batch) refreshEarly(idx []int) {
	force := make([]bool, len(idx))
	for j := range force {
		force[j] = true
	}
	readAt := time.Now()
	reads := b.g.readMany(b.ctx, b.pick(idx), b.pickNames(idx), force, false)
	var won []int
	var fences []int64
	for j, r := range reads {
		if r.err == nil && r.rr.x > 0 {
			b.g.leaseHook(b.keys[idx[j]], true)
			won, fences = append(won, idx[j]), append(fences, r.rr.x)
		}
	}
	b.loadChunks(won, fences, nil, readAt)
}
