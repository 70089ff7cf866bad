package guard

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/stampede-go/stampede/guard/internal/entry"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Values over MaxValueBytes. Such a value is not stored in Redis, but it
// must not cost the origin a load per call either. So the node that loads
// it stores a marker entry instead (flag 'o': the value's windows and
// fence, no payload) and keeps the value in process; a node that reads a
// fresh marker and holds no copy of its own loads the value once, through
// its own singleflight and load slot, and keeps it the same way. A copy
// belongs to one marker (the one written at the same Redis millisecond) and
// is served only while Redis holds that marker: a refresh, an Invalidate or
// the marker's expiry retires every node's copy at once. The origin thus
// sees at most one load per key per refresh per node (while a node's hot
// oversize keys fit in oversizeEntries: a copy pushed out is loaded
// again), and the fleet-wide coordination (one refresher at a time, under
// the lease) is unchanged.
//
// A stale marker is served from a copy at hit latency while one node
// refreshes it; a node without a copy waits for that refresh, as for a
// missing key.

// oversizeEntries bounds the copies a Group keeps (least recently used
// first out). They are large by definition, so the bound is small.
const oversizeEntries = 16

// overCopy is this node's copy of the value behind one marker, or the
// error its load returned (kept ErrorBackoff, so a failing origin is not
// asked again on every call).
type overCopy struct {
	v       []byte
	err     error
	written int64 // the marker's written time (Redis ms): which marker
	until   int64 // Redis ms: kept until then
}

type overStore struct{ c *lru.Cache[string, overCopy] }

func newOverStore() overStore {
	c, err := lru.New[string, overCopy](oversizeEntries)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return overStore{c}
}

// get returns the copy of key that belongs to the marker written at
// written, if it is kept until after now (Redis ms).
func (s overStore) get(key string, written, now int64) (overCopy, bool) {
	cp, ok := s.c.Get(key)
	if !ok || cp.written != written || now >= cp.until {
		return overCopy{}, false
	}
	return cp, true
}

// overValue puts this node's copy of the value behind the oversize marker
// e in e.value, and reports whether it holds one.
func (g *Group) overValue(key string, e *entry.Entry, now int64) bool {
	cp, ok := g.over.get(key, e.Written, now)
	if !ok || cp.err != nil {
		return false
	}
	e.Value = cp.v
	return true
}

// keepOversize keeps the value v of key that the marker written at
// written (Redis ms) stands for, until its stale-until.
func (g *Group) keepOversize(key string, v []byte, written, staleUntil int64) {
	g.over.c.Add(key, overCopy{v: v, written: written, until: staleUntil})
}

// loadOversize answers a call of key whose fresh marker e (read at now,
// Redis ms) stands for a value this node holds no copy of: one load per
// node (the callers of this process share it, and it joins a load of the
// key already running here), kept until the marker's stale-until. Nothing
// is written to Redis: the marker is there already. Each caller leaves on
// its own ctx.
func (g *Group) loadOversize(ctx context.Context, key string, load LoadFunc, e entry.Entry, now int64) (Result, error) {
	detached := context.WithoutCancel(ctx)
	ch := g.sf.DoChan("o"+key, func() (any, error) {
		res := Result{Status: Miss, Oversize: true}
		// Another flight of this process may have kept it meanwhile.
		if cp, ok := g.over.get(key, e.Written, now); ok {
			res.Value, res.Status = cp.v, Shared
			return missOutcome{res: res, claimed: new(atomic.Bool)}, cp.err
		}
		// A load running here is taken once its fill landed: the value
		// of one a change beat (a refresh an Invalidate fenced out) is
		// older than the marker read, and would be kept as its copy.
		o, _, _ := g.callLoaderSlot(detached, key, load, joinSettled, nil, nil, false)
		cp := overCopy{v: o.v, err: o.err, written: e.Written, until: e.StaleUntil}
		if o.err != nil {
			cp.v, cp.until = nil, min(now+ms(g.opts.ErrorBackoff), e.StaleUntil)
		}
		if !isNoStore(o.err) {
			g.over.c.Add(key, cp)
		}
		res.Value = o.v
		return missOutcome{res: res, claimed: new(atomic.Bool)}, o.err
	})
	select {
	case r := <-ch:
		mo, _ := r.Val.(missOutcome)
		return g.claim(key, mo.res, mo.claimed, false, r.Err), r.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// oversizeHook reports a loaded value over MaxValueBytes to
// Hooks.Oversize.
func (g *Group) oversizeHook(key string, v []byte, err error) {
	if h := g.opts.Hooks.Oversize; h != nil && err == nil && len(v) > g.opts.MaxValueBytes {
		h(key, len(v))
	}
}

// overKey is a key of a batch whose fresh oversize marker e (read at now)
// stands for a value this node holds no copy of.
type overKey struct {
	i   int
	e   entry.Entry
	now int64
}

// loadOversize loads the keys ks as loadOversize does for one key: each
// through this node's flight of that key (so that a call of the key alone
// joins it), the flights of up to MaxBatch keys sharing one loader call.
// Before, each key had a loader call of its own, all at once: a batch of
// 60 such keys made 60 calls to the origin where one was promised.
func (b *batch) loadOversize(ks []overKey) {
	for len(ks) > 0 {
		chunk := ks[:min(len(ks), b.g.opts.MaxBatch)]
		ks = ks[len(chunk):]
		shared := &sharedLoad{b: b, keys: make([]string, len(chunk))}
		for j, k := range chunk {
			shared.keys[j] = b.keys[k.i]
		}
		for _, k := range chunk {
			key := b.keys[k.i]
			load := func(context.Context) ([]byte, error) {
				vals, err := shared.get()
				if err != nil {
					return nil, err
				}
				v, ok := vals[key]
				if !ok {
					return nil, ErrNotFound
				}
				return v, nil
			}
			b.wg.Go(func() {
				res, err := b.g.loadOversize(b.ctx, key, load, k.e, k.now)
				b.set(k.i, keyResult{v: res.Value, st: res.Status, err: err})
			})
		}
	}
}

// sharedLoad is one loader call for the keys of several flights: the
// first flight to ask runs it (callBatch: bounded by LoadTimeout, a panic
// or runtime.Goexit an error), the others wait for its outcome. A flight
// another call runs already never asks; its key is loaded once more.
type sharedLoad struct {
	once sync.Once
	b    *batch
	keys []string
	vals map[string][]byte
	err  error
}

func (s *sharedLoad) get() (map[string][]byte, error) {
	s.once.Do(func() { s.vals, _, _, s.err = s.b.callBatch(s.keys) })
	return s.vals, s.err
}
