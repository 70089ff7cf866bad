package guard

import (
	"context"
	"fmt"
)

// Peek returns what is stored under key without loading it: one read, no
// lease taken, no waiting, no refresh started. The value comes with Status
// Hit (fresh, from Redis or the in-process tier) or Stale (in its stale
// window; a value that must be revalidated past its freshness is never
// returned). It returns ErrNotFound for a negative entry, and ErrNotCached
// when nothing servable is stored (nothing, an error marker, a corrupt
// entry, which is reported through Hooks.Corrupt) or Redis cannot be
// asked (the breaker is open, or the read failed: that error is wrapped
// too and reported through Hooks.RedisError).
//
// An HTTP cache uses it for a HEAD request, which the origin can answer
// itself when nothing is stored, and for a client's only-if-cached.
func (g *Group) Peek(ctx context.Context, key string) (Result, error) {
	if err := g.check(ctx, key, noLoad); err != nil {
		return Result{}, err
	}
	if r, ok := g.localHit(key); ok {
		return r, nil
	}
	probe, ok := g.br.Allow()
	if !ok {
		return Result{}, fmt.Errorf("%w: Redis unavailable (breaker open)", ErrNotCached)
	}
	defer g.br.Release(probe)
	nm := g.names(key)
	k := g.keepOf(nm.entry)
	rr, err := g.peekRead(ctx, nm)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrNotCached, err)
	}
	e, st := g.classify(key, rr)
	switch {
	case st == missing || st == passing || st == oversized || e.ErrMark:
		return Result{}, ErrNotCached
	case st == fresh:
		return g.served(key, e, rr.now, Hit, k)
	}
	return g.served(key, e, rr.now, Stale, k)
}

// noLoad stands for the loader Peek does not have, for the checks of Do.
func noLoad(context.Context) ([]byte, error) { return nil, ErrNotCached }
