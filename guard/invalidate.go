package guard

import (
	"context"
	"fmt"

	"github.com/stampede-go/stampede/scripts"
)

// Invalidate deletes key's value everywhere: its Redis entry (and this
// process's local copy), any refresh in flight (its fill will be rejected)
// and wakes the waiters so they load anew.
func (g *Group) Invalidate(ctx context.Context, key string) error {
	if err := g.check(ctx, key, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		return err
	}
	if g.loc != nil {
		g.loc.Remove(key)
	}
	g.hints.c.Remove(key)
	g.over.c.Remove(key)
	nm := g.names(key)
	return g.invalidate(ctx, nm)
}

func (g *Group) invalidate(ctx context.Context, nm names) error {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	v, err := scripts.GuardInvalidate().Run(rctx, g.rdb, nm.keys, g.keepArg, nm.entry).Slice()
	if err != nil {
		g.redisFailed("invalidate", err)
		return fmt.Errorf("guard: invalidate: %w", err)
	}
	g.br.success()
	if len(v) == 2 {
		g.foreign(nm, v[1])
	}
	return nil
}
