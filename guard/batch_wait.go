package guard

import (
	"slices"
	"time"
)

// waiter is a key of a batch held by a lease: another node's, or another
// batch's of this process.
type waiter struct {
	i        int
	holder   time.Duration // remaining lease of the holder, 0 if unknown
	force    bool          // read at once, trying the lease
	joinable bool          // another batch of this process won the lease: join its load
	joined   bool          // a load of the key in this process is joined
	done     bool
	// woke: the key's wait woke at least once; notified: its last wake-up
	// was a fill notification (reported once, when its wait ends).
	woke, notified bool
	unwatch        func()
}

// joinedLoad is a load of this process that a waiter joined, once over.
type joinedLoad struct {
	w *waiter
	r *runningLoad
}

// wait resolves keys held by leases. A key loading in this process is
// joined. The others wait for fill notifications, with resolveMiss's
// fallback polling; a notification means a fill pipeline has landed, and
// one pipeline carries many keys, so every key still waiting is read
// again, in one shared pipeline. Keys whose lease a re-read wins are
// loaded; after WaitTimeout, WaitTimeoutPolicy applies to the keys still
// waiting (joined loads end within their own LoadTimeout).
func (b *batch) wait(ws []*waiter) {
	g := b.g
	start := time.Now()
	deadline := start.Add(g.opts.WaitTimeout)
	wake := make(chan struct{}, 1)           // the fill notifications of all its keys
	joined := make(chan joinedLoad, len(ws)) // a waiter joins at most once
	left, joins := len(ws), 0
	// joinLocked joins the loads of this process of the waiters that may
	// have one (called with g.lmu held); a waiter whose load is over
	// already reads again soon (the fill of another batch's lease does not
	// notify this Group: its read did not register as a waiter).
	joinLocked := func() {
		for _, w := range ws {
			if w.done || w.joined || w.force || !(w.joinable || w.holder > 0) {
				continue
			}
			if r := g.loads[b.keys[w.i]]; r != nil {
				w.joined, joins = true, joins+1
				go func() {
					<-r.done // bounded by that load's LoadTimeout
					joined <- joinedLoad{w, r}
				}()
			} else if w.joinable {
				w.holder = time.Millisecond
			}
			w.joinable = false
		}
	}
	resolve := func(w *waiter) {
		w.done, left = true, left-1
		w.unwatch()
		g.wokenHook(b.keys[w.i], w.woke, w.notified, start)
	}
	takeJoined := func(j joinedLoad) {
		joins--
		if !j.w.done {
			j.w.notified = false // a load of this process ended the wait
			if h := g.opts.Hooks.Coalesced; h != nil {
				h(b.keys[j.w.i])
			}
			b.set(j.w.i, keyResult{v: j.r.o.v, st: Shared, err: j.r.o.err})
			resolve(j.w)
		}
	}
	defer func() {
		for _, w := range ws {
			if !w.done {
				w.unwatch()
			}
		}
	}()
	// Registered for the fills and joined under one hold of g.lmu: a load
	// running here cannot end between the two unseen.
	g.lmu.Lock()
	for _, w := range ws {
		w.unwatch = g.hub.Register(b.nms[w.i].entry, wake)
	}
	joinLocked()
	g.lmu.Unlock()
	poll := 50 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for left > joins {
		remaining := time.Until(deadline)
		if remaining <= 0 {
			break
		}
		forced := slices.ContainsFunc(ws, func(w *waiter) bool { return !w.done && w.force })
		notified := false
		if !forced {
			wait := min(poll, remaining)
			for _, w := range ws {
				if !w.done && !w.joined && w.holder > 0 {
					wait = min(wait, w.holder)
				}
			}
			timer.Reset(wait)
			select {
			case <-wake:
				notified = true
			case <-timer.C:
				poll = min(poll*2, g.opts.LockTTL)
			case j := <-joined:
				timer.Stop() // go ≥ 1.23: no stale tick after Stop
				takeJoined(j)
				continue
			}
			timer.Stop()
		}
		var again []*waiter
		for _, w := range ws {
			if w.done || w.joined {
				continue
			}
			again = append(again, w)
			if !forced {
				w.woke, w.notified = true, notified
			}
		}
		b.reread(again, resolve, notified)
		g.lmu.Lock()
		joinLocked() // x < 0 may be a lease of this process's too
		g.lmu.Unlock()
	}
	var late []int
	for _, w := range ws {
		if !w.done && !w.joined {
			late = append(late, w.i)
			resolve(w)
		}
	}
	if len(late) > 0 {
		if b.co.waitPolicy == ReturnError {
			for _, i := range late {
				b.set(i, keyResult{err: ErrWaitTimeout})
			}
		} else {
			// Fence 0: stored only if nothing newer landed and nothing was
			// invalidated meanwhile.
			b.loadChunks(late, make([]int64, len(late)), nil, time.Now())
		}
	}
	for joins > 0 {
		takeJoined(<-joined)
	}
}

// reread reads the waiting keys ws again, sharing the reads with the other
// batches of this process, and acts on what it finds; resolve marks a
// waiter answered. filled: a fill was announced (see readMany).
func (b *batch) reread(ws []*waiter, resolve func(*waiter), filled bool) {
	g := b.g
	idx := make([]int, len(ws))
	force := make([]bool, len(ws))
	for j, w := range ws {
		idx[j], force[j] = w.i, w.force
		w.force = false
	}
	sr := b.readShared(idx, force, false, filled)
	defer sr.abandon(g)
	var won, failed []int
	var fences []int64
	var over []overKey
	settle := func(w *waiter, r batchRead, own bool) {
		key := b.keys[w.i]
		if r.err != nil {
			// Redis trouble while waiting: load on this node alone.
			failed = append(failed, w.i)
			resolve(w)
			return
		}
		if r.hit {
			b.serve(w.i, r.e, r, Shared)
			resolve(w)
			return
		}
		e, st := g.classify(key, r.rr)
		switch {
		case st == fresh:
			b.serve(w.i, e, r, Shared)
			resolve(w)
		case st == stale:
			b.serve(w.i, e, r, Stale)
			resolve(w)
		case st == oversized:
			over = append(over, overKey{i: w.i, e: e, now: r.rr.now})
			resolve(w)
		case r.rr.x > 0 && own:
			g.leaseHook(key, true)
			won, fences = append(won, w.i), append(fences, r.rr.x)
			resolve(w)
		case r.rr.x > 0:
			w.joinable = true
		case r.rr.x < 0:
			w.holder = time.Duration(-r.rr.x) * time.Millisecond
		default:
			w.force = true
		}
	}
	for j, w := range ws {
		if sr.own[j] {
			settle(w, sr.reads[j], true)
		}
	}
	slots := g.tryClaim(pickAt(b.keys, won))
	sr.publish(g)
	b.loadWon(won, fences, slots, sr.at)
	var again []*waiter
	for j, w := range ws {
		if !sr.own[j] {
			if r := sr.theirs(j); b.current(w.i, r) {
				settle(w, r, false)
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
		at, n := time.Now(), len(won)
		rs := g.readMany(b.ctx, b.pick(idx), b.pickNames(idx), nil, filled)
		for k, w := range again {
			settle(w, rs[k], true)
		}
		slots := g.tryClaim(pickAt(b.keys, won[n:]))
		b.loadWon(won[n:], fences[n:], slots, at)
	}
	if len(failed) > 0 {
		b.degrade(failed)
	}
	b.loadOversize(over)
}
