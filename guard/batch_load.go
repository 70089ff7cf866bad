package guard

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
)

// tryClaim marks as loading in this process each key of keys no load of
// which runs here, and returns their slots (nil for the others).
func (g *Group) tryClaim(keys []string) []*runningLoad {
	out := make([]*runningLoad, len(keys))
	g.lmu.Lock()
	defer g.lmu.Unlock()
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	for j, k := range keys {
		if g.loads[k] == nil {
			out[j] = &runningLoad{done: make(chan struct{})}
			g.loads[k] = out[j]
		}
	}
	return out
}

// loadChunks loads the keys idx, whose leases hold fences (0: no lease),
// in loader calls of at most MaxBatch keys that run concurrently. slots
// are the keys' load slots, claimed by the caller; nil: claim them here.
// leased is when the read that won the leases was sent.
func (b *batch) loadChunks(idx []int, fences []int64, slots []*runningLoad, leased time.Time) {
	for len(idx) > 0 {
		n := min(len(idx), b.g.opts.MaxBatch)
		ci, cf := idx[:n], fences[:n]
		var cs []*runningLoad
		if slots != nil {
			cs, slots = slots[:n], slots[n:]
		}
		idx, fences = idx[n:], fences[n:]
		b.wg.Go(func() {
			if cs == nil {
				// A load stored under a lease must begin after the lease
				// was taken: wait for loads of these keys already running
				// here (see callLoader), then claim them all.
				cs = b.g.claimLoads(b.pick(ci))
			}
			b.flight(ci, cf, cs, true, leased)
		})
	}
}

// claimLoads waits until no load of keys runs in this process, then marks
// them all as loading.
func (g *Group) claimLoads(keys []string) []*runningLoad {
	for {
		g.lmu.Lock()
		var busy *runningLoad
		for _, k := range keys {
			if r := g.loads[k]; r != nil {
				busy = r
				break
			}
		}
		if busy == nil {
			if g.loads == nil {
				g.loads = map[string]*runningLoad{}
			}
			rs := make([]*runningLoad, len(keys))
			for j, k := range keys {
				rs[j] = &runningLoad{done: make(chan struct{})}
				g.loads[k] = rs[j]
			}
			g.lmu.Unlock()
			return rs
		}
		g.lmu.Unlock()
		<-busy.done // bounded by that load's LoadTimeout
	}
}

// degrade serves the keys idx without Redis: a key loading in this process
// is joined, the others are loaded in calls of at most MaxBatch keys. At
// most one load of a key runs in this process at a time.
func (b *batch) degrade(idx []int) {
	g := b.g
	for _, i := range idx {
		g.loc.ToReserve(b.keys[i]) // see alone
	}
	idx = b.fromReserve(idx)
	var mine []int
	var slots []*runningLoad
	g.lmu.Lock()
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	for _, i := range idx {
		if r := g.loads[b.keys[i]]; r != nil {
			b.wg.Go(func() {
				g.step(b.ctx, "batch joined a degraded load")
				<-r.done
				if privateOf(r.o.err) != nil || r.settledVerdict() == fillRejected {
					// Another caller's private answer: the key is this
					// batch's to answer, as a Do's would be (Group.alone).
					b.degrade([]int{i})
					return
				}
				b.set(i, keyResult{v: r.o.v, st: Degraded, err: r.o.err})
			})
			continue
		}
		r := &runningLoad{done: make(chan struct{}), o: outcome{err: errLoadAbandoned}}
		g.loads[b.keys[i]] = r
		mine, slots = append(mine, i), append(slots, r)
	}
	g.lmu.Unlock()
	mine, slots = b.fromReserveClaimed(mine, slots)
	for len(mine) > 0 {
		n := min(len(mine), g.opts.MaxBatch)
		ci, cs := mine[:n], slots[:n]
		mine, slots = mine[n:], slots[n:]
		b.wg.Go(func() { b.flight(ci, make([]int64, n), cs, false, time.Time{}) })
	}
}

