package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
)

// Peek returns what is stored under key without loading it: Hit or Stale,
// ErrNotFound for a negative entry, else ErrNotCached.
func (g *Group) Peek(ctx context.Context, key string) (Result, error) {
	if err := g.check(ctx, key, noLoad); err != nil {
		return Result{}, err
	}
	if r, ok := g.localHit(key); ok {
		return r, nil
	}
	probe, ok := g.br.AllowKey(key)
	if !ok {
		return g.peekReserve(key, errors.New("the breaker is open: Redis unavailable"))
	}
	defer g.br.Release(probe)
	nm := g.names(key)
	k := g.keepOf(nm.entry)
	rr, err := g.peekRead(ctx, nm)
	if err != nil {
		return g.peekReserve(key, err)
	}
	e, st := g.classify(key, rr)
	switch {
	case st == missing || st == passing || st == oversized || e.ErrMark:
		return Result{}, ErrNotCached
	case st == fresh:
		return g.served(key, e, rr.now, Hit, k, true)
	}
	return g.served(key, e, rr.now, Stale, k, true)
}

// noLoad stands for the loader Peek does not have, for the checks of Do.
func noLoad(context.Context) ([]byte, error) { return nil, ErrNotCached }

// peekReserve answers a Peek that could not ask Redis (why) from the
// reserve, as a call would be answered (see fromReserve), without a
// refresh.
func (g *Group) peekReserve(key string, why error) (Result, error) {
	k, ok := g.reserve.Get(key)
	now := time.Now()
	switch {
	case !ok || !now.Before(k.StaleUntil) || k.Mark == tier.Failed:
		return Result{}, fmt.Errorf("%w: %w", ErrNotCached, why)
	case k.Mark == tier.NotFound:
		return Result{Status: Degraded, Age: now.Sub(k.Base)}, ErrNotFound
	}
	res := Result{Value: k.Value, Status: Degraded, Age: now.Sub(k.Base), Fresh: k.FreshUntil.Sub(now)}
	if !now.Before(k.FreshUntil) {
		res.Status = Stale
	}
	return res, nil
}
