package guard

import (
	"time"
)

// batchWait is the driver of the wait of a batch's keys held by leases
// (see waitFor): another node's, or another batch's of this process.
type batchWait struct{ *batch }

// wait resolves the keys ws held by leases: a key loading in this process
// is joined; the others wait for fill notifications. A notification means
// a fill pipeline has landed, and one pipeline carries many keys, so every
// key still waiting is read again, in one shared pipeline. Keys whose
// lease a re-read wins are loaded; after WaitTimeout, WaitTimeoutPolicy
// applies to the keys still waiting.
func (b *batch) wait(ws []*waiter) {
	for _, w := range ws {
		w.key, w.name = b.keys[w.i], b.nms[w.i].entry
	}
	b.g.waitFor(b.ctx, ws, batchWait{b})
}

// joined takes a load of this process the waiter joined, unless it is
// another caller's private answer or ended before this batch began.
func (d batchWait) joined(w *waiter, o outcome) bool {
	if privateOf(o.err) != nil || !o.takes(d.start) {
		return false
	}
	d.set(w.i, keyResult{v: o.v, st: Shared, err: o.err})
	return true
}

// closed ends the wait of keys ws of a Group closing.
func (d batchWait) closed(ws []*waiter) {
	for _, w := range ws {
		d.set(w.i, keyResult{err: ErrClosed})
	}
}

// late applies WaitTimeoutPolicy to the keys still waiting.
func (d batchWait) late(ws []*waiter) {
	idx := make([]int, len(ws))
	for j, w := range ws {
		idx[j] = w.i
	}
	if d.co.waitPolicy != LoadLocally { // ReturnError, BackupLoad
		for _, i := range idx {
			d.set(i, keyResult{err: ErrWaitTimeout})
		}
		return
	}
	// Fence 0: stored only if nothing newer landed and nothing was
	// invalidated meanwhile.
	d.loadChunks(idx, make([]int64, len(idx)), nil, time.Now())
}

// reread reads the waiting keys ws again, sharing the reads with the other
// batches of this process, and acts on what it finds; resolve marks a
// waiter answered. filled: a fill was announced (see readMany).
func (d batchWait) reread(ws []*waiter, resolve func(*waiter), filled bool) {
	b, g := d.batch, d.g
	idx := make([]int, len(ws))
	force := make([]bool, len(ws))
	for j, w := range ws {
		idx[j], force[j] = w.i, w.force
		w.force = false
	}
	sr := b.readShared(idx, force, false, filled)
	defer sr.abandon(g)
	var a rereadActs
	for j, w := range ws {
		if sr.own[j] {
			d.settle(w, sr.reads[j], true, resolve, &a)
		}
	}
	slots := g.tryClaim(pickAt(b.keys, a.won))
	sr.publish(g)
	b.loadWon(a.won, a.fences, slots, sr.at)
	var again []*waiter
	for j, w := range ws {
		if !sr.own[j] {
			if r := sr.theirs(j); b.current(w.i, r) {
				d.settle(w, r, false, resolve, &a)
			} else {
				again = append(again, w) // read again, alone (see run)
			}
		}
	}
	if len(again) > 0 {
		idx := make([]int, len(again))
		for k, w := range again {
			idx[k] = w.i
		}
		at, n := time.Now(), len(a.won)
		rs := g.readMany(b.ctx, b.pick(idx), b.pickNames(idx), nil, filled)
		for k, w := range again {
			d.settle(w, rs[k], true, resolve, &a)
		}
		slots := g.tryClaim(pickAt(b.keys, a.won[n:]))
		b.loadWon(a.won[n:], a.fences[n:], slots, at)
	}
	if len(a.failed) > 0 {
		b.degrade(a.failed)
	}
	b.loadOversize(a.over)
}

// rereadActs is what a reread's keys call for beyond their answers.
type rereadActs struct {
	won, failed []int
	fences      []int64 // of the leases won
	over        []overKey
}

// settle acts on r, a read of w's key after a wake-up (own: this batch's
// read, whose lease it may act on).
func (d batchWait) settle(w *waiter, r batchRead, own bool, resolve func(*waiter), a *rereadActs) {
	b, g := d.batch, d.g
	key := b.keys[w.i]
	if r.err != nil {
		// Redis trouble while waiting: load on this node alone.
		a.failed = append(a.failed, w.i)
		resolve(w)
		return
	}
	if r.hit {
		b.serve(w.i, r.e, r, Shared, false)
		resolve(w)
		return
	}
	e, st := g.classify(key, r.rr)
	switch {
	case st == fresh:
		b.serve(w.i, e, r, Shared, false)
		resolve(w)
	case st == stale:
		b.serve(w.i, e, r, Stale, false)
		resolve(w)
	case st == oversized:
		a.over = append(a.over, overKey{i: w.i, e: e, now: r.rr.now})
		resolve(w)
	case r.rr.capped:
		g.tagFullHook(key)
		a.won, a.fences = append(a.won, w.i), append(a.fences, 0)
		resolve(w)
	case r.rr.x > 0 && own:
		g.leaseHook(key, true)
		a.won, a.fences = append(a.won, w.i), append(a.fences, r.rr.x)
		resolve(w)
	case r.rr.x > 0:
		w.joinable = true
	case r.rr.x < 0:
		w.holder = time.Duration(-r.rr.x) * time.Millisecond
	default:
		w.force = true
	}
}
