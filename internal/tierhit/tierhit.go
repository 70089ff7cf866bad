// Package tierhit lets stampede's HTTP engine ask a guard.Group for the
// answer Do would give from the in-process tier alone, without building a
// load for it: a request served from memory then allocates nothing for
// the guard (a load is a closure over the request, which Do must be
// handed before it knows whether it will run it).
//
// Package guard sets Hit in its init; package guard imports this one, not
// the other way round, so the Group is passed as an any.
package tierhit

import (
	"context"
	"time"
)

// Hit reports what g.Do(ctx, key, load) would return from the in-process
// tier, with any load: ok is false when Do would go further (the tier
// holds no servable copy of key, an early refresh may be due, or Do would
// fail: a closed Group, a bad key, a done ctx), and the caller then calls
// Do. When ok, the call counts as Do's did (hooks, hot keys). stale is
// Do's Status Stale (else Hit); age and fresh are Result.Age and
// Result.Fresh. g must be a *guard.Group.
var Hit func(g any, ctx context.Context, key string) (val []byte, stale bool, age, fresh time.Duration, ok bool)