// fromReserveClaimed looks in the reserve again for the keys idx, now
// claimed in slots: a load that ended since degrade first looked may have
// left a value or a mark, which a second load would only repeat. The keys
// it answers are released, their outcome handed to whoever joined; it
// returns the others.
func (b *batch) fromReserveClaimed(idx []int, slots []*runningLoad) ([]int, []*runningLoad) {
	rest := b.fromReserve(idx)
	if len(rest) == len(idx) {
		return idx, slots
	}
	g := b.g
	var keep []*runningLoad
	var done []*runningLoad
	j := 0
	for k, i := range idx {
		if j < len(rest) && rest[j] == i {
			keep, j = append(keep, slots[k]), j+1
			continue
		}
		// Not a load: a call on Redis's path that joined the slot reads
		// for itself (an end before any call began; see outcome.takes).
		slots[k].o = outcome{v: b.res[i].v, err: b.res[i].err, end: fencedOut}
		done = append(done, slots[k])
		g.lmu.Lock()
		delete(g.loads, b.keys[i])
		g.lmu.Unlock()
	}
	for _, r := range done {
		close(r.done)
	}
	return rest, keep
}

// callBatch runs the loader on keys in a goroutine of its own, bounded by
// LoadTimeout, so that neither a panic (turned into *PanicError) nor
// runtime.Goexit can take the batch's work with it.
func (b *batch) callBatch(keys []string) (vals map[string][]byte, unasked int, d time.Duration, err error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.g.opts.LoadTimeout)
	defer cancel()
	type outcome struct {
		vals    map[string][]byte
		unasked int
		err     error
	}
	ch := make(chan outcome, 1)
	start := time.Now()
	go func() {
		var o outcome
		returned := false
		defer func() {
			if !returned {
				if p := recover(); p != nil {
					o.err = &PanicError{Value: p, Stack: debug.Stack()}
				} else {
					o.err = ErrGoexit
				}
			}
			ch <- o
		}()
		o.vals, o.unasked, o.err = b.load(ctx, keys)
		returned = true
	}()
	o, ok := awaitLoader(b.g, ctx, ch)
	if !ok {
		o = outcome{err: ErrLoadTimeout}
	}
	return o.vals, o.unasked, time.Since(start), o.err
}

// flight loads the keys idx, claimed in slots, in one loader call. With
// useRedis, their fills (under fences, 0 for none) go back in one
// pipeline; without it nothing is stored and the keys count as Degraded.
func (b *batch) flight(idx []int, fences []int64, slots []*runningLoad, useRedis bool, leased time.Time) {
	g := b.g
	keys := b.pick(idx)
	stop := func() {}
	if useRedis {
		ls := make([]heldLease, len(idx))
		for j, i := range idx {
			ls[j] = heldLease{b.nms[i], fences[j]}
		}
		stop = g.watchLeases(ls, leased)
	}
	began := time.Now() // before the loader began: see outcome.begun
	vals, unasked, d, err := b.callBatch(keys)
	end := time.Now() // before the hooks: see outcome.takes
	if !b.refresh {
		b.loads.Add(1)
	}
	unasked += unaskedIn(vals, keys)
	found := 0
	errs := make([]error, len(idx))
	for j, k := range keys {
		v, ok := vals[k]
		switch {
		case err != nil:
			errs[j] = err
		case !ok:
			errs[j] = ErrNotFound
		default:
			found++
		}
		slots[j].o = outcome{v: v, err: errs[j], d: end.Sub(began), end: end}
		if h := g.opts.Hooks.Load; h != nil {
			h(k, d, errs[j])
		}
		g.hot.load(k)
		g.oversizeHook(k, v, errs[j])
	}
	if !useRedis {
		// Kept before the keys are released: a batch that finds them
		// neither loading nor kept would load them again.
		b.keepDegraded(idx, vals, errs)
	}
	g.lmu.Lock()
	for _, k := range keys {
		delete(g.loads, k)
	}
	g.lmu.Unlock()
	for _, r := range slots {
		if useRedis {
			// Filled below: the joiners that wait for a fill learn its
			// verdict (runningLoad.settled).
			r.settled = make(chan struct{})
		}
		close(r.done)
	}
	if h := g.opts.Hooks.BatchLoad; h != nil {
		h(BatchLoadStats{Keys: len(keys), Found: found, Unasked: unasked, Refresh: b.refresh, Took: d, Err: err})
	}
	st := Degraded
	if useRedis {
		st = Miss
		items := make([]fillItem, len(idx))
		for j, i := range idx {
			items[j] = fillItem{key: keys[j], nm: b.nms[i], f: g.fillFor(b.co, fences[j], outcome{v: vals[keys[j]], err: errs[j], d: d}, b.refresh)}
			items[j].f.since = b.start // before the load began
		}
		verdicts := g.storeMany(b.ctx, items)
		for j, r := range slots {
			r.settle(verdicts[j])
		}
		// The watchdog ran on until the fill: a batch's fill carries many
		// values and can take a while.
		stop()
		if h := g.opts.Hooks.RefreshError; h != nil {
			for j, it := range items {
				if it.f.keepLease > 0 {
					h(keys[j], errs[j])
				}
			}
		}
	}
	for j, i := range idx {
		b.set(i, keyResult{v: vals[keys[j]], st: st, err: errs[j]})
	}
}

