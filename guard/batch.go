package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
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

// BatchLoadFunc loads the values of keys in one call. A key it does not
// return has no value; an error fails every key.
type BatchLoadFunc func(ctx context.Context, keys []string) (map[string][]byte, error)

// BatchStats counts what became of one batch call's keys (Hooks.Batch).
type BatchStats struct {
	Keys     int           // distinct keys asked for
	Hits     int           // fresh values, from Redis or the in-process tier
	Stale    int           // stale values
	Loaded   int           // values loaded by this call's loader calls
	Shared   int           // values loaded by another node, or a load this call joined
	Degraded int           // keys loaded without Redis
	NotFound int           // keys without a value (negative entries included)
	Failed   int           // keys that got an error
	Loads    int           // loader calls made (background refreshes apart)
	Took     time.Duration // the call's work, waits and loads included
}

// BatchLoadStats describes one batch loader call (Hooks.BatchLoad).
type BatchLoadStats struct {
	Keys    int // keys the loader was asked for
	Found   int // of those, how many it returned a value for
	Unasked int // keys it returned that it was not asked for (ignored)
	// Refresh: a background refresh.
	Refresh bool
	Took    time.Duration
	Err     error
}

// GetMany returns the values of keys, loading with load those without a
// usable value, in one round trip per Redis node. Keys without a value are
// left out; err joins the keys' errors. The values are shared: read only.
func (g *Group) GetMany(ctx context.Context, keys []string, load BatchLoadFunc, opts ...CallOption) (map[string][]byte, error) {
	if load == nil {
		return nil, errors.New("guard: nil BatchLoadFunc")
	}
	return g.getMany(ctx, keys, func(ctx context.Context, keys []string) (map[string][]byte, int, error) {
		v, err := load(ctx, keys)
		return v, 0, err
	}, opts)
}

// FetchMany is GetMany for values of any type, with ids mapped to keys by
// key. An id load does not return has no value.
func FetchMany[ID comparable, T any](ctx context.Context, g *Group, ids []ID, key func(ID) string, load func(context.Context, []ID) (map[ID]T, error), opts ...CallOption) (map[ID]T, error) {
	switch {
	case key == nil:
		return nil, errors.New("guard: nil key func")
	case load == nil:
		return nil, errors.New("guard: nil load func")
	}
	keys := make([]string, 0, len(ids))
	byKey := make(map[string][]ID, len(ids))
	// Each id once, in one pass: ids that share a key were checked against
	// every id of the key before (quadratic: 100,000 on one key took 5 s,
	// the caller's deadline unseen).
	seenID := make(map[ID]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seenID[id]; dup {
			continue
		}
		seenID[id] = struct{}{}
		k := key(id)
		have, seen := byKey[k]
		if !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(have, id)
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
		// Decoded for each id: ids that share a key get values of their
		// own, as every caller does (see Fetch).
		for _, id := range byKey[k] {
			v, uerr := unmarshal[T](b)
			if uerr != nil {
				err = errors.Join(err, uerr)
				break
			}
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
		g.hot.call(k)
		if r, ok := g.localHit(k); ok {
			b.res[i] = keyResult{v: r.Value, st: r.Status}
			if r.Status == Stale {
				b.stale.Add(1)
			} else {
				b.hits.Add(1)
			}
			continue
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

// serve answers key i from a decoded entry read as r (see served).
// serve answers key i with the entry e of read r; report: the answer is
// the key's lookup (a key that waited reported its miss already).
func (b *batch) serve(i int, e entry.Entry, r batchRead, st Status, report bool) {
	res, err := b.g.served(b.keys[i], e, r.rr.now, st, r.k, report)
	b.set(i, keyResult{v: res.Value, st: st, err: err})
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
