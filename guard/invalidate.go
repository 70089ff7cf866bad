package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Invalidate drops key's value on every node and any refresh in flight.
// A failure is returned, and retried in the background.
func (g *Group) Invalidate(ctx context.Context, key string) error {
	if err := g.check(ctx, key, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		return err
	}
	g.loc.Remove(key)
	g.reserve.Remove(key)
	g.hints.c.Remove(key)
	g.over.c.Remove(key)
	nm := g.names(key)
	if err := g.invalidate(ctx, nm); err != nil {
		g.retryLater(invTarget{name: key})
		return err
	}
	return nil
}

func (g *Group) invalidate(ctx context.Context, nm names) error {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	// Whatever the outcome (a timeout may have run the script), a GET sent
	// before it returns may carry the value it dropped: none is kept.
	defer g.loc.Changed(nm.entry)
	v, err := lua.GuardInvalidate.Run(rctx, g.rdb, nm.keys[:5], g.keepArg, nm.entry).Slice()
	if err != nil {
		g.redisFailed("invalidate", err)
		return fmt.Errorf("guard: invalidate: %w", err)
	}
	g.br.Success()
	if len(v) == 2 {
		g.foreign(nm, v[1])
	}
	return nil
}

// InvalidateTag invalidates every key holding the hash tag tag ("{tag}..."
// or "...{tag}..."), as Invalidate does. The HTTP middleware tags a URL so.
func (g *Group) InvalidateTag(ctx context.Context, tag string) error {
	switch {
	case tag == "" || strings.Contains(tag, "}"):
		return fmt.Errorf("guard: invalid hash tag %q (not empty, no '}')", tag)
	case len(tag) > MaxKeyBytes:
		return fmt.Errorf("guard: tag of %d bytes exceeds MaxKeyBytes (%d)", len(tag), MaxKeyBytes)
	}
	if err := g.check(ctx, "{"+tag+"}", noLoad); err != nil {
		return err
	}
	if err := g.invalidateTag(ctx, tag); err != nil {
		g.retryLater(invTarget{tag: true, name: tag})
		return err
	}
	return nil
}

// invalidateTag is InvalidateTag past its checks: one attempt.
func (g *Group) invalidateTag(ctx context.Context, tag string) error {
	g.dropLocalTag(tag)
	// Again once the script ran (or may have): a read sent before may
	// carry a value it dropped.
	defer g.dropLocalTag(tag)
	members, inv := g.tagNames(tag)
	own := strings.TrimSuffix(members, ":tkeys") + "/"
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	for range 8 {
		entries, err := g.rdb.SMembers(rctx, members).Result()
		if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			g.redisFailed("invalidate", err)
			return fmt.Errorf("guard: invalidate tag: %w", err)
		}
		keys := make([]string, 0, 2+5*len(entries))
		keys = append(keys, members, inv)
		for _, e := range entries {
			// Only the entry names of the tag's keys: a member another
			// writer added may name any key, the user's or another slot's
			// (the script reports it as foreign).
			if strings.HasPrefix(e, own) {
				keys = append(keys, e, e+":lease", e+":fence", e+":w", e+":inv")
			}
		}
		v, err := lua.GuardInvalidateTag.Run(rctx, g.rdb, keys, g.keepArg).Slice()
		if err != nil {
			g.redisFailed("invalidate", err)
			return fmt.Errorf("guard: invalidate tag: %w", err)
		}
		g.br.Success()
		if len(v) == 2 {
			g.foreign(names{user: "{" + tag + "}"}, v[1])
		}
		if n, _ := v[0].(int64); len(v) == 2 && n >= 0 {
			return nil
		}
	}
	return errors.New("guard: invalidate tag: its keys kept being filled; try again")
}

// dropLocalTag drops this process's local copies of the keys of tag, and
// what its reserve holds of them.
// (The fast path's hints need no dropping: its GET of a tagged key reads
// the tag's invalidation time too.)
func (g *Group) dropLocalTag(tag string) {
	g.loc.ChangedTag(hashtag.Base(g.opts.Namespace, tag))
	g.reserve.RemoveIf(func(key string) bool {
		t, ok := hashtag.Tag(key)
		return ok && t == tag
	})
}