// unaskedIn counts the keys of vals that are not among keys.
func unaskedIn(vals map[string][]byte, keys []string) int {
	asked := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		asked[k] = struct{}{}
	}
	n := 0
	for k := range vals {
		if _, ok := asked[k]; !ok {
			n++
		}
	}
	return n
}

// fromReserve answers the keys idx that the reserve holds (see
// Group.fromReserve), refreshing the stale ones in the background in one
// loader call, and returns the others.
func (b *batch) fromReserve(idx []int) []int {
	g, now := b.g, time.Now()
	var rest, refresh []int
	for _, i := range idx {
		k, ok := g.reserve.Get(b.keys[i])
		if !ok || !now.Before(k.StaleUntil) {
			if ok {
				// Only that entry: another call may have kept a new one.
				g.reserve.Expire(b.keys[i], now)
			}
			rest = append(rest, i)
			continue
		}
		if k.Mark != tier.Value {
			b.set(i, keyResult{st: Degraded, err: markErr(b.keys[i], k)})
			continue
		}
		st := Degraded
		if !now.Before(k.FreshUntil) {
			st = Stale
			if g.reserve.StartRefresh(b.keys[i], now) {
				refresh = append(refresh, i)
			}
		}
		b.set(i, keyResult{v: k.Value, st: st})
	}
	if len(refresh) > 0 {
		b.background(func(bg *batch) {
			slots := g.claimLoads(bg.pick(refresh))
			bg.flight(refresh, make([]int64, len(refresh)), slots, false, time.Time{})
		})
	}
	return rest
}

// keepDegraded keeps in the reserve the values a batch loaded without
// Redis, and the marks of the keys it failed or found nothing of; a
// background refresh's failures back off ErrorBackoff, keeping the stale
// value.
func (b *batch) keepDegraded(idx []int, vals map[string][]byte, errs []error) {
	g, now := b.g, time.Now()
	for j, i := range idx {
		k := b.keys[i]
		switch {
		case errs[j] == nil:
		case b.refresh:
			g.refreshFailedDegraded(k, b.nms[i].entry, errs[j], b.start)
			continue
		default:
			// A mark, as Group.alone leaves one.
			g.markDegraded(k, b.nms[i].entry, errs[j], b.start)
			continue
		}
		g.keepReserve(k, b.nms[i].entry, vals[k], now, g.jittered(b.co.freshFor), b.co.staleFor, b.start)
	}
}
