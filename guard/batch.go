package guard

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Batches: many keys per call. A batch is read in one pipeline (one round
// trip per Redis node), and each key then follows the single-key rules:
//
//	fresh               → its value
//	stale               → its value at once; the keys of the batch whose
//	                      lease the read won are refreshed together, in one
//	                      background loader call
//	missing, lease won  → loaded with the other keys this call won, in one
//	                      loader call (per MaxBatch keys); their fills go
//	                      back in one pipeline
//	missing, held       → a load of the key running in this process is
//	                      joined; else the call waits for the holder's
//	                      fill notification, as a single-key caller does
//	Redis unavailable   → the keys are loaded through this process alone:
//	                      a key already loading in it is joined, the rest
//	                      go to one loader call
//
// The work runs detached from the caller, who leaves on its own ctx.

// BatchLoadFunc loads the values of keys from the origin in one call. It
// returns the values it found: a key it does not return has no value (as
// ErrNotFound from a LoadFunc), which is cached for NegativeFor. Keys it
// returns that it was not asked for are ignored (and counted in
// BatchLoadStats.Unasked). An error fails every key of the call; its keys
// are then handled as a LoadFunc's error would be (stale-if-error, back-off).
type BatchLoadFunc func(ctx context.Context, keys []string) (map[string][]byte, error)

// BatchStats describes one GetMany or FetchMany call, for Hooks.Batch.
// Every key is counted once, under the outcome it got.
type BatchStats struct {
	Keys     int // distinct keys asked for
	Hits     int // fresh values, from Redis or the in-process tier
	Stale    int // stale values
	Loaded   int // values loaded by this call's loader calls
	Shared   int // values loaded by someone else: another node, or a load of this process the call joined
	Degraded int // keys loaded without Redis
	NotFound int // keys without a value (negative entries included)
	Failed   int // keys that got an error
	// Loads is how many loader calls the call made (background refreshes
	// not included).
	Loads int
	// Took is how long the call's work took, waits and loads included.
	Took time.Duration
}

// BatchLoadStats describes one batch loader call, for Hooks.BatchLoad.
type BatchLoadStats struct {
	Keys    int // keys the loader was asked for
	Found   int // of those, how many it returned a value for
	Unasked int // keys it returned that it was not asked for (ignored)
	// Refresh is true for a background refresh of stale keys.
	Refresh bool
	Took    time.Duration
	Err     error
}

// GetMany returns the values of keys, loading those without a usable value
// with load; the result holds the keys that have a value. The hits of the
// whole batch cost one Redis round trip per Redis node, the keys this node
// wins the lease of go to load together (MaxBatch keys per call), and their
// fills go back in one round trip per node. Keys another node is loading
// are waited for; keys already loading in this process join that load.
// Repeated keys are asked for once. The values are shared with the other
// callers that got them: read them, never modify them.
//
// err is nil when every key was answered (with a value or as not found);
// otherwise it joins the distinct errors of the keys that failed, and the
// map still holds the values found. A cancelled ctx returns ctx.Err() at
// once; the batch's loads and fills go on for the other callers.
func (g *Group) GetMany(ctx context.Context, keys []string, load BatchLoadFunc, opts ...CallOption) (map[string][]byte, error) {
	if load == nil {
		return nil, errors.New("guard: nil BatchLoadFunc")
	}
	return g.getMany(ctx, keys, func(ctx context.Context, keys []string) (map[string][]byte, int, error) {
		v, err := load(ctx, keys)
		return v, 0, err
	}, opts)
}

// FetchMany is GetMany for values of any type, stored as Fetch stores them
// (JSON; []byte and string as they are), and ids of any comparable type
// mapped to keys by key. load gets the ids to load and returns the values
// it found; an id it does not return has no value and is cached
// negatively. The result holds the ids that have a value. Repeated ids are
// asked for once; distinct ids whose keys are equal share one value (load
// is asked for the first of them).
func FetchMany[ID comparable, T any](ctx context.Context, g *Group, ids []ID, key func(ID) string, load func(context.Context, []ID) (map[ID]T, error), opts ...CallOption) (map[ID]T, error) {
	switch {
	case key == nil:
		return nil, errors.New("guard: nil key func")
	case load == nil:
		return nil, errors.New("guard: nil load func")
	}
	keys := make([]string, 0, len(ids))
	byKey := make(map[string][]ID, len(ids))
	for _, id := range ids {
		k := key(id)
		have, seen := byKey[k]
		if !seen {
			keys = append(keys, k)
		}
		dup := false
		for _, h := range have {
			dup = dup || h == id
		}
		if !dup {
			byKey[k] = append(have, id)
		}
	}
	raw, err := g.getMany(ctx, keys, func(ctx context.Context, keys []string) (map[string][]byte, int, error) {
		asked := make([]ID, len(keys))
		keyOf := make(map[ID]string, len(keys))
		for i, k := range keys {
			asked[i] = byKey[k][0]
			keyOf[asked[i]] = k
		}
		vals, err := load(ctx, asked)
		if err != nil {
			return nil, 0, err
		}
		out := make(map[string][]byte, len(vals))
		unasked := 0
		for id, v := range vals {
			k, ok := keyOf[id]
			if !ok {
				unasked++
				continue
			}
			b, err := marshal(v)
			if err != nil {
				// A bug of the caller, not an origin failure (see Fetch).
				return nil, unasked, NoStore(err)
			}
			out[k] = b
		}
		return out, unasked, nil
	}, opts)
	if raw == nil {
		return nil, err
	}
	res := make(map[ID]T, len(raw))
	for k, b := range raw {
		v, uerr := unmarshal[T](b)
		if uerr != nil {
			err = errors.Join(err, uerr)
			continue
		}
		for _, id := range byKey[k] {
			res[id] = v
		}
	}
	return res, err
}

// batchLoader is a batch loader as getMany calls it: it also returns how
// many of the keys (ids) it got back were not asked for.
type batchLoader func(ctx context.Context, keys []string) (map[string][]byte, int, error)

// keyResult is what became of one key of a batch.
type keyResult struct {
	v   []byte
	st  Status
	err error
}

// batch is one GetMany call's work; functions take it as the one value
// that carries what every stage needs.
type batch struct {
	g     *Group
	ctx   context.Context // detached from the caller
	co    callOptions
	load  batchLoader
	keys  []string
	nms   []names
	res   []keyResult // each index written by exactly one stage
	start time.Time

	wg      sync.WaitGroup // the loads this batch started
	refresh bool           // a background refresh: statuses are not kept
	// Counters for BatchStats.
	hits, stale, loaded, shared, degraded, notFound, failed, loads atomic.Int64
}

func (g *Group) getMany(ctx context.Context, keys []string, load batchLoader, opts []CallOption) (map[string][]byte, error) {
	if err := g.checkMany(ctx, keys); err != nil {
		return nil, err
	}
	co := g.callOptions(opts)
	if co.err != nil {
		return nil, co.err
	}
	keys = distinct(keys)
	if len(keys) == 0 {
		return map[string][]byte{}, nil
	}
	b := &batch{g: g, ctx: context.WithoutCancel(ctx), co: co, load: load, keys: keys,
		nms: make([]names, len(keys)), res: make([]keyResult, len(keys)), start: time.Now()}
	rest := make([]int, 0, len(keys))
	for i, k := range keys {
		if g.loc != nil {
			if le, ok := g.loc.Get(k); ok && time.Now().Before(le.freshUntil) {
				age := time.Since(le.written)
				if h := g.opts.Hooks.Hit; h != nil {
					h(k, age, true)
				}
				b.res[i] = keyResult{v: le.value, st: Hit}
				b.hits.Add(1)
				continue
			}
		}
		b.nms[i] = g.names(k)
		rest = append(rest, i)
	}
	if len(rest) == 0 {
		b.report()
		return b.collect()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.run(rest)
		b.report()
	}()
	select {
	case <-done:
		return b.collect()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *Group) checkMany(ctx context.Context, keys []string) error {
	switch {
	case g == nil:
		return errors.New("guard: nil Group")
	case ctx == nil:
		return errors.New("guard: nil context")
	}
	for _, k := range keys {
		switch {
		case k == "":
			return errors.New("guard: empty key")
		case len(k) > MaxKeyBytes:
			return fmt.Errorf("guard: key of %d bytes exceeds MaxKeyBytes (%d)", len(k), MaxKeyBytes)
		}
	}
	if g.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// distinct returns keys without repeats, in the order of first use.
func distinct(keys []string) []string {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

// collect turns the results into GetMany's answer.
func (b *batch) collect() (map[string][]byte, error) {
	out := make(map[string][]byte, len(b.keys))
	var errs []error
	seen := map[string]bool{}
	for i, r := range b.res {
		switch {
		case r.err == nil:
			out[b.keys[i]] = r.v
		case errors.Is(r.err, ErrNotFound):
		case !seen[r.err.Error()]:
			// One loader error fails a whole loader call: report it once.
			seen[r.err.Error()] = true
			errs = append(errs, r.err)
		}
	}
	switch len(errs) {
	case 0:
		return out, nil
	case 1:
		return out, errs[0]
	}
	return out, errors.Join(errs...)
}

func (b *batch) report() {
	h := b.g.opts.Hooks.Batch
	if h == nil || b.refresh {
		return
	}
	h(BatchStats{
		Keys: len(b.keys), Hits: int(b.hits.Load()), Stale: int(b.stale.Load()),
		Loaded: int(b.loaded.Load()), Shared: int(b.shared.Load()), Degraded: int(b.degraded.Load()),
		NotFound: int(b.notFound.Load()), Failed: int(b.failed.Load()), Loads: int(b.loads.Load()),
		Took: time.Since(b.start),
	})
}

// set records key i's outcome and counts it.
func (b *batch) set(i int, r keyResult) {
	b.res[i] = r
	switch {
	case errors.Is(r.err, ErrNotFound):
		b.notFound.Add(1)
	case r.err != nil:
		b.failed.Add(1)
	case r.st == Hit:
		b.hits.Add(1)
	case r.st == Stale:
		b.stale.Add(1)
	case r.st == Miss:
		b.loaded.Add(1)
	case r.st == Shared:
		b.shared.Add(1)
	case r.st == Degraded:
		b.degraded.Add(1)
	}
}

// serve answers key i from a decoded entry (see served).
func (b *batch) serve(i int, e entry, now int64, st Status) {
	r, err := b.g.served(b.keys[i], e, now, st)
	b.set(i, keyResult{v: r.Value, st: st, err: err})
}

// run resolves the keys idx: one read, then loads, waits and refreshes.
func (b *batch) run(idx []int) {
	g := b.g
	defer b.wg.Wait()
	sr := b.readShared(idx, nil, true)
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
	for j, i := range idx {
		if !sr.own[j] {
			b.sort(i, sr.theirs(j), false, &p)
		}
	}
	if len(p.failed) > 0 {
		b.degrade(p.failed)
	}
	if len(p.waits) > 0 {
		b.wait(p.waits)
	}
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
}

// sort files key i under what its read r calls for. own is false when r is
// another batch's read, shared: that batch acts on the lease r won.
func (b *batch) sort(i int, r batchRead, own bool, p *plan) {
	g, key := b.g, b.keys[i]
	if r.err != nil {
		p.failed = append(p.failed, i)
		return
	}
	early := func(e entry, now int64) bool {
		return own && g.opts.EarlyRefreshBeta > 0 && !e.negative && !e.errMark && g.earlyRefresh(e, now)
	}
	if r.hit {
		if early(r.e, r.rr.now) {
			p.early = append(p.early, i)
		}
		b.serve(i, r.e, r.rr.now, Hit)
		return
	}
	e, st := g.classify(key, r.rr)
	switch {
	case st == fresh:
		if own {
			g.hint(key, b.nms[i].entry, e.freshUntil)
		}
		if early(e, r.rr.now) {
			p.early = append(p.early, i)
		}
		b.serve(i, e, r.rr.now, Hit)
		return
	case st == stale:
		if own && r.rr.x > 0 {
			g.leaseHook(key, true)
			p.refresh, p.refreshF = append(p.refresh, i), append(p.refreshF, r.rr.x)
		}
		b.serve(i, e, r.rr.now, Stale)
		return
	}
	if h := g.opts.Hooks.Miss; h != nil {
		h(key)
	}
	switch {
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

func pickAt[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

func (b *batch) pick(idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = b.keys[i]
	}
	return out
}

func (b *batch) pickNames(idx []int) []names {
	out := make([]names, len(idx))
	for j, i := range idx {
		out[j] = b.nms[i]
	}
	return out
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
	reads := b.g.readMany(b.ctx, b.pick(idx), b.pickNames(idx), force)
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
	var mine []int
	var slots []*runningLoad
	g.lmu.Lock()
	if g.loads == nil {
		g.loads = map[string]*runningLoad{}
	}
	for _, i := range idx {
		if r := g.loads[b.keys[i]]; r != nil {
			b.wg.Go(func() {
				<-r.done
				b.set(i, keyResult{v: r.v, st: Degraded, err: r.err})
			})
			continue
		}
		r := &runningLoad{done: make(chan struct{})}
		g.loads[b.keys[i]] = r
		mine, slots = append(mine, i), append(slots, r)
	}
	g.lmu.Unlock()
	for len(mine) > 0 {
		n := min(len(mine), g.opts.MaxBatch)
		ci, cs := mine[:n], slots[:n]
		mine, slots = mine[n:], slots[n:]
		b.wg.Go(func() { b.flight(ci, make([]int64, n), cs, false, time.Time{}) })
	}
}

// errBreakerOpen is the read of a key while the breaker is open: the key
// is served without Redis.
var errBreakerOpen = errors.New("guard: Redis breaker open")

// errGoexitLoad is what the callers of a batch loader that called
// runtime.Goexit get.
var errGoexitLoad = errors.New("guard: batch loader called runtime.Goexit")

// callBatch runs the loader on keys in a goroutine of its own, bounded by
// LoadTimeout, so that neither a panic (turned into *PanicError) nor
// runtime.Goexit can take the batch's work with it.
func (b *batch) callBatch(keys []string) (vals map[string][]byte, unasked int, err error, d time.Duration) {
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
					o.err = errGoexitLoad
				}
			}
			ch <- o
		}()
		o.vals, o.unasked, o.err = b.load(ctx, keys)
		returned = true
	}()
	o := <-ch
	return o.vals, o.unasked, o.err, time.Since(start)
}

// flight loads the keys idx, claimed in slots, in one loader call. With
// useRedis, their fills (under fences, 0 for none) go back in one
// pipeline; without it nothing is stored and the keys count as Degraded.
func (b *batch) flight(idx []int, fences []int64, slots []*runningLoad, useRedis bool, leased time.Time) {
	g := b.g
	keys := b.pick(idx)
	stop := func() {}
	if useRedis {
		stop = g.renewLeases(b.pickNames(idx), fences, leased)
	}
	vals, unasked, err, d := b.callBatch(keys)
	if !b.refresh {
		b.loads.Add(1)
	}
	asked := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		asked[k] = struct{}{}
	}
	for k := range vals {
		if _, ok := asked[k]; !ok {
			unasked++
		}
	}
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
		slots[j].v, slots[j].err, slots[j].d = v, errs[j], d
		if h := g.opts.Hooks.Load; h != nil {
			h(k, d, errs[j])
		}
	}
	g.lmu.Lock()
	for _, k := range keys {
		delete(g.loads, k)
	}
	g.lmu.Unlock()
	for _, r := range slots {
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
			items[j] = fillItem{key: keys[j], nm: b.nms[i], f: g.fillFor(vals[keys[j]], errs[j], d, fences[j], b.co, b.refresh)}
		}
		g.storeMany(b.ctx, items)
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

// fillFor is what loadAndFill stores for a load's outcome v, err.
func (g *Group) fillFor(v []byte, err error, d time.Duration, fence int64, co callOptions, refresh bool) fillSpec {
	f := fillSpec{fence: fence, loadDur: d, mode: "w"}
	switch {
	case err == nil && len(v) > g.opts.MaxValueBytes:
		f.mode = "-" // served, not stored
	case err == nil:
		f.value, f.fresh, f.stale = v, g.jittered(co.freshFor), co.staleFor
	case isNoStore(err):
		f.mode = "-"
	case errors.Is(err, ErrNotFound) && g.opts.NegativeFor > 0:
		f.fresh, f.flags = g.opts.NegativeFor, "n"
	case errors.Is(err, ErrNotFound):
		f.mode = "-"
	case refresh:
		f.mode, f.keepLease = "-", g.opts.ErrorBackoff
	default:
		f.mode, f.fresh, f.flags = "m", g.opts.ErrorBackoff, "e"
	}
	return f
}

// waiter is a key of a batch held by a lease: another node's, or another
// batch's of this process.
type waiter struct {
	i        int
	holder   time.Duration // remaining lease of the holder, 0 if unknown
	force    bool          // read at once, trying the lease
	joinable bool          // another batch of this process won the lease: join its load
	joined   bool          // a load of the key in this process is joined
	wake     chan struct{} // the key's fill notification
	done     bool
	unwatch  func()
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
	anyWake := make(chan struct{}, 1)
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
	}
	takeJoined := func(j joinedLoad) {
		joins--
		if !j.w.done {
			if h := g.opts.Hooks.Coalesced; h != nil {
				h(b.keys[j.w.i])
			}
			b.set(j.w.i, keyResult{v: j.r.v, st: Shared, err: j.r.err})
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
		nm := b.nms[w.i]
		w.wake = make(chan struct{}, 1)
		u1, u2 := g.hub.Register(nm.entry, w.wake), g.hub.Register(nm.entry, anyWake)
		w.unwatch = func() { u1(); u2() }
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
		if !forced {
			wait := min(poll, remaining)
			for _, w := range ws {
				if !w.done && !w.joined && w.holder > 0 {
					wait = min(wait, w.holder)
				}
			}
			timer.Reset(wait)
			select {
			case <-anyWake:
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
			if forced {
				continue
			}
			own := false
			select {
			case <-w.wake:
				own = true
			default:
			}
			if h := g.opts.Hooks.Woken; h != nil {
				h(b.keys[w.i], own, time.Since(start))
			}
		}
		b.reread(again, resolve)
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
		if g.opts.WaitTimeoutPolicy == ReturnError {
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
// waiter answered.
func (b *batch) reread(ws []*waiter, resolve func(*waiter)) {
	g := b.g
	idx := make([]int, len(ws))
	force := make([]bool, len(ws))
	for j, w := range ws {
		idx[j], force[j] = w.i, w.force
		w.force = false
	}
	sr := b.readShared(idx, force, false)
	defer sr.abandon(g)
	var won, failed []int
	var fences []int64
	settle := func(w *waiter, r batchRead, own bool) {
		key := b.keys[w.i]
		if r.err != nil {
			// Redis trouble while waiting: load on this node alone.
			failed = append(failed, w.i)
			resolve(w)
			return
		}
		if r.hit {
			b.serve(w.i, r.e, r.rr.now, Shared)
			resolve(w)
			return
		}
		e, st := g.classify(key, r.rr)
		switch {
		case st == fresh:
			b.serve(w.i, e, r.rr.now, Shared)
			resolve(w)
		case st == stale:
			b.serve(w.i, e, r.rr.now, Stale)
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
	for j, w := range ws {
		if !sr.own[j] {
			settle(w, sr.theirs(j), false)
		}
	}
	if len(failed) > 0 {
		b.degrade(failed)
	}
}
