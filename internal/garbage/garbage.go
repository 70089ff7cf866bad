// Package garbage drops an entry that its reader could not decode, for the
// adapters that store encoded answers through a guard.Group: the readers
// that found it share one drop, and a refill is never dropped.
package garbage

import (
	"bytes"
	"context"
	"errors"

	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/guard"
)

// Drops coalesces, per key, the drops of one process. The zero value is
// ready.
type Drops struct{ sf singleflight.Group }

// Drop drops the value seen under key in g, and reports whether the
// caller should ask the guard once more (the readers then share one load
// that stores a good answer, instead of each running its own until the
// entry expires). The callers of one process share one drop, which drops
// the entry only if it still holds what was seen: a caller that read the
// garbage before another dropped it and a load refilled it must not drop
// the refill. The drop runs on the first caller's context without its
// cancellation (each Redis call bounded by the Group's RedisTimeout): that
// caller leaving must not decide the answer of those that joined it. It
// reports false when the guard could not tell (Redis in trouble).
func (d *Drops) Drop(ctx context.Context, g *guard.Group, key string, seen []byte) bool {
	ctx = context.WithoutCancel(ctx)
	again, _, _ := d.sf.Do(key, func() (any, error) {
		res, err := g.Peek(ctx, key)
		switch {
		case err == nil && bytes.Equal(res.Value, seen):
			return g.Invalidate(ctx, key) == nil, nil
		case err == nil || errors.Is(err, guard.ErrNotCached):
			return true, nil // dropped, or refilled, meanwhile
		}
		return false, nil
	})
	return again.(bool)
}
